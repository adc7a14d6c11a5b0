"""ali-ons 3.12.0 (pure JavaScript, JSON headers, version 121) under Node: produce, consume, offsets.

Drivers live in compat_tests/node/ (package.json + package-lock.json; `npm ci` there installs
ali-ons). CLIENTS.md: ali-ons cannot send to a topic without a route, so topics are created first
(by the client's own UPDATE_AND_CREATE_TOPIC, or over the raw wire).
"""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.drivers import run_node
from rmqgate.compat_tests.wire_client import stored_messages, wait_until
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.slow


def produce(cluster, home, topic, group, **kw):
    args = {"namesrv": cluster.namesrv, "broker": cluster.broker, "topic": topic, "group": group}
    args.update(kw)
    return run_node("produce.js", args, home)


def consume(cluster, home, topic, group, **kw):
    args = {"namesrv": cluster.namesrv, "topic": topic, "group": group, "waitMs": 60000, "timeoutMs": 100000}
    args.update(kw)
    return run_node("consume.js", args, home, timeout=120)


def test_produce_with_client_created_topic(cluster, uniq, client_home):
    topic = uniq()
    res = produce(
        cluster, client_home, topic, uniq("pg"), create=True, queues=4, count=6, tags=["TagA", "TagB"]
    )
    results = res["results"]
    assert [r["sendStatus"] for r in results] == ["SEND_OK"] * 6

    def stored() -> list:
        return [m for ms in stored_messages(cluster.broker, topic).values() for m in ms]

    # (a Java broker adds a message to its consume queue just after it answered the send)
    assert wait_until(lambda: len(stored()) == 6, timeout=10)
    msgs = stored()
    assert sorted(bytes(m.body).decode() for m in msgs) == [f"body-{i}" for i in range(6)]
    by_body = {bytes(m.body).decode(): m for m in msgs}
    for i, r in enumerate(results):
        m = by_body[f"body-{i}"]
        assert m.properties["TAGS"] == ["TagA", "TagB"][i % 2]
        assert m.properties["KEYS"] == f"key-{i}"
        # ali-ons reports the broker's offsetMsgId: store host + commit-log offset of the record
        assert int(r["msgId"][16:], 16) == m.commit_log_offset
        assert (r["queueId"], r["queueOffset"]) == (m.queue_id, m.queue_offset)


def test_consume_with_tag_filter_then_resume_from_committed_offsets(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq(), queues=4)
    group = uniq("cg")
    produce(cluster, client_home, topic, uniq("pg"), count=8, tags=["TagA", "TagB"])
    res = consume(cluster, client_home, topic, group, expression="TagA", expect=4, lingerMs=2000)
    got = res["received"]
    assert sorted(m["body"] for m in got) == [f"body-{i}" for i in range(0, 8, 2)]
    assert {m["tags"] for m in got} == {"TagA"}
    assert all(m["topic"] == topic and m["reconsumeTimes"] == 0 for m in got)

    # close() persisted the offsets: every queue is consumed up to its end (filtered ones included)
    with cluster.broker_client() as c:
        total = 0
        for q in range(4):
            resp = c.invoke(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": q}
            )
            assert resp.code == ResponseCode.SUCCESS
            mx = c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}).ext_fields["offset"]
            assert resp.ext_fields["offset"] == mx
            total += int(mx)
        assert total == 8

    # a restarted consumer of the same group gets only what was sent since
    produce(cluster, client_home, topic, uniq("pg"), count=2, tags=["TagA"], bodyPrefix="later")
    res = consume(cluster, client_home, topic, group, expression="TagA", expect=2, lingerMs=2000)
    assert sorted(m["body"] for m in res["received"]) == ["later-0", "later-1"]


def test_two_consumers_share_the_queues(cluster, uniq, make_topic, client_home):
    """Rebalance across two ali-ons processes of one group (GET_CONSUMER_LIST_BY_GROUP, 38)."""
    import concurrent.futures

    topic = make_topic(uniq(), queues=4)
    group = uniq("cg")
    produce(cluster, client_home, topic, uniq("pg"), count=12)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                consume,
                cluster,
                client_home,
                topic,
                group,
                expect=12,
                waitMs=25000,
                lingerMs=500,
                instanceName=f"inst{i}",
            )
            for i in range(2)
        ]
        results = [f.result() for f in futures]
    bodies = [m["body"] for r in results for m in r["received"]]
    # at-least-once across a rebalance: every message arrives, duplicates only around the hand-over
    assert set(bodies) == {f"body-{i}" for i in range(12)}


def test_offset_calls(cluster, uniq, make_topic, client_home, dispatched):
    topic = make_topic(uniq(), queues=2)
    group = uniq("cg")
    with cluster.broker_client() as c:
        for _ in range(3):
            assert c.send_message(topic, b"x", queue_id=0).code == ResponseCode.SUCCESS
    dispatched(topic, 0, 3)
    args = {
        "namesrv": cluster.namesrv,
        "broker": cluster.broker,
        "brokerName": cluster.broker_name,
        "topic": topic,
        "group": group,
        "queues": 2,
        "commit": {"0": 2},
    }
    res = run_node("offsets.js", args, client_home)
    assert res["max"] == {"0": 3, "1": 0}
    assert res["searchPast"]["0"] == 0
    assert res["searchFuture"]["0"] in (2, 3)
    assert res["before"]["0"] == 0  # fresh group, messages still in memory (ConsumerManageProcessor)
    assert res["after"]["0"] == 2
