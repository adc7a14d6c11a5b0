"""Orderly consumption: queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ) and stock orderly clients.

The C++ core (rocketmq-python-cvs 2.1.0.3) sends with a queue selector (one key -> one queue) and
consumes orderly: it locks its queues on the broker before consuming them and unlocks them when a
rebalance takes them away. The tests check that every key's messages are consumed in send order
while a second consumer joins mid-stream (the queues are split: lock hand-over from the first
consumer) and while the first one leaves, gracefully (unlock + unregister) or by dying (its process
ends without calling shutdown; the wrapper's destructor still shuts the C++ consumer down, which
unlocks its queues, as the process exits). The raw wire client checks the lock semantics, among them
that a lock outlives its connection.

Runs on its own server, `rmqgate serve --conf` or the Java pair with --target java
(flows.py FEATURE_CONF).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.flows import (
    FeatureServer,
    consumer_count,
    cpp_flow,
    cpp_produce,
    feature_server_fixture,
    no_leftover_clients,  # noqa: F401 - autouse fixture
)
from rmqgate.compat_tests.wire_client import WireClient, dumps, loads, wait_until
from rmqgate.wire.codes import RequestCode

pytestmark = pytest.mark.slow

KEYS = [0, 1, 2, 3, 4, 5]  # hashing selector: key % 4 queues -> queues 0,1,2,3,0,1
#: How long a consumer of the join-and-leave flow may run. It stops as soon as its part is done (the
#: stop file, or all of the last batch), so this only bounds a failure. A C++ consumer whose lock
#: request lost the race with the previous holder's unlock retries at its next rebalance, 20 s on,
#: which may happen at the join and again at the leave; a loaded machine adds its own delays.
CONSUMER_MAX_S = 150


flow_server = feature_server_fixture("orderly")


def lock_body(group: str, client_id: str, topic: str, broker_name: str, queues: list[int]) -> bytes:
    mqs = [{"brokerName": broker_name, "queueId": q, "topic": topic} for q in queues]
    return dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs})


def lock(c: WireClient, group: str, client_id: str, topic: str, queues: list[int]) -> list[int]:
    resp = c.invoke(
        RequestCode.LOCK_BATCH_MQ, body=lock_body(group, client_id, topic, "flow-broker-a", queues)
    )
    assert resp.code == 0, resp
    return sorted(mq["queueId"] for mq in loads(resp.body)["lockOKMQSet"])


def test_raw_lock_batch_semantics(flow_server: FeatureServer, uniq: Any) -> None:
    topic, group = uniq(), uniq("cg")
    with WireClient(flow_server.broker) as a, WireClient(flow_server.broker) as b:
        assert lock(a, group, "A", topic, [0, 1, 2]) == [0, 1, 2]
        assert lock(b, group, "B", topic, [1, 2, 3]) == [3]  # exactly the queues locked for the caller
        assert lock(a, group, "A", topic, [0, 1, 2, 3]) == [0, 1, 2]  # renewal; 3 is B's
        # UNLOCK_BATCH_MQ, sync and oneway; someone else's unlock changes nothing
        assert (
            a.invoke(
                RequestCode.UNLOCK_BATCH_MQ, body=lock_body(group, "B", topic, "flow-broker-a", [0])
            ).code
            == 0
        )
        assert lock(b, group, "B", topic, [0]) == []
        a.oneway(RequestCode.UNLOCK_BATCH_MQ, body=lock_body(group, "A", topic, "flow-broker-a", [0]))
        assert wait_until(lambda: lock(b, group, "B", topic, [0]) == [0], timeout=5)
    # both connections closed: their locks hold (RebalanceLockManager knows no connections), and
    # B re-locking from a new connection renews its own
    with WireClient(flow_server.broker) as c:
        assert lock(c, group, "C", topic, [0, 1, 2, 3]) == []
        assert lock(c, group, "B", topic, [0, 3]) == [0, 3]  # B's renewal from a new connection


def _first_receptions(*results: dict[str, Any]) -> list[dict[str, Any]]:
    """Deliveries of all consumers by receive time, each body once (its first); IN_PROGRESS = the
    consumer ended while in the callback."""
    everything = sorted((m for r in results for m in r["received"]), key=lambda m: m["at"])
    seen: set[str] = set()
    out = []
    for m in everything:
        if m["status"] in ("CONSUME_SUCCESS", "IN_PROGRESS") and m["body"] not in seen:
            seen.add(m["body"])
            out.append(m)
    return out


def _sent_order(batches: list[str], count: int) -> dict[int, list[str]]:
    per_key: dict[int, list[str]] = {k: [] for k in KEYS}
    for batch in batches:
        for i in range(count):
            per_key[KEYS[i % len(KEYS)]].append(f"{batch}-{i}")
    return per_key


def _check_per_key_order(batches: list[str], count: int, *results: dict[str, Any]) -> None:
    expected = _sent_order(batches, count)
    got: dict[int, list[str]] = {k: [] for k in KEYS}
    index = {body: k for k, bodies in expected.items() for body in bodies}
    for m in _first_receptions(*results):
        got[index[m["body"]]].append(m["body"])
    for k in KEYS:
        assert got[k] == expected[k], f"key {k}: consumed {got[k]} but sent {expected[k]}"
    queues: dict[int, set[int]] = {k: set() for k in KEYS}
    for r in results:
        for m in r["received"]:
            queues[index[m["body"]]].add(m["queue_id"])
    assert all(len(q) == 1 for q in queues.values()), f"a key spread over several queues: {queues}"


def _produce(server: FeatureServer, home: Path, topic: str, batch: str, count: int) -> None:
    res = cpp_produce(
        {
            "namesrv": server.namesrv, "topic": topic, "group": "PG_orderly", "mode": "orderly",
            "order_keys": KEYS, "count": count, "body_prefix": batch,
        },
        home,
    )  # fmt: skip
    assert [r["status"] for r in res["results"]] == [0] * count


def _consumers_of(result: dict[str, Any], batch: str) -> set[int]:
    return {m["queue_id"] for m in result["received"] if m["body"].startswith(batch + "-")}


@pytest.mark.parametrize("leave", ["shutdown", "dies"])
def test_cpp_orderly_consumers_keep_per_key_order_across_join_and_leave(
    flow_server: FeatureServer, uniq: Any, tmp_path: Path, leave: str
) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("cg")
    flow_server.create_topic("%RETRY%" + group, 1)
    homes = {name: tmp_path / name for name in ("c1", "c2", "p")}
    for home in homes.values():
        home.mkdir()
    count = 36
    stop1, stop2 = tmp_path / "stop1", tmp_path / "stop2"
    common = {
        "scenario": "consume",
        "namesrv": flow_server.namesrv,
        "topic": topic,
        "group": group,
        "orderly": True,
    }
    _produce(flow_server, homes["p"], topic, "a", count)
    end_of_a = _max_offsets(flow_server, topic)
    # the first consumer works through batch a slowly, so the second joins in the middle of it
    c1 = cpp_flow(
        {**common, "max_s": CONSUMER_MAX_S, "stop_file": str(stop1), "slow_s": 0.2, "instance": "c1",
         "shutdown": leave == "shutdown"},
        homes["c1"],
        timeout=CONSUMER_MAX_S + 60,
    )  # fmt: skip
    c2 = None
    try:
        assert wait_until(lambda: _stored_consumer_count(flow_server, group) == 1, timeout=60)
        time.sleep(0.5)
        c2 = cpp_flow(
            {
                **common,
                "max_s": CONSUMER_MAX_S,
                "stop_file": str(stop2),
                "instance": "c2",
                "expect": count,
                "expect_prefix": "c-",
            },
            homes["c2"],
            timeout=CONSUMER_MAX_S + 60,
        )
        assert wait_until(lambda: _stored_consumer_count(flow_server, group) == 2, timeout=60)
        _produce(flow_server, homes["p"], topic, "b", count)
        # the first leaves once each queue has consumed into batch b: the queues were split (the
        # first gave half of them up), so both consumers consumed part of it
        into_b = wait_until(
            lambda: all(o > a for o, a in zip(_committed(flow_server, group, topic), end_of_a, strict=True)),
            timeout=90,
            interval=0.5,
        )
        assert into_b, f"committed {_committed(flow_server, group, topic)}, batch a ends at {end_of_a}"
        stop1.touch()  # the first consumer leaves
        r1 = c1.result()
        assert wait_until(lambda: _stored_consumer_count(flow_server, group) == 1, timeout=60)
        _produce(flow_server, homes["p"], topic, "c", count)
        r2 = c2.result()  # returns once it consumed all of batch c
    finally:
        c1.kill()
        if c2 is not None:
            c2.kill()
    _check_per_key_order(["a", "b", "c"], count, r1, r2)
    # the queues were split while both ran, and the second took them all once the first left
    assert _consumers_of(r1, "b") and _consumers_of(r2, "b")
    assert _consumers_of(r2, "c") == {0, 1, 2, 3} and not _consumers_of(r1, "c")
    assert all(m["status"] == "CONSUME_SUCCESS" for m in r2["received"])
    assert all(m["status"] in ("CONSUME_SUCCESS", "IN_PROGRESS") for m in r1["received"])


def _max_offsets(server: FeatureServer, topic: str) -> list[int]:
    with WireClient(server.broker) as c:
        return [
            int(c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}).ext_fields["offset"])
            for q in range(4)
        ]


def _committed(server: FeatureServer, group: str, topic: str) -> list[int]:
    """The group's committed offset of each queue (-1 where none is)."""
    out = []
    with WireClient(server.broker) as c:
        for q in range(4):
            ext = {"consumerGroup": group, "topic": topic, "queueId": q}
            resp = c.invoke(RequestCode.QUERY_CONSUMER_OFFSET, ext)
            out.append(int(resp.ext_fields["offset"]) if resp.code == 0 else -1)
    return out


def _stored_consumer_count(server: FeatureServer, group: str) -> int:
    return consumer_count(server.broker, group)
