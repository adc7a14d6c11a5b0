"""Delay levels: DELAY property -> SCHEDULE_TOPIC_XXXX -> the real topic when due, across restarts.

Real clients: ali-ons 3.12.0 (Message.delayTimeLevel) and the C++ core (rocketmq-python-cvs 2.1.0.3,
DELAY property) produce; their push consumers must receive each message once, inside the level's
time window. Restart tests (raw wire client): messages not yet due when the broker stops are
delivered once after it starts again, and ones delivered before are not delivered again.

Runs on its own server, `rmqgate serve --conf` or the Java pair with --target java
(flows.py FEATURE_CONF: messageDelayLevel
"1s 2s 1s ..."; level 2 = 2 s).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.drivers import node_driver
from rmqgate.compat_tests.flows import (
    FeatureServer,
    consumer_count,
    cpp_flow,
    cpp_produce,
    feature_server,
    feature_server_fixture,
    no_leftover_clients,  # noqa: F401 - autouse fixture
)
from rmqgate.compat_tests.wire_client import WireClient, stored_messages, wait_until

pytestmark = pytest.mark.slow

LEVEL = 2
DELAY_S = 2.0
#: receive time - send time: at least the delay; at most the delay plus delivery, pull latency and
#: a consumer that came up late on a loaded machine (promptness is checked on the store timestamps)
WINDOW = (DELAY_S - 0.05, DELAY_S + 10.0)
#: the delivered copy's store time - born time: the delay, plus at most this for the schedule's due check
DUE_SLACK_S = 2.5


flow_server = feature_server_fixture("delay")


def stored(server: FeatureServer, topic: str, queues: int = 4) -> list[Any]:
    return [m for ms in stored_messages(server.broker, topic, queues).values() for m in ms]


def test_ali_ons_delayed_messages_arrive_in_their_window(
    flow_server: FeatureServer, uniq: Any, tmp_path: Path
) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("cg")
    flow_server.create_topic("%RETRY%" + group, 1)
    consumer = node_driver(
        "consume.js",
        {"namesrv": flow_server.namesrv, "topic": topic, "group": group, "expect": 4, "waitMs": 90000,
         "lingerMs": 2000, "timeoutMs": 120000, "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET"},
        tmp_path,
        timeout=150,
    )  # fmt: skip
    assert wait_until(lambda: consumer_count(flow_server.broker, group) == 1, timeout=60)
    time.sleep(1)  # its first pulls are out (the window below allows a late one)
    assert stored(flow_server, topic) == []
    produced = node_driver(
        "produce.js",
        {
            "namesrv": flow_server.namesrv,
            "topic": topic,
            "group": uniq("pg"),
            "count": 4,
            "delayLevel": LEVEL,
        },
        tmp_path,
    ).result()
    assert [r["sendStatus"] for r in produced["results"]] == ["SEND_OK"] * 4
    sent_at = {f"body-{i}": r["sentAt"] for i, r in enumerate(produced["results"])}
    assert stored(flow_server, topic) == []  # parked in SCHEDULE_TOPIC_XXXX, not visible yet
    got = consumer.result()["received"]
    assert sorted(m["body"] for m in got) == sorted(sent_at)  # each once
    for m in got:
        # at least the delay after the producer made it (the send is answered after it is stored,
        # the delay counts from then), at most the window's end after the send was answered
        since_born = (m["receivedAt"] - m["bornTimestamp"]) / 1000
        assert since_born >= WINDOW[0], f"{m['body']} arrived {since_born:.2f} s after it was born"
        waited = (m["receivedAt"] - sent_at[m["body"]]) / 1000
        assert waited <= WINDOW[1], f"{m['body']} arrived {waited:.2f} s after the send"
        assert m["topic"] == topic and m["reconsumeTimes"] == 0
        assert (
            DELAY_S * 1000 - 50 <= m["storeTimestamp"] - m["bornTimestamp"] <= (DELAY_S + DUE_SLACK_S) * 1000
        )
    for m in stored(flow_server, topic):
        # a 4.9.8 broker's delivered copy keeps its level (the corpus' ali-ons capture shows DELAY=2)
        assert m.properties["DELAY"] == str(LEVEL) and m.properties["REAL_TOPIC"] == topic


def test_cpp_delayed_messages_arrive_in_their_window(
    flow_server: FeatureServer, uniq: Any, tmp_path: Path
) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("cg")
    flow_server.create_topic("%RETRY%" + group, 1)
    consumer = cpp_flow(
        {"scenario": "consume", "namesrv": flow_server.namesrv, "topic": topic, "group": group, "expect": 4,
         "max_s": 90, "linger_s": 2.0},
        tmp_path,
        timeout=150,
    )  # fmt: skip
    assert wait_until(lambda: consumer_count(flow_server.broker, group) == 1, timeout=60)
    time.sleep(1)  # its first pulls are out (the window below allows a late one)
    before = time.time()
    res = cpp_produce(
        {"namesrv": flow_server.namesrv, "topic": topic, "group": uniq("pg"), "count": 4,
         "properties": {"DELAY": str(LEVEL)}},
        tmp_path,
    )  # fmt: skip
    after = time.time()
    assert [r["status"] for r in res["results"]] == [0] * 4
    got = consumer.result()["received"]
    assert sorted(m["body"] for m in got) == [f"body-{i}" for i in range(4)]  # each once
    for m in got:
        assert before + WINDOW[0] <= m["at"] <= after + WINDOW[1], f"{m['body']} at {m['at'] - before:.2f} s"
        assert (
            DELAY_S * 1000 - 50
            <= m["store_timestamp"] - m["born_timestamp"]
            <= (DELAY_S + DUE_SLACK_S) * 1000
        )
        assert m["topic"] == topic


def _send_delayed(c: WireClient, topic: str, body: bytes, level: int) -> None:
    resp = c.send_message(topic, body, queue_id=0, properties={"DELAY": str(level)})
    assert resp.code == 0, resp


def test_restart_delivers_each_delayed_message_once(
    request: pytest.FixtureRequest, tmp_path: Path, uniq: Any
) -> None:
    server = feature_server(request.config, tmp_path / "srv").start()
    try:
        topic = server.create_topic(uniq(), 4)
        with WireClient(server.broker) as c:
            _send_delayed(c, topic, b"before-restart", 1)
        assert wait_until(lambda: len(stored(server, topic)) == 1, timeout=15)
        with WireClient(server.broker) as c:
            for i in range(3):
                _send_delayed(c, topic, f"due-after-restart-{i}".encode(), LEVEL)
        assert server.stop() == 0  # none of the level-2 messages is due yet
        server.start()
        assert wait_until(lambda: len(stored(server, topic)) == 4, timeout=30)
        time.sleep(2.5)  # nothing comes twice
        bodies = sorted(bytes(m.body).decode() for m in stored(server, topic))
        assert bodies == ["before-restart"] + [f"due-after-restart-{i}" for i in range(3)]
        assert server.stop() == 0
        server.start()  # a second restart with everything delivered: still once
        time.sleep(2.5)
        assert len(stored(server, topic)) == 4
    finally:
        server.stop()
