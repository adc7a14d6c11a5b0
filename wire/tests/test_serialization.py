"""JSON header decoding: the scanner fast path and the full decoder agree; errors stay HeaderError."""

from __future__ import annotations

import pytest

from rmqgate.wire import FrameDecoder, RemotingCommand, encode_frame
from rmqgate.wire.codes import LanguageCode, SerializeType
from rmqgate.wire.errors import HeaderError
from rmqgate.wire.headers import SendMessageRequestHeader
from rmqgate.wire.serialization import decode_json_header

HEADER = b'{"code":310,"extFields":{"b":"T","e":"3"},"flag":0,"language":"CPP","opaque":7,"version":409}'


@pytest.mark.parametrize("text", [HEADER, b" " + HEADER, HEADER + b" \n", b"\t" + HEADER + b"\r\n"])
def test_surrounding_whitespace_decodes_like_the_bare_object(text: bytes) -> None:
    cmd = decode_json_header(text)
    assert (cmd.code, cmd.opaque, cmd.version, cmd.flag) == (310, 7, 409, 0)
    assert cmd.language == LanguageCode.CPP and cmd.serialize_type == SerializeType.JSON
    assert cmd.ext_fields == {"b": "T", "e": "3"}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (HEADER + b"{}", "does not parse"),
        (HEADER[:-1], "does not parse"),
        (b"", "does not parse"),
        (b"[" * 100_000, "does not parse"),  # nesting deeper than the recursion limit
        (b"[1]", "not an object"),
        (b'{"opaque":1}', "no 'code'"),
        (b'{"code":"310"}', "must be integers"),
        (b"\xff{}", "not valid UTF-8"),
    ],
)
def test_bad_json_headers_are_header_errors(text: bytes, match: str) -> None:
    with pytest.raises(HeaderError, match=match):
        decode_json_header(text)


def test_non_string_ext_values_are_normalised() -> None:
    cmd = decode_json_header(b'{"code":1,"extFields":{"a":1,"b":true,"c":null,"d":"x","e":1.5}}')
    assert cmd.ext_fields == {"a": "1", "b": "true", "d": "x", "e": "1.5"}


@pytest.mark.parametrize("value", ["-1", "0", "7", "1023", "1024", "-2", "+5", "00", "-0", "2147483647"])
def test_int_fields_parse_like_integer_parse_int(value: str) -> None:
    """The small-number shortcut and the parser agree (range and syntax: test_headers.py)."""
    ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": value, "f": "0", "g": "1", "h": "0"}
    assert SendMessageRequestHeader.from_ext_v2(ext).queue_id == int(value)
    ext["j"] = value
    assert SendMessageRequestHeader.from_ext_v2(ext).reconsume_times == int(value)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_lone_surrogate_a_json_request_carried_in_is_written_as_java_writes_it(serialize_type: int) -> None:
    """A JSON header may escape a lone surrogate; an answer echoing it (a remark, an ext field) is
    written as Java's getBytes(UTF_8) writes it, "?", instead of failing to encode."""
    request = decode_json_header(b'{"code":17,"extFields":{"topic":"a\\ud800b"},"opaque":3,"version":1}')
    assert request.ext_fields == {"topic": "a\ud800b"}
    answer = RemotingCommand(
        17, flag=1, opaque=3, remark=f"topic {request.ext_fields['topic']} bad",
        ext_fields=dict(request.ext_fields), serialize_type=serialize_type,
    )  # fmt: skip
    (decoded,) = FrameDecoder().feed(encode_frame(answer))
    assert decoded.remark == "topic a?b bad" and decoded.ext_fields == {"topic": "a?b"}
