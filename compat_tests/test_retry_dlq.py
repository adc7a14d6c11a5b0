"""Retry and dead letters: CONSUMER_SEND_MSG_BACK, %RETRY%<group>, %DLQ%<group>.

Real clients: the C++ core (rocketmq-python-cvs 2.1.0.3, a push consumer answering RECONSUME_LATER)
and ali-ons 3.12.0 (a handler that throws). A failed message comes back with reconsumeTimes + 1 and
its original topic (the client restores it from RETRY_TOPIC); past maxReconsumeTimes it lands in
%DLQ%<group>. The raw wire client drives CONSUMER_SEND_MSG_BACK step by step.

Runs on its own server, `rmqgate serve --conf` or the Java pair with --target java
(flows.py FEATURE_CONF: every retry level
is 1 s). %RETRY%<group> is created before a client starts so its first route lookup finds it
(CLIENTS.md: otherwise the first retry waits for the next route poll).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.drivers import node_driver
from rmqgate.compat_tests.flows import (
    FeatureServer,
    cpp_flow,
    cpp_produce,
    feature_server_fixture,
    no_leftover_clients,  # noqa: F401 - autouse fixture
)
from rmqgate.compat_tests.wire_client import WireClient, stored_messages, wait_until
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.message import decode_offset_msg_id

pytestmark = pytest.mark.slow


flow_server = feature_server_fixture("retry")


def dead_letters(server: FeatureServer, group: str) -> list[Any]:
    """What %DLQ%<group> holds. RocketMQ 4.9 creates a dead-letter topic write-only, so, as an operator
    does with ``mqadmin updateTopicPerm``, the reader first grants read on it (1 queue, perm RW)."""
    dlq = "%DLQ%" + group
    with WireClient(server.broker) as c:
        assert c.create_topic(dlq, 1).code == ResponseCode.SUCCESS
    return stored_messages(server.broker, dlq, 1)[0]


def send_back(c: WireClient, phys: int, group: str, delay: int = 0, max_times: int | None = None) -> Any:
    ext = {
        "offset": phys,
        "group": group,
        "delayLevel": delay,
        "originTopic": "x",
        "maxReconsumeTimes": max_times,
    }
    return c.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, ext)


def test_raw_send_back_retries_then_dead_letters(flow_server: FeatureServer, uniq: Any) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("cg")
    retry = "%RETRY%" + group
    with WireClient(flow_server.broker) as c:
        resp = c.send_message(topic, b"raw-retry", queue_id=1, tags="TagR")
        original_id = resp.ext_fields["msgId"]
        phys = decode_offset_msg_id(original_id)[2]
        t0 = time.monotonic()
        assert send_back(c, phys, group, 0, max_times=2).code == ResponseCode.SUCCESS
        assert wait_until(lambda: stored_messages(flow_server.broker, retry, 1)[0], timeout=15)
        assert 0.9 <= time.monotonic() - t0 < 8  # level 3 = 1 s here (10 s by default)
        (r1,) = stored_messages(flow_server.broker, retry, 1)[0]
        assert r1.reconsume_times == 1 and bytes(r1.body) == b"raw-retry"
        assert r1.properties["RETRY_TOPIC"] == topic and r1.properties["ORIGIN_MESSAGE_ID"] == original_id
        assert r1.properties["TAGS"] == "TagR"
        assert send_back(c, r1.commit_log_offset, group, 0, max_times=2).code == 0
        assert wait_until(lambda: len(stored_messages(flow_server.broker, retry, 1)[0]) == 2, timeout=15)
        r2 = stored_messages(flow_server.broker, retry, 1)[0][1]
        assert r2.reconsume_times == 2 and r2.properties["ORIGIN_MESSAGE_ID"] == original_id
        assert send_back(c, r2.commit_log_offset, group, 0, max_times=2).code == 0
        (dead,) = dead_letters(flow_server, group)
        assert dead.reconsume_times == 3 and dead.properties["RETRY_TOPIC"] == topic
        assert dead.properties["DELAY"] == "0"  # setDelayTimeLevel(0), stored
        # a negative delay level sends straight to the DLQ; an unknown offset is refused
        assert send_back(c, phys, group, -1).code == 0
        assert len(dead_letters(flow_server, group)) == 2
        bad = send_back(c, 1 << 40, group)
        assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark.startswith(
            "look message by offset failed"
        )


def _retry_setup(server: FeatureServer, uniq: Any) -> tuple[str, str]:
    topic = server.create_topic(uniq(), 4)
    group = uniq("cg")
    server.create_topic("%RETRY%" + group, 1)
    return topic, group


def test_cpp_reconsume_later_is_redelivered(flow_server: FeatureServer, uniq: Any, tmp_path: Path) -> None:
    topic, group = _retry_setup(flow_server, uniq)
    res = cpp_produce(
        {"namesrv": flow_server.namesrv, "topic": topic, "group": uniq("pg"), "count": 3}, tmp_path
    )
    assert [r["status"] for r in res["results"]] == [0, 0, 0]
    got = cpp_flow(
        {"scenario": "consume", "namesrv": flow_server.namesrv, "topic": topic, "group": group,
         "fail": {"body-1": 2}, "expect": 3, "max_s": 90, "linger_s": 1.5},
        tmp_path,
        timeout=150,
    ).result()  # fmt: skip
    deliveries = [m for m in got["received"] if m["body"] == "body-1"]
    assert [(m["reconsume_times"], m["status"]) for m in deliveries] == [
        (0, "RECONSUME_LATER"), (1, "RECONSUME_LATER"), (2, "CONSUME_SUCCESS"),
    ]  # fmt: skip
    assert all(m["topic"] == topic for m in deliveries)  # original topic restored from RETRY_TOPIC
    assert deliveries[1]["at"] - deliveries[0]["at"] >= 0.9  # delay level 3 (1 s here) in between
    others = [m for m in got["received"] if m["body"] != "body-1"]
    assert sorted((m["body"], m["reconsume_times"]) for m in others) == [("body-0", 0), ("body-2", 0)]
    assert dead_letters(flow_server, group) == []


def test_cpp_dead_letter_after_max_reconsume_times(
    flow_server: FeatureServer, uniq: Any, tmp_path: Path
) -> None:
    topic, group = _retry_setup(flow_server, uniq)
    cpp_produce({"namesrv": flow_server.namesrv, "topic": topic, "group": uniq("pg"), "count": 1}, tmp_path)
    stop = tmp_path / "stop"
    consumer = cpp_flow(
        {"scenario": "consume", "namesrv": flow_server.namesrv, "topic": topic, "group": group,
         "fail": {"body-0": -1}, "max_s": 150, "stop_file": str(stop)},
        tmp_path,
        timeout=200,
    )  # fmt: skip
    try:  # 17 deliveries 1 s apart (every delay level is 1 s here)
        assert wait_until(lambda: dead_letters(flow_server, group), timeout=140, interval=0.5)
    finally:
        stop.touch()
    got = consumer.result()
    (dead,) = dead_letters(flow_server, group)
    assert bytes(dead.body) == b"body-0" and dead.properties["RETRY_TOPIC"] == topic
    # the client's maxReconsumeTimes is 16: deliveries 0..16, the 17th failure goes to the DLQ
    assert [m["reconsume_times"] for m in got["received"]] == list(range(17))
    assert dead.reconsume_times == 17


def test_ali_ons_throwing_handler_is_retried(flow_server: FeatureServer, uniq: Any, tmp_path: Path) -> None:
    topic, group = _retry_setup(flow_server, uniq)
    with WireClient(flow_server.broker) as c:
        for i in range(2):
            assert c.send_message(topic, f"ons-{i}".encode(), queue_id=i, tags="TagA").code == 0
    got = node_driver(
        "retry.js",
        {"namesrv": flow_server.namesrv, "topic": topic, "group": group, "fail": {"ons-1": 1}, "expect": 2,
         "waitMs": 90000, "lingerMs": 1500, "timeoutMs": 120000},
        tmp_path,
        timeout=150,
    ).result()  # fmt: skip
    deliveries = [m for m in got["received"] if m["body"] == "ons-1"]
    assert [(m["reconsumeTimes"], bool(m.get("thrown"))) for m in deliveries] == [(0, True), (1, False)]
    assert all(m["topic"] == topic for m in deliveries)
    assert deliveries[1]["receivedAt"] - deliveries[0]["receivedAt"] >= 900
    assert [m["reconsumeTimes"] for m in got["received"] if m["body"] == "ons-0"] == [0]


def test_ali_ons_dead_letter_after_max_reconsume_times(
    flow_server: FeatureServer, uniq: Any, tmp_path: Path
) -> None:
    topic, group = _retry_setup(flow_server, uniq)
    with WireClient(flow_server.broker) as c:
        assert c.send_message(topic, b"ons-dead", queue_id=0).code == 0
    stop = tmp_path / "stop"
    consumer = node_driver(
        "retry.js",
        {"namesrv": flow_server.namesrv, "topic": topic, "group": group, "fail": {"ons-dead": -1},
         "maxReconsumeTimes": 2, "waitMs": 110000, "stopFile": str(stop), "timeoutMs": 120000},
        tmp_path,
        timeout=150,
    )  # fmt: skip
    try:
        assert wait_until(lambda: dead_letters(flow_server, group), timeout=100, interval=0.5)
    finally:
        stop.touch()
    got = consumer.result()
    assert [m["reconsumeTimes"] for m in got["received"]] == [0, 1, 2]
    (dead,) = dead_letters(flow_server, group)
    assert bytes(dead.body) == b"ons-dead" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == topic
