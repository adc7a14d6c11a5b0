"""Consumer offsets, queue offsets, time search, view by id and query by key over the raw wire."""

from __future__ import annotations

import time

import pytest

from rmqgate.compat_tests.wire_client import decode_messages, loads, wait_until
from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]


def query_offset(c, group, topic, queue_id):
    return c.invoke(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id}
    )


def test_fresh_group_offset_in_memory_queue_is_zero(cluster, uniq, make_topic, broker):
    """ConsumerManageProcessor: no stored offset, min offset 0 and message 0 not swapped out -> 0."""
    topic = make_topic(uniq(), queues=1)
    broker.send_message(topic, b"x")
    resp = query_offset(broker, uniq("g"), topic, 0)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.ext_fields["offset"] == "0"


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_update_and_query_consumer_offset(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq(), queues=2)
    group = uniq("g")
    with cluster.broker_client(serialize_type=ser) as c:
        for _ in range(5):
            c.send_message(topic, b"x", queue_id=1)
        resp = c.invoke(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": 1, "commitOffset": 3},
        )
        assert resp.code == ResponseCode.SUCCESS
        assert resp.serialize_type == ser
        resp = query_offset(c, group, topic, 1)
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["offset"] == "3"
        # oneway (what the Java client's persistAll sends): no answer, but stored
        opaque = c.send(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": 1, "commitOffset": 5},
            oneway=True,
        )
        assert c.poll_response(opaque, 0.5) is None
        assert wait_until(lambda: query_offset(c, group, topic, 1).ext_fields["offset"] == "5", timeout=5)
        resp = c.invoke(RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert resp.code == ResponseCode.SUCCESS
        table = loads(resp.body)["offsetTable"]
        assert table[f"{topic}@{group}"]["1"] == 5


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_min_max_offsets_and_store_times(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq(), queues=2)
    with cluster.broker_client(serialize_type=ser) as c:
        t_before = int(time.time() * 1000) - 5
        for i in range(4):
            c.send_message(topic, f"{i}".encode(), queue_id=0)
            time.sleep(0.02)
        t_after = int(time.time() * 1000) + 5
        q = {"topic": topic, "queueId": 0}
        resp = c.invoke(RequestCode.GET_MAX_OFFSET, q)
        assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "4")
        resp = c.invoke(RequestCode.GET_MIN_OFFSET, q)
        assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        empty = {"topic": topic, "queueId": 1}
        assert c.invoke(RequestCode.GET_MAX_OFFSET, empty).ext_fields["offset"] == "0"
        resp = c.invoke(RequestCode.GET_EARLIEST_MSG_STORETIME, q)
        assert resp.code == ResponseCode.SUCCESS
        assert t_before <= int(resp.ext_fields["timestamp"]) <= t_after
        resp = c.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, dict(q, timestamp=t_before - 60_000))
        assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
        resp = c.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, dict(q, timestamp=t_after + 60_000))
        assert resp.code == ResponseCode.SUCCESS
        assert int(resp.ext_fields["offset"]) in (3, 4)  # Java answers the last message's offset or max


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_view_message_by_offset_msg_id(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq())
    with cluster.broker_client(serialize_type=ser) as c:
        c.send_message(topic, b"first")
        resp = c.send_message(topic, b"view-me", keys="vk", tags="TV")
        msg_id = resp.ext_fields["msgId"]
        commit_log_offset = int(msg_id[16:], 16)  # offsetMsgId = host(4) port(4) offset(8), hex
        view = c.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": commit_log_offset})
        assert view.code == ResponseCode.SUCCESS, view
        (msg,) = decode_messages(view.body)
        assert bytes(msg.body) == b"view-me"
        assert msg.topic == topic
        assert msg.commit_log_offset == commit_log_offset
        assert msg.properties["KEYS"] == "vk" and msg.properties["TAGS"] == "TV"


def test_query_message_by_key_and_unique_key(cluster, uniq, make_topic, broker):
    topic = make_topic(uniq())
    now = int(time.time() * 1000)
    resp = broker.send_message(topic, b"keyed", keys="order-1 order-2")
    assert resp.code == ResponseCode.SUCCESS
    broker.send_message(topic, b"other", keys="order-3")

    def query(key, unique=False):
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": 32,
            "beginTimestamp": now - 60_000,
            "endTimestamp": now + 60_000,
        }
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        return broker.invoke(RequestCode.QUERY_MESSAGE, ext)

    found = wait_until(lambda: query("order-2").code == ResponseCode.SUCCESS, timeout=5)
    assert found, "the index never answered a KEYS query"
    msgs = decode_messages(query("order-2").body)
    assert [bytes(m.body) for m in msgs] == [b"keyed"]
    uniq_key = msgs[0].properties["UNIQ_KEY"]
    resp = query(uniq_key, unique=True)
    assert resp.code == ResponseCode.SUCCESS
    assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"keyed"]
    assert "indexLastUpdateTimestamp" in resp.ext_fields
    assert query("no-such-key").code == ResponseCode.QUERY_NOT_FOUND
