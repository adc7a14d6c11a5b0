"""The C++ client core 2.1.0 (rocketmq-python-cvs 2.1.0.3) against the server under test.

Each scenario runs in a subprocess (clients/cpp_driver.py); what the client reports is checked,
and what the broker stored is checked independently over the raw wire.
"""

from __future__ import annotations

import threading

import pytest

from rmqgate.compat_tests.drivers import run_cpp
from rmqgate.compat_tests.wire_client import stored_bodies as wire_stored_bodies
from rmqgate.compat_tests.wire_client import stored_messages, wait_until
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode

pytestmark = pytest.mark.slow

SEND_OK = 0


def stored(cluster, topic, queues=4, expect=0):
    """What the broker stored, {queue: messages}, once it holds ``expect`` messages (a Java broker
    adds a message to its consume queue just after it answered the send)."""
    wait_until(lambda: sum(map(len, stored_messages(cluster.broker, topic, queues).values())) >= expect)
    return stored_messages(cluster.broker, topic, queues)


def stored_bodies(cluster, topic, queues=4, expect=0):
    wait_until(lambda: len(wire_stored_bodies(cluster.broker, topic, queues)) >= expect)
    return wire_stored_bodies(cluster.broker, topic, queues)


def produce(cluster, home, topic, group, **kw):
    args = {"scenario": "produce", "namesrv": cluster.namesrv, "topic": topic, "group": group}
    args.update(kw)
    return run_cpp(args, home)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_send_sync_and_async(cluster, uniq, make_topic, client_home, mode):
    topic = make_topic(uniq())
    res = produce(cluster, client_home, topic, uniq("pg"), mode=mode, count=6, tags=["TagA", "TagB"])
    assert res["errors"] == []
    assert len(res["results"]) == 6
    assert all(r["status"] == SEND_OK for r in res["results"])
    assert len({r["msg_id"] for r in res["results"]}) == 6
    msgs = [m for ms in stored(cluster, topic, expect=6).values() for m in ms]
    assert sorted(bytes(m.body).decode() for m in msgs) == [f"body-{i}" for i in range(6)]
    by_body = {bytes(m.body).decode(): m for m in msgs}
    for i in range(6):
        m = by_body[f"body-{i}"]
        assert m.properties["KEYS"] == f"key-{i}"
        assert m.properties["TAGS"] == ["TagA", "TagB"][i % 2]
    # the client reports the client-side id (UNIQ_KEY) of each message
    assert {r["msg_id"] for r in res["results"]} == {m.properties["UNIQ_KEY"] for m in msgs}


def test_send_oneway(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    res = produce(cluster, client_home, topic, uniq("pg"), mode="oneway", count=5)
    assert res["errors"] == []
    want = [f"body-{i}" for i in range(5)]
    assert wait_until(lambda: stored_bodies(cluster, topic) == want, timeout=10), stored_bodies(
        cluster, topic
    )


def test_send_to_auto_created_topic(cluster, uniq, client_home):
    """The producer gets 17 for the route, falls back to TBW102, and the broker creates the topic."""
    topic = uniq("auto")
    res = produce(cluster, client_home, topic, uniq("pg"), mode="sync", count=2)
    assert [r["status"] for r in res["results"]] == [SEND_OK, SEND_OK]
    assert stored_bodies(cluster, topic, expect=2) == ["body-0", "body-1"]


def test_send_orderly_keeps_keys_on_one_queue(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq(), queues=4)
    order_keys = [0, 1, 2]
    res = produce(cluster, client_home, topic, uniq("pg"), mode="orderly", count=12, order_keys=order_keys)
    assert all(r["status"] == SEND_OK for r in res["results"])
    queues = stored(cluster, topic, expect=12)
    for key in order_keys:
        # hashing_queue_selector: arg % number of queues
        want = [f"body-{i}" for i in range(12) if order_keys[i % 3] == key]
        assert [bytes(m.body).decode() for m in queues[key % 4]] == want


def test_batch_send_is_accepted(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    res = produce(cluster, client_home, topic, uniq("pg"), mode="batch", count=3)
    assert [r["status"] for r in res["results"]] == [SEND_OK]


@pytest.mark.rmqgate_only
def test_batch_send_is_unpacked_into_messages(cluster, uniq, make_topic, client_home):
    """CLIENTS.md: C++ 2.1.0 batches are 310 with m="1"; rmqgate stores the messages the client meant."""
    topic = make_topic(uniq())
    res = produce(cluster, client_home, topic, uniq("pg"), mode="batch", count=3)
    assert [r["status"] for r in res["results"]] == [SEND_OK]
    msgs = [m for ms in stored(cluster, topic, expect=3).values() for m in ms]
    assert sorted(bytes(m.body).decode() for m in msgs) == ["body-0", "body-1", "body-2"]
    assert sorted(m.properties["KEYS"] for m in msgs) == ["key-0", "key-1", "key-2"]


def test_push_consumer_receives_everything(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    produce(cluster, client_home, topic, uniq("pg"), mode="sync", count=8, tags=["TagA"])
    res = run_cpp(
        {
            "scenario": "push_consume",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("cg"),
            "expression": "*",
            "expect": 8,
            "wait_s": 90,
            "linger_s": 2,
        },
        client_home,
    )
    got = res["received"]
    assert sorted(m["body"] for m in got) == sorted(f"body-{i}" for i in range(8))
    assert all(m["topic"] == topic and m["tags"] == "TagA" and m["reconsume_times"] == 0 for m in got)
    assert len({m["id"] for m in got}) == 8


def test_push_consumer_tag_filter(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    produce(cluster, client_home, topic, uniq("pg"), mode="sync", count=9, tags=["TagA", "TagB", "TagC"])
    res = run_cpp(
        {
            "scenario": "push_consume",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("cg"),
            "expression": "TagA || TagC",
            "expect": 6,
            "wait_s": 90,
            "linger_s": 2,
        },
        client_home,
    )
    got = res["received"]
    assert sorted(m["body"] for m in got) == sorted(f"body-{i}" for i in range(9) if i % 3 != 1)
    assert {m["tags"] for m in got} == {"TagA", "TagC"}


def test_push_consumer_follows_a_reset_offset(cluster, uniq, make_topic, client_home, broker):
    """mqadmin resetOffsetByTime while the group consumes: the broker sends the consumer
    RESET_CONSUMER_CLIENT_OFFSET, the C++ core commits the offsets it names, and the group reads
    everything again from there. (2.1.0 itself resumes only once its dropped pull requests expire, so
    the second read is a new consumer of the group.)"""
    topic, group = make_topic(uniq()), uniq("cg")
    produce(cluster, client_home, topic, uniq("pg"), mode="sync", count=8)
    done = client_home / "reset-done"
    args = {"scenario": "push_consume", "namesrv": cluster.namesrv, "topic": topic, "group": group}
    args.update(expect=8, wait_s=120, linger_s=0, stay_until=str(done))
    out: dict[str, dict] = {}
    consumer = threading.Thread(target=lambda: out.update(res=run_cpp(args, client_home, timeout=200)))
    consumer.start()

    def committed() -> list[int]:
        offsets = []
        for qid in range(4):
            ext = {"consumerGroup": group, "topic": topic, "queueId": qid}
            resp = broker.invoke(RequestCode.QUERY_CONSUMER_OFFSET, ext)
            offsets.append(int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1)
        return offsets

    try:
        assert wait_until(lambda: committed() == [2, 2, 2, 2], timeout=60, interval=0.5), committed()
        ext = {"topic": topic, "group": group, "timestamp": 0, "isForce": True}
        # (the Java broker writes the body C++ consumers read only for a C++ requester)
        resp = broker.invoke(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext, language=LanguageCode.CPP)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert wait_until(lambda: committed() == [0, 0, 0, 0], timeout=40, interval=0.2), committed()
    finally:
        done.touch()
        consumer.join(200)
    assert sorted(m["body"] for m in out["res"]["received"]) == [f"body-{i}" for i in range(8)]
    args.update(linger_s=2)
    del args["stay_until"]
    again = run_cpp(args, client_home)["received"]
    assert sorted(m["body"] for m in again) == [f"body-{i}" for i in range(8)]


def test_pull_consumer(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    produce(cluster, client_home, topic, uniq("pg"), mode="sync", count=5, tags=["TagA", "TagB"])
    res = run_cpp(
        {
            "scenario": "pull_consume",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("cg"),
            "expression": "*",
            "expect": 5,
            "wait_s": 90,
        },
        client_home,
    )
    assert sorted(m["body"] for m in res["received"]) == [f"body-{i}" for i in range(5)]
    res = run_cpp(
        {
            "scenario": "pull_consume",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("cg2"),
            "expression": "TagB",
            "expect": 2,
            "wait_s": 90,
        },
        client_home,
    )
    assert sorted(m["body"] for m in res["received"]) == ["body-1", "body-3"]
