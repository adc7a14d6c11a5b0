"""Error paths and hostile input: unknown codes, bad headers, broken frames; the server stays up."""

from __future__ import annotations

import json
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.compat_tests.wire_client import ConnectionClosed, WireClient, uniq_key
from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType
from rmqgate.wire.layout import FRAME_PREFIX

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]


def raw_json_frame(header: dict | bytes, body: bytes = b"") -> bytes:
    data = header if isinstance(header, bytes) else json.dumps(header).encode()
    return FRAME_PREFIX.pack(4 + len(data) + len(body), len(data)) + data + body


def closed_or_error(c: WireClient, timeout: float = 5.0) -> bool:
    """The server closed the connection, or answered with an error code, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        if any(r.code != ResponseCode.SUCCESS for r in c.responses.values()):
            return True
        try:
            c._read_some(deadline)
        except TimeoutError:
            return False
        except (ConnectionClosed, OSError):
            return True


@pytest.mark.parametrize(
    "target",
    [
        # Java's name server has a default processor that returns no response for unknown codes
        # (DefaultRequestProcessor); rmqgate answers REQUEST_CODE_NOT_SUPPORTED there too.
        pytest.param("namesrv", marks=pytest.mark.rmqgate_only),
        "broker",
    ],
)
@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_unknown_code_is_request_code_not_supported(cluster, ser, target):
    addr = cluster.namesrv if target == "namesrv" else cluster.broker
    code = 9999 if target == "broker" else 777
    with WireClient(addr, serialize_type=ser) as c:
        resp = c.invoke(code, {"x": "y"}, b"body")
        assert resp.is_response
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert str(code) in (resp.remark or "")
        # the connection stays usable
        assert c.invoke(9998).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_oneway_unknown_code_gets_no_answer(cluster, broker):
    opaque = broker.send(9999, oneway=True)
    assert broker.poll_response(opaque, 0.5) is None
    assert broker.invoke(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_missing_required_header_field(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq())
    with cluster.broker_client(serialize_type=ser) as c:
        # SEND_MESSAGE_V2 without "b" (topic)
        resp = c.invoke(
            RequestCode.SEND_MESSAGE_V2,
            {"a": "g", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0},
            b"x",
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark
        # PULL_MESSAGE without queueOffset: 4.9.8 decodes the pull header leniently (FastCodesHeader)
        # and fails where it reads the field, after the checks before it
        pull = {
            "consumerGroup": "g",
            "topic": topic,
            "queueId": 0,
            "maxMsgNums": 1,
            "sysFlag": 0,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subVersion": 0,
        }
        resp = c.invoke(RequestCode.PULL_MESSAGE, pull)
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST  # no subscription, no consumer of "g"
        resp = c.invoke(RequestCode.PULL_MESSAGE, {**pull, "sysFlag": 4, "subscription": "*"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark
        # no extFields at all
        assert c.invoke(RequestCode.QUERY_CONSUMER_OFFSET).code == ResponseCode.SYSTEM_ERROR
        assert c.send_message(topic, b"after errors").code == ResponseCode.SUCCESS


def test_malformed_header_field_values(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq())
    resp = broker.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "zero"})
    assert resp.code == ResponseCode.SYSTEM_ERROR
    resp = broker.invoke(
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": "g", "topic": topic, "queueId": "99999999999999999999"},
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert broker.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}).code == 0


def test_cpp_style_json_header_with_numbers_and_newline(cluster, uniq, make_topic, broker):
    """C++ core: extFields values as JSON numbers, no serializeTypeCurrentRPC, trailing newline."""
    topic = make_topic(uniq())
    header = {
        "code": 310,
        "language": "CPP",
        "version": 333,
        "opaque": 5151,
        "flag": 0,
        "remark": "",
        "extFields": {
            "a": "cpp_group",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": 1,
            "f": 0,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": f"UNIQ_KEY\x01{uniq_key()}",
            "j": 0,
            "k": False,
            "AccessKey": "",
            "Signature": "",
            "OnsChannel": "ALIYUN",
        },
    }
    broker.send_raw(raw_json_frame(json.dumps(header).encode() + b"\n", b"cpp-body"))
    resp = broker.wait(5151)
    assert resp.code == ResponseCode.SUCCESS, resp
    assert resp.ext_fields["queueId"] == "1"


def test_pipelined_requests_all_answered(cluster, broker):
    opaques = [broker.send(RequestCode.GET_BROKER_RUNTIME_INFO) for _ in range(10)]
    opaques += [broker.send(9999) for _ in range(10)]
    codes = [broker.wait(o).code for o in opaques]
    assert codes == [0] * 10 + [ResponseCode.REQUEST_CODE_NOT_SUPPORTED] * 10


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(FRAME_PREFIX.pack(20, 100) + b"x" * 16, id="header-longer-than-frame"),
        pytest.param(FRAME_PREFIX.pack(32 * 1024 * 1024, 10) + b"x" * 64, id="frame-over-16MiB"),
        pytest.param(FRAME_PREFIX.pack(12, (7 << 24) | 8) + b"x" * 8, id="unknown-serialize-type"),
        pytest.param(FRAME_PREFIX.pack(2, 0), id="length-shorter-than-header-word"),
        pytest.param(raw_json_frame(b"{not json"), id="bad-json"),
        pytest.param(raw_json_frame(b"[1,2,3]"), id="json-not-an-object"),
        pytest.param(raw_json_frame(b'{"language":"JAVA"}'), id="json-without-code"),
        pytest.param(FRAME_PREFIX.pack(4 + 10, (1 << 24) | 10) + b"\x00" * 10, id="short-rocketmq-header"),
        pytest.param(
            FRAME_PREFIX.pack(4 + 25, (1 << 24) | 25)
            + b"\x00\x1e"
            + b"\x00" * 11
            + b"\x7f\xff\xff\xff"
            + b"\x00" * 8,
            id="rocketmq-remark-overrun",
        ),
    ],
)
def test_broken_frames_close_or_error_and_others_unaffected(cluster, frame):
    with cluster.broker_client() as bystander, cluster.broker_client() as victim:
        victim.send_raw(frame)
        assert closed_or_error(victim), "a broken frame must close the connection or get an error"
        assert bystander.invoke(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS
    with cluster.namesrv_client() as ns_victim:
        ns_victim.send_raw(frame)
        if b'{"language":"JAVA"}' not in frame:  # code 0: Java's name server just stays silent
            assert closed_or_error(ns_victim)
    with cluster.namesrv_client() as ns:
        assert ns.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_random_bytes_never_take_the_server_down(cluster):
    """A bounded random-bytes run (seeded) against both ports."""
    rng = random.Random(4)
    for addr in (cluster.broker, cluster.namesrv):
        for _ in range(40):
            size = rng.choice([1, 3, 4, 7, 8, 16, 100, 1000])
            blob = bytes(rng.getrandbits(8) for _ in range(size))
            if rng.random() < 0.5:  # plausible prefix, garbage inside
                blob = FRAME_PREFIX.pack(
                    4 + len(blob), rng.choice([0, 1 << 24]) | min(len(blob), rng.randrange(64))
                )
                blob += bytes(rng.getrandbits(8) for _ in range(size))
            with WireClient(addr, timeout=3) as c:
                c.send_raw(blob)
                c.is_closed_by_peer(0.05)
        with WireClient(addr) as c:
            code = (
                RequestCode.GET_BROKER_RUNTIME_INFO
                if addr == cluster.broker
                else RequestCode.GET_BROKER_CLUSTER_INFO
            )
            assert c.invoke(code).code == ResponseCode.SUCCESS


def test_half_frame_then_close_is_harmless(cluster, uniq, make_topic):
    topic = make_topic(uniq())
    with cluster.broker_client() as c:
        frame = raw_json_frame(
            {
                "code": 30,
                "flag": 0,
                "language": "JAVA",
                "opaque": 1,
                "version": 409,
                "extFields": {"topic": topic, "queueId": "0"},
            }
        )
        c.send_raw(frame[: len(frame) // 2])
    with cluster.broker_client() as c:
        assert c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}).code == 0


# Fuzzed headers: well-framed commands with random codes, header fields and bodies. Codes that
# change cluster-wide configuration are left out (they would be legitimate, not a crash), and no
# generated value names a built-in topic (deleting TBW102 is legal and would break later tests).
_EXCLUDED_CODES = {
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
    RequestCode.UPDATE_NAMESRV_CONFIG,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
}
_CODES = sorted(int(c) for c in RequestCode if c not in _EXCLUDED_CODES)
_FIELD_NAMES = ["topic", "queueId", "consumerGroup", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
                "suspendTimeoutMillis", "subVersion", "subscription", "offset", "timestamp", "key", "maxNum",
                "a", "b", "c", "d", "e", "f", "g", "h", "i", "m", "producerGroup", "clientID", "namespace",
                "value", "brokerName", "commitLogOffset", "tranStateTableOffset", "commitOrRollback", "group",
                "delayLevel", "readQueueNums", "writeQueueNums", "perm"]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["", "0", "-1", "1", "2147483648", "-9223372036854775809", "99999999999999999999", "true",
                     "1.5", "%RETRY%x", "*", "TagA || TagB", "\x01\x02", "null"]),
    st.text(max_size=40),
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    code=st.one_of(st.sampled_from(_CODES), st.integers(-32768, 32767)),
    ext=st.one_of(st.none(), st.dictionaries(st.sampled_from(_FIELD_NAMES), _VALUES, max_size=8)),
    body=st.one_of(st.none(), st.binary(max_size=300), st.just(b'{"clientID":"x","consumerDataSet":[{}]}')),
    ser=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
    oneway=st.booleans(),
    target=st.sampled_from(["broker", "namesrv"]),
)
def test_fuzzed_headers_never_take_the_server_down(cluster, code, ext, body, ser, oneway, target):
    if code in _EXCLUDED_CODES:
        return
    addr = cluster.broker if target == "broker" else cluster.namesrv
    with WireClient(addr, serialize_type=ser, timeout=5) as c:
        opaque = c.send(code, ext, body, oneway=oneway)
        if not oneway:
            # answered, parked (pulls with the suspend flag), or closed: all fine; a crash is not
            try:
                c.poll_response(opaque, 0.3)
            except (ConnectionClosed, OSError):
                pass
    health_code = (
        RequestCode.GET_BROKER_RUNTIME_INFO if target == "broker" else RequestCode.GET_BROKER_CLUSTER_INFO
    )
    with WireClient(addr, timeout=5) as health:
        assert health.invoke(health_code).code == ResponseCode.SUCCESS
