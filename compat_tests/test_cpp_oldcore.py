"""The old C++ core 1.0.1 through `rocketmq` 0.4.4: SEND_MESSAGE (10) with long field names, version 63.

`rocketmq` 0.4.4 has the same import name as rocketmq-python-cvs, so it is installed into its own
target dir (.venv-clients/rocketmq044, from compat_tests/clients/requirements-rocketmq044.txt) and
the driver runs with that dir on PYTHONPATH.
"""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.drivers import run_cpp
from rmqgate.compat_tests.wire_client import stored_bodies, stored_messages, wait_until

pytestmark = pytest.mark.slow

CLIENT = "rocketmq044"


def run(args, home, **kw):
    res = run_cpp(args, home, client=CLIENT, **kw)
    assert "rocketmq044" in res["package_file"], res["package_file"]  # really the old package
    return res


def test_sync_send_old_path(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    res = run(
        {
            "scenario": "produce",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("pg"),
            "mode": "sync",
            "count": 4,
            "tags": ["Old"],
        },
        client_home,
    )
    assert [r["status"] for r in res["results"]] == [0, 0, 0, 0]
    # (a Java broker adds a message to its consume queue just after it answered the send)
    assert wait_until(lambda: len(stored_bodies(cluster.broker, topic)) == 4, timeout=10)
    msgs = [m for ms in stored_messages(cluster.broker, topic).values() for m in ms]
    assert sorted(bytes(m.body).decode() for m in msgs) == [f"body-{i}" for i in range(4)]
    assert {m.properties["TAGS"] for m in msgs} == {"Old"}
    assert sorted(m.properties["KEYS"] for m in msgs) == [f"key-{i}" for i in range(4)]


def test_oneway_send_old_path(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    run(
        {
            "scenario": "produce",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("pg"),
            "mode": "oneway",
            "count": 3,
        },
        client_home,
    )
    want = ["body-0", "body-1", "body-2"]
    assert wait_until(lambda: stored_bodies(cluster.broker, topic) == want, timeout=10), stored_bodies(
        cluster.broker, topic
    )


def test_push_consumer_old_core(cluster, uniq, make_topic, client_home):
    topic = make_topic(uniq())
    run(
        {
            "scenario": "produce",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("pg"),
            "mode": "sync",
            "count": 6,
            "tags": ["TagA", "TagB"],
        },
        client_home,
    )
    res = run(
        {
            "scenario": "push_consume",
            "namesrv": cluster.namesrv,
            "topic": topic,
            "group": uniq("cg"),
            "expression": "TagB",
            "expect": 3,
            "wait_s": 90,
            "linger_s": 2,
        },
        client_home,
    )
    assert sorted(m["body"] for m in res["received"]) == ["body-1", "body-3", "body-5"]
    assert {m["tags"] for m in res["received"]} == {"TagB"}
