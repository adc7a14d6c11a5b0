"""Request, response and version codes."""

from __future__ import annotations

from rmqgate.wire.codes import MQVersion, request_name, version_desc


def test_version_names_agree_with_the_declared_versions() -> None:
    """``version_desc`` rebuilds MQVersion.Version's name list; the ordinals rmqgate names in
    ``MQVersion`` must be the same constants there."""
    assert {m.name: version_desc(m.value) for m in MQVersion} == {m.name: m.name for m in MQVersion}
    assert (version_desc(0), version_desc(27), version_desc(10**6)) == (
        "V3_0_0_SNAPSHOT",
        "V3_0_6",
        "HIGHER_VERSION",
    )


def test_request_name_of_an_unknown_code_is_the_number() -> None:
    assert (request_name(10), request_name(4242)) == ("SEND_MESSAGE", "4242")
