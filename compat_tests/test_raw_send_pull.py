"""Send (10 / 310 / 320) and pull (11) over the raw wire, both serializations, incl. long polling."""

from __future__ import annotations

import re
import time

import pytest

from rmqgate.compat_tests.wire_client import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    decode_messages,
    encode_batch,
    loads,
    uniq_key,
    wait_until,
)
from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]
OFFSET_MSG_ID = re.compile(r"^[0-9A-F]{32}$")


def pull_all(client, group, topic, queue_id, offset=0, subscription="*", **kw):
    return client.pull(
        group, topic, queue_id, offset, sys_flag=PULL_SUBSCRIPTION, subscription=subscription, **kw
    )


@pytest.mark.parametrize("v2", [True, False], ids=["SEND_MESSAGE_V2", "SEND_MESSAGE"])
@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_send_then_pull(cluster, uniq, make_topic, dispatched, ser, v2):
    topic = make_topic(uniq())
    group = uniq("g")
    with cluster.broker_client(serialize_type=ser) as c:
        sent = []
        for i in range(3):
            resp = c.send_message(topic, f"body-{i}".encode(), queue_id=1, tags="TagA", keys=f"k{i}", v2=v2)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert resp.serialize_type == ser
            ext = resp.ext_fields
            assert OFFSET_MSG_ID.match(ext["msgId"]), ext
            assert ext["queueId"] == "1"
            assert int(ext["queueOffset"]) == i
            assert "MSG_REGION" in ext and "TRACE_ON" in ext
            sent.append(ext["msgId"])
        assert len(set(sent)) == 3
        dispatched(topic, 1, 3)

        resp = pull_all(c, group, topic, 1)
        assert resp.code == ResponseCode.SUCCESS, resp
        assert resp.serialize_type == ser
        assert int(resp.ext_fields["nextBeginOffset"]) == 3
        assert int(resp.ext_fields["minOffset"]) == 0
        assert int(resp.ext_fields["maxOffset"]) == 3
        msgs = decode_messages(resp.body)
        assert [bytes(m.body) for m in msgs] == [b"body-0", b"body-1", b"body-2"]
        assert [m.queue_offset for m in msgs] == [0, 1, 2]
        assert all(m.topic == topic and m.queue_id == 1 for m in msgs)
        assert [m.properties["KEYS"] for m in msgs] == ["k0", "k1", "k2"]
        assert all(m.properties["TAGS"] == "TagA" and "UNIQ_KEY" in m.properties for m in msgs)


def test_send_negative_queue_id_picks_a_queue(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq(), queues=4)
    resp = broker.send_message(topic, b"x", queue_id=-1)
    assert resp.code == ResponseCode.SUCCESS
    assert 0 <= int(resp.ext_fields["queueId"]) < 4


def test_send_auto_creates_topic_from_tbw102(cluster, uniq, broker, namesrv):
    """autoCreateTopicEnable (the default, and set in the suite's broker.conf)."""
    topic = uniq("auto")
    resp = broker.send_message(topic, b"auto", queue_id=0)
    assert resp.code == ResponseCode.SUCCESS, resp
    ok = wait_until(lambda: namesrv.route(topic).code == ResponseCode.SUCCESS, timeout=40, interval=0.3)
    assert ok, "auto-created topic never got a route"
    queues = loads(namesrv.route(topic).body)["queueDatas"]
    assert queues[0]["writeQueueNums"] == 4  # min(defaultTopicQueueNums=4 from the client, TBW102's)
    assert queues[0]["perm"] == 6  # TBW102's perm without INHERIT


def test_send_with_unknown_default_topic_is_topic_not_exist(cluster, uniq, broker):
    resp = broker.send_message(
        uniq("nodefault"), b"x", extra={"defaultTopic": uniq("no_such_default")}, v2=False
    )
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST


def test_send_to_bad_queue_id(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq(), queues=2)
    resp = broker.send_message(topic, b"x", queue_id=7)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "queueId" in (resp.remark or "")


@pytest.mark.parametrize(
    "topic", ["T" * 128, "bad topic", "semi;colon"], ids=["too-long", "space", "semicolon"]
)
def test_send_to_invalid_topic_name(cluster, broker, topic):
    """4.9.8 msgCheck runs TopicValidator.validateTopic: SYSTEM_ERROR with a remark."""
    resp = broker.send_message(topic, b"x")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT"])
def test_send_to_not_allowed_system_topic(cluster, broker, topic):
    """TopicValidator.isNotAllowedSendTopic: NO_PERMISSION."""
    assert broker.send_message(topic, b"x").code == ResponseCode.NO_PERMISSION


def test_schedule_topic_v2_is_an_ordinary_topic_in_4_9(cluster, broker):
    """SCHEDULE_TOPIC_XXXX_V2 is 5.x's; 4.9.8's TopicValidator lists neither it nor any timer topic."""
    assert broker.send_message("SCHEDULE_TOPIC_XXXX_V2", b"x").code == ResponseCode.SUCCESS


def test_send_oversize_body_is_message_illegal(cluster, uniq, make_topic, broker):
    """Broker maxMessageSize default 4 MiB (PROTOCOL.md §4.2)."""
    topic = make_topic(uniq())
    resp = broker.send_message(topic, b"\0" * (4 * 1024 * 1024 + 1024), timeout=30)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    # and the connection still works
    assert broker.send_message(topic, b"small").code == ResponseCode.SUCCESS


def test_send_oneway_is_stored_without_answer(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq())
    opaque = broker.send(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "g",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": f"UNIQ_KEY\x01{uniq_key()}",
        },
        b"oneway-body",
        oneway=True,
    )
    assert broker.poll_response(opaque, 1.0) is None
    got = wait_until(lambda: pull_all(broker, uniq("g"), topic, 0).code == ResponseCode.SUCCESS, timeout=15)
    assert got
    msgs = decode_messages(pull_all(broker, uniq("g"), topic, 0).body)
    assert [bytes(m.body) for m in msgs] == [b"oneway-body"]


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_send_batch_message(cluster, uniq, make_topic, dispatched, ser):
    topic = make_topic(uniq())
    keys = [uniq_key() for _ in range(3)]
    body = encode_batch(
        (f"b{i}".encode(), {"KEYS": f"bk{i}", "UNIQ_KEY": keys[i], "WAIT": "true"}) for i in range(3)
    )
    with cluster.broker_client(serialize_type=ser) as c:
        resp = c.send_message(topic, body, queue_id=2, batch=True)
        assert resp.code == ResponseCode.SUCCESS, resp
        ids = resp.ext_fields["msgId"].split(",")
        assert len(ids) == 3 and all(OFFSET_MSG_ID.match(i) for i in ids)
        assert resp.ext_fields["queueOffset"] == "0"
        dispatched(topic, 2, 3)
        msgs = decode_messages(pull_all(c, uniq("g"), topic, 2).body)
        assert [bytes(m.body) for m in msgs] == [b"b0", b"b1", b"b2"]
        assert [m.properties["KEYS"] for m in msgs] == ["bk0", "bk1", "bk2"]
        assert [m.properties["UNIQ_KEY"] for m in msgs] == keys


@pytest.mark.rmqgate_only
def test_cpp_style_batch_310_with_m_1_is_unpacked(cluster, uniq, make_topic, broker):
    """C++ 2.1.0 sends batches as SEND_MESSAGE_V2 with m="1"; Java stores them as one broken message."""
    topic = make_topic(uniq())
    body = encode_batch((f"c{i}".encode(), {"UNIQ_KEY": uniq_key()}) for i in range(3))
    resp = broker.send_message(
        topic, body, queue_id=0, batch=True, code=RequestCode.SEND_MESSAGE_V2, extra={"batch": "1"}
    )
    assert resp.code == ResponseCode.SUCCESS, resp
    msgs = decode_messages(pull_all(broker, uniq("g"), topic, 0).body)
    assert [bytes(m.body) for m in msgs] == [b"c0", b"c1", b"c2"]


def test_pull_status_mapping(cluster, uniq, make_topic, broker, dispatched):
    """PROTOCOL.md §3.2: 19 at the end of a queue or an empty queue at 0, 21 when badly out of range."""
    topic = make_topic(uniq(), queues=2)
    group = uniq("g")
    assert pull_all(broker, group, topic, 1, 0).code == ResponseCode.PULL_NOT_FOUND
    assert pull_all(broker, group, topic, 1, 5).code == ResponseCode.PULL_OFFSET_MOVED
    for _ in range(2):
        assert broker.send_message(topic, b"m", queue_id=0).code == ResponseCode.SUCCESS
    dispatched(topic, 0, 2)
    resp = pull_all(broker, group, topic, 0, 2)
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert resp.ext_fields["nextBeginOffset"] == "2"
    resp = pull_all(broker, group, topic, 0, 50)
    assert resp.code == ResponseCode.PULL_OFFSET_MOVED
    # OFFSET_OVERFLOW_BADLY corrects to the max offset, min offset 0 or not (4.9.8's getMessage; the
    # corpus's h_PullByOffset pull at 110 got nextBeginOffset=10): a consumer resuming there re-reads nothing
    assert resp.ext_fields["nextBeginOffset"] == "2"
    resp = pull_all(broker, group, topic, 0, 1, max_nums=1)
    assert resp.code == ResponseCode.SUCCESS
    assert len(decode_messages(resp.body)) == 1
    assert resp.ext_fields["nextBeginOffset"] == "2"


def test_pull_errors(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq(), queues=2)
    assert pull_all(broker, uniq("g"), uniq("nosuch"), 0).code == ResponseCode.TOPIC_NOT_EXIST
    assert pull_all(broker, uniq("g"), topic, 9).code == ResponseCode.SYSTEM_ERROR
    # no subscription in the request and no heartbeat for the group
    resp = broker.pull(uniq("g"), topic, 0, 0, sys_flag=0)
    assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_pull_tag_filtering(cluster, uniq, make_topic, dispatched, ser):
    topic = make_topic(uniq(), queues=1)
    group = uniq("g")
    with cluster.broker_client(serialize_type=ser) as c:
        for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", None]):
            assert c.send_message(topic, f"{i}".encode(), tags=tag).code == ResponseCode.SUCCESS
        dispatched(topic, 0, 5)
        resp = pull_all(c, group, topic, 0, subscription="TagA || TagC")
        assert resp.code == ResponseCode.SUCCESS
        assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"0", b"2", b"3"]
        # nothing matches: 20 with the offset moved past what was scanned
        resp = pull_all(c, group, topic, 0, subscription="TagZ")
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert resp.ext_fields["nextBeginOffset"] == "5"
        # FilterAPI: only no text, "" or "*" is every tag; " " and " *" (the tag "*") match none here
        for sub in (" ", " *"):
            resp = pull_all(c, group, topic, 0, subscription=sub)
            assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY, (sub, resp)
        resp = pull_all(c, group, topic, 0, subscription="TagC||")  # trailing empty parts dropped
        assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"2"]
        resp = pull_all(c, group, topic, 0, subscription="||")  # splits into nothing
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, resp


def test_pull_uses_heartbeat_subscription(cluster, uniq, make_topic, broker, dispatched):
    topic = make_topic(uniq(), queues=1)
    group = uniq("g")
    hb = broker.heartbeat(uniq("client"), consumers=[{"group": group, "topics": {topic: "TagB"}}])
    assert hb.code == ResponseCode.SUCCESS
    for tag in ["TagA", "TagB", "TagA", "TagB"]:
        broker.send_message(topic, tag.encode(), tags=tag)
    dispatched(topic, 0, 4)
    resp = broker.pull(group, topic, 0, 0, sys_flag=0, sub_version=0)
    assert resp.code == ResponseCode.SUCCESS, resp
    assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"TagB", b"TagB"]


def test_pull_commit_offset_side_effect(cluster, uniq, make_topic, broker, dispatched):
    topic = make_topic(uniq(), queues=1)
    group = uniq("g")
    for _ in range(3):
        broker.send_message(topic, b"x")
    dispatched(topic, 0, 3)
    flags = PULL_SUBSCRIPTION | PULL_COMMIT_OFFSET
    resp = broker.pull(group, topic, 0, 2, commit_offset=2, sys_flag=flags, subscription="*")
    assert resp.code == ResponseCode.SUCCESS
    q = broker.invoke(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0}
    )
    assert q.code == ResponseCode.SUCCESS
    assert q.ext_fields["offset"] == "2"


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_long_poll_wakes_on_arrival(cluster, uniq, make_topic, dispatched, ser):
    topic = make_topic(uniq(), queues=2)
    group = uniq("g")
    with cluster.broker_client(serialize_type=ser) as poller, cluster.broker_client() as producer:
        producer.send_message(topic, b"before", queue_id=1)
        dispatched(topic, 1, 1)  # a pull past the queue's end is corrected, not parked
        opaque = poller.pull(
            group,
            topic,
            1,
            1,
            sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND,
            subscription="*",
            suspend_ms=15000,
            send_only=True,
        )
        assert poller.poll_response(opaque, 1.0) is None, "pull at the queue end must park"
        # a message to another queue does not release it
        producer.send_message(topic, b"other-queue", queue_id=0)
        assert poller.poll_response(opaque, 0.5) is None
        t0 = time.monotonic()
        producer.send_message(topic, b"wake-up", queue_id=1)
        resp = poller.wait(opaque, timeout=10)
        assert time.monotonic() - t0 < 5.0
        assert resp.code == ResponseCode.SUCCESS
        assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"wake-up"]


def test_long_poll_times_out_with_pull_not_found(cluster, uniq, make_topic, broker):
    """Answered after the request's suspend timeout (Java re-checks parked pulls every 5 s)."""
    topic = make_topic(uniq(), queues=1)
    t0 = time.monotonic()
    opaque = broker.pull(
        uniq("g"),
        topic,
        0,
        0,
        sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND,
        subscription="*",
        suspend_ms=1000,
        send_only=True,
    )
    resp = broker.wait(opaque, timeout=12)
    elapsed = time.monotonic() - t0
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert elapsed >= 0.9


def test_parked_pulls_do_not_block_other_requests(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq(), queues=1)
    opaque = broker.pull(
        uniq("g"),
        topic,
        0,
        0,
        sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND,
        subscription="*",
        suspend_ms=15000,
        send_only=True,
    )
    resp = broker.send_message(topic, b"same-connection", queue_id=0)
    assert resp.code == ResponseCode.SUCCESS
    parked = broker.wait(opaque, timeout=10)
    assert parked.code == ResponseCode.SUCCESS


@pytest.mark.parametrize("code", [RequestCode.LITE_PULL_MESSAGE], ids=["LITE_PULL_MESSAGE"])
@pytest.mark.rmqgate_only
def test_lite_pull_code_served_like_pull(cluster, uniq, make_topic, broker, code):
    """5.x lite-pull consumers send 361, which the 4.9 broker does not serve."""
    topic = make_topic(uniq(), queues=1)
    broker.send_message(topic, b"lite")
    resp = broker.pull(
        uniq("g"),
        topic,
        0,
        0,
        sys_flag=PULL_SUBSCRIPTION | 0x10,
        subscription="*",
        code=code,
        version=479,
        extra={"maxMsgBytes": 1 << 20},
    )
    assert resp.code == ResponseCode.SUCCESS
    assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"lite"]


def test_5x_pull_fields_accepted(cluster, uniq, make_topic, dispatched):
    """5.3.3 clients send maxMsgBytes (and header version 479) on PULL_MESSAGE; 4.9 ignores it."""
    topic = make_topic(uniq(), queues=1)
    with cluster.broker_client(version=479) as c:
        c.send_message(topic, b"five")
        dispatched(topic, 0, 1)
        resp = pull_all(c, uniq("g"), topic, 0, extra={"maxMsgBytes": 1 << 20, "bname": cluster.broker_name})
        assert resp.code == ResponseCode.SUCCESS
        assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"five"]
