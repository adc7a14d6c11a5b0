"""Consumer offsets, queue offsets, time search, reset by time, view by id and query by key over the
raw wire."""

from __future__ import annotations

import time

import pytest

from rmqgate.compat_tests.wire_client import decode_messages, loads, mq_offset_table, wait_until
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]


def query_offset(c, group, topic, queue_id):
    return c.invoke(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id}
    )


def commit_offset(c, group, topic, queue_id, offset):
    resp = c.invoke(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
    )
    assert resp.code == ResponseCode.SUCCESS


def reset_offset(c, topic, group, timestamp, force=False, **kw):
    """What mqadmin resetOffsetByTime sends to each broker."""
    return c.invoke(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force},
        **kw,
    )


def test_fresh_group_offset_in_memory_queue_is_zero(cluster, uniq, make_topic, broker, dispatched):
    """ConsumerManageProcessor: no stored offset, min offset 0 and message 0 not swapped out -> 0."""
    topic = make_topic(uniq(), queues=1)
    broker.send_message(topic, b"x")
    dispatched(topic, 0, 1)
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
        assert wait_until(lambda: query_offset(c, group, topic, 1).ext_fields["offset"] == "5", timeout=15)
        resp = c.invoke(RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert resp.code == ResponseCode.SUCCESS
        table = loads(resp.body)["offsetTable"]
        assert table[f"{topic}@{group}"]["1"] == 5


@pytest.mark.rmqgate_only
def test_a_groups_first_offsets_committed_together_are_all_kept(cluster, uniq, make_topic):
    """What a Java client's persistAll sends for a new group: one one-way commit per queue, back to
    back. All are kept. 4.9.8 can lose all but one: ConsumerOffsetManager creates the group's
    topic@group map with get-then-put, and its offset threads each put a fresh map (about 1 group
    in 20 over 300 tries), until the client's next persist sends them again."""
    topic = make_topic(uniq(), queues=4)
    groups = [uniq(f"g{i}") for i in range(50)]
    with cluster.broker_client() as c:
        for group in groups:
            for queue_id in range(4):
                c.oneway(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": 4},
                )
        stored = {
            group: [int(query_offset(c, group, topic, q).ext_fields["offset"]) for q in range(4)]
            for group in groups
        }
    assert {g: s for g, s in stored.items() if s != [4] * 4} == {}


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_min_max_offsets_and_store_times(cluster, uniq, make_topic, dispatched, ser):
    topic = make_topic(uniq(), queues=2)
    with cluster.broker_client(serialize_type=ser) as c:
        t_before = int(time.time() * 1000) - 5
        for i in range(4):
            c.send_message(topic, f"{i}".encode(), queue_id=0)
            time.sleep(0.02)
        t_after = int(time.time() * 1000) + 5
        dispatched(topic, 0, 4)
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

    found = wait_until(lambda: query("order-2").code == ResponseCode.SUCCESS, timeout=15)
    assert found, "the index never answered a KEYS query"
    msgs = decode_messages(query("order-2").body)
    assert [bytes(m.body) for m in msgs] == [b"keyed"]
    uniq_key = msgs[0].properties["UNIQ_KEY"]
    resp = query(uniq_key, unique=True)
    assert resp.code == ResponseCode.SUCCESS
    assert [bytes(m.body) for m in decode_messages(resp.body)] == [b"keyed"]
    assert "indexLastUpdateTimestamp" in resp.ext_fields
    assert query("no-such-key").code == ResponseCode.QUERY_NOT_FOUND


def reset_scene(cluster, uniq, make_topic, broker, dispatched):
    """Queue 0: three messages well before ``t_mid``, two right after; queue 1: one after. The group
    has committed offsets 5 and 0. (The search by time answers the nearest message, either side.)"""
    topic = make_topic(uniq(), queues=2)
    group = uniq("g")
    for _ in range(3):
        broker.send_message(topic, b"early", queue_id=0)
    time.sleep(0.5)
    t_mid = int(time.time() * 1000)
    time.sleep(0.01)
    for qid in (0, 0, 1):
        broker.send_message(topic, b"late", queue_id=qid)
    dispatched(topic, 0, 5)
    dispatched(topic, 1, 1)
    commit_offset(broker, group, topic, 0, 5)
    commit_offset(broker, group, topic, 1, 0)
    return topic, group, t_mid


@pytest.mark.parametrize("lang", [LanguageCode.JAVA, LanguageCode.CPP], ids=["java", "cpp"])
def test_reset_offset_by_time_tells_every_consumer(cluster, uniq, make_topic, broker, dispatched, lang):
    """Broker2Client.resetOffset: the offset at the time per queue, the committed one where that is
    lower unless forced; each consumer gets RESET_CONSUMER_CLIENT_OFFSET (C++ consumers the list form
    they read) and commits the offsets itself, so the broker's table is unchanged."""
    topic, group, t_mid = reset_scene(cluster, uniq, make_topic, broker, dispatched)
    name = cluster.broker_name
    with cluster.broker_client(language=lang) as consumer:
        heartbeat = consumer.heartbeat(uniq("client"), consumers=[{"group": group, "topics": {topic: "*"}}])
        assert heartbeat.code == ResponseCode.SUCCESS
        # (the Java broker picks the consumers' body by the requester's language: ask in theirs)
        resp = reset_offset(broker, topic, group, t_mid, language=lang)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert mq_offset_table(resp.body) == {(topic, name, 0): 3, (topic, name, 1): 0}
        req = consumer.wait_server_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
        assert req.ext_fields["topic"] == topic
        assert req.ext_fields["group"] == group
        assert int(req.ext_fields["timestamp"]) == t_mid
        if lang == LanguageCode.CPP:
            entries = sorted(loads(req.body)["offsetTable"], key=lambda e: e["queueId"])
            assert entries == [
                {"brokerName": name, "offset": 3, "queueId": 0, "topic": topic},
                {"brokerName": name, "offset": 0, "queueId": 1, "topic": topic},
            ]
        else:
            assert mq_offset_table(req.body) == {(topic, name, 0): 3, (topic, name, 1): 0}
        assert query_offset(broker, group, topic, 0).ext_fields["offset"] == "5"

        # -1 is the max offset; forced, it replaces even a lower committed offset
        resp = reset_offset(broker, topic, group, -1)
        assert mq_offset_table(resp.body) == {(topic, name, 0): 5, (topic, name, 1): 0}
        resp = reset_offset(broker, topic, group, -1, force=True)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert mq_offset_table(resp.body) == {(topic, name, 0): 5, (topic, name, 1): 1}


def test_reset_offset_refusals(cluster, uniq, make_topic, broker, dispatched):
    topic, group, t_mid = reset_scene(cluster, uniq, make_topic, broker, dispatched)
    resp = reset_offset(broker, uniq("missing"), group, t_mid)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "no topic in this broker" in resp.remark
    resp = reset_offset(broker, topic, uniq("nooffsets"), t_mid)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "not exist" in resp.remark
    # mqadmin falls back to committing the offsets itself on this one
    resp = reset_offset(broker, topic, group, t_mid)
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert group in resp.remark
