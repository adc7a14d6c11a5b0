"""Replay plans from corpus captures: what is replayed, in which order, under which identity."""

from __future__ import annotations

import collections
import itertools
from pathlib import Path

from rmqgate.spark.frames import rows_from_bytes, rows_from_path
from rmqgate.spark.job import assign_partitions
from rmqgate.spark.plan import (
    broker_name_of,
    broker_names_from_routes,
    clone_uniq_key,
    message_count,
    planned_connection,
    route_bodies_from_rows,
)
from rmqgate.tools.capture import Role
from rmqgate.tools.replay_plan import PlannedConnection
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.fastjson import loads
from rmqgate.wire.frame import decode_frame
from rmqgate.wire.message import parse_properties
from rmqgate.wire.message_batch import decode_batch


def _by_conn(rows: list[dict]) -> list[list[dict]]:
    by_conn: dict[str, list] = collections.defaultdict(list)
    for r in rows:
        by_conn[r["conn"]].append(r)
    return list(by_conn.values())


def _plans_of(rows: list[dict], clone: int = 0) -> list[PlannedConnection]:
    t0 = min(r["ts"] for r in rows)
    plans = [planned_connection(rs, t0, clone, i) for i, rs in enumerate(_by_conn(rows))]
    return [p for p in plans if p is not None]


def _plans(path: Path, clone: int = 0) -> list[PlannedConnection]:
    return _plans_of(rows_from_path(str(path)), clone)


def test_rows_from_bytes_equal_rows_from_path(corpus: Path) -> None:
    path = corpus / "pcap" / "c_BatchSend.pcap"
    by_path = rows_from_path(str(path))
    by_bytes = list(rows_from_bytes(str(path), path.read_bytes()))
    assert by_path == by_bytes
    assert all(r["error"] is None for r in by_path)
    # every response knows which request it answers
    assert all(r["req_code"] >= 0 for r in by_path if not r["is_request"])


def test_plan_holds_every_client_request_but_the_brokers_own(corpus: Path) -> None:
    path = corpus / "pcap" / "a_SyncSendPushConsume.pcap"
    rows = rows_from_path(str(path))
    plans = _plans(path)
    client_requests = [r for r in rows if r["direction"] == "c2s" and r["is_request"]]
    registering = [r for r in client_requests if r["code"] == RequestCode.REGISTER_BROKER]
    assert registering, "the capture has the broker's own registration"
    assert sum(len(p.requests) for p in plans) == len(client_requests) - len(registering)
    assert not any(r.code == RequestCode.REGISTER_BROKER for p in plans for r in p.requests)
    assert {p.role for p in plans} == {Role.NAMESRV, Role.BROKER}
    for p in plans:
        times = [r.ts for r in p.requests]
        assert times == sorted(times) and times[0] >= 0
    sends = [r for p in plans for r in p.requests if r.code == RequestCode.SEND_MESSAGE_V2]
    assert len(sends) == 100
    assert all(r.resp_code == 0 and message_count(decode_frame(r.raw)) == 1 for r in sends)


def test_sync_producer_waits_for_each_response(corpus: Path) -> None:
    plans = _plans(corpus / "pcap" / "a_SyncSendPushConsume.pcap")
    producer = next(p for p in plans if any(r.code == RequestCode.SEND_MESSAGE_V2 for r in p.requests))
    sends = [r for r in producer.requests if r.code == RequestCode.SEND_MESSAGE_V2]
    # the engine holds a request until every response recorded before it was sent has come
    for prev, nxt in itertools.pairwise(sends):
        assert prev.resp_ts is not None and prev.ts < prev.resp_ts <= nxt.ts


def test_unanswered_long_polls_have_no_expected_code(corpus: Path) -> None:
    plans = _plans(corpus / "pcap" / "a_SyncSendPushConsume.pcap")
    pulls = [r for p in plans for r in p.requests if r.code == RequestCode.PULL_MESSAGE]
    assert any(r.resp_code is None for r in pulls)  # parked when the capture ended
    assert any(r.resp_code == 0 for r in pulls)


def test_clones_get_distinct_client_ids_and_message_keys(corpus: Path) -> None:
    path = corpus / "pcap" / "c_BatchSend.pcap"
    per_clone = [_plans(path, clone) for clone in range(3)]
    heartbeats = [
        [
            loads(bytes(decode_frame(s.raw).body).decode())["clientID"]
            for p in plans
            for s in p.requests
            if s.code == 34
        ]
        for plans in per_clone
    ]
    assert heartbeats[1] == [f"{cid}#1" for cid in heartbeats[0]]
    assert heartbeats[2] == [f"{cid}#2" for cid in heartbeats[0]]
    unregisters = [
        [decode_frame(s.raw).ext_fields["clientID"] for p in plans for s in p.requests if s.code == 35]
        for plans in per_clone
    ]
    assert unregisters[1] == [f"{cid}#1" for cid in unregisters[0]]

    def batch_entries(plans: list[PlannedConnection]) -> list:
        return [
            e
            for p in plans
            for s in p.requests
            if s.code == RequestCode.SEND_BATCH_MESSAGE
            for e in decode_batch(decode_frame(s.raw).body)
        ]

    entries = [batch_entries(plans) for plans in per_clone]
    assert (
        len(entries[0])
        == 40
        == sum(message_count(decode_frame(s.raw)) for p in per_clone[0] for s in p.requests)
    )
    uniq = [e.properties["UNIQ_KEY"] for es in entries for e in es]
    assert len(set(uniq)) == len(uniq) == 120
    assert len({len(u) for u in uniq}) == 1 and len(uniq[0]) in (32, 56)  # same shape as recorded
    keys = [e.properties.get("KEYS") for es in entries for e in es]
    if keys[0]:
        assert len(set(keys)) == len(keys)
    # bodies, flags and the producer group are what the client sent
    assert [e.body for e in entries[1]] == [e.body for e in entries[0]]
    groups = {
        decode_frame(s.raw).ext_fields["a"]
        for plans in per_clone
        for p in plans
        for s in p.requests
        if s.code == RequestCode.SEND_BATCH_MESSAGE
    }
    assert len(groups) == 1


def test_single_send_clone_rewrites_properties(corpus: Path) -> None:
    path = corpus / "pcap" / "a_SyncSendPushConsume.pcap"
    props = [
        [
            parse_properties(decode_frame(s.raw).ext_fields["i"])
            for p in _plans(path, clone)
            for s in p.requests
            if s.code == RequestCode.SEND_MESSAGE_V2
        ]
        for clone in (0, 1)
    ]
    assert len(props[0]) == len(props[1]) == 100
    for a, b in zip(*props, strict=True):
        assert a["UNIQ_KEY"] != b["UNIQ_KEY"] and len(a["UNIQ_KEY"]) == len(b["UNIQ_KEY"])
        if "KEYS" in a:
            assert b["KEYS"] == " ".join(f"{k}#1" for k in a["KEYS"].split(" "))
        assert {k: v for k, v in a.items() if k not in ("UNIQ_KEY", "KEYS")} == {
            k: v for k, v in b.items() if k not in ("UNIQ_KEY", "KEYS")
        }


def test_clone_uniq_key_shape() -> None:
    uniq = "7F00000100641B6D2AC47E1C0000000A"
    assert clone_uniq_key(uniq, 0) == uniq
    assert [clone_uniq_key(uniq, c)[8:12] for c in (1, 2)] == ["0065", "0066"]
    assert clone_uniq_key("odd", 3) == "odd-3"


def test_broker_names_by_main_and_vip_port(corpus: Path) -> None:
    rows = rows_from_path(str(corpus / "pcap" / "a_SyncSendPushConsume.pcap"))
    names = broker_names_from_routes(route_bodies_from_rows(rows))
    assert names == {"127.0.0.1:10911": "broker-a"}
    assert broker_name_of("127.0.0.1:10911", names) == "broker-a"
    assert broker_name_of("127.0.0.1:10909", names) == "broker-a"  # the VIP channel (listenPort - 2)
    assert broker_name_of("127.0.0.1:9876", names) is None
    t0 = min(r["ts"] for r in rows)
    plans = [p for i, rs in enumerate(_by_conn(rows)) if (p := planned_connection(rs, t0, 0, i, names))]
    assert {p.broker_name for p in plans if p.role == Role.BROKER} == {"broker-a"}
    assert {p.broker_name for p in plans if p.role == Role.NAMESRV} == {None}


def test_assign_partitions_balances_request_counts() -> None:
    weights = {("a", 0): 100, ("a", 1): 100, ("b", 0): 60, ("b", 1): 60, ("c", 0): 30, ("c", 1): 30}
    assign = assign_partitions(weights, 2)
    loads_ = [sum(w for k, w in weights.items() if assign[k] == i) for i in range(2)]
    assert sorted(loads_) == [190, 190]
    assert assign[("a", 0)] != assign[("a", 1)]  # clones of a connection spread out
    assert set(assign_partitions(weights, 8).values()) == set(range(6))


def test_capture_file_gives_the_same_rows_as_its_pcap(corpus: Path, tmp_path: Path) -> None:
    from rmqgate.tools.traffic import convert_pcap

    pcap = corpus / "pcap" / "c_BatchSend.pcap"
    cap = tmp_path / "c.rmqcap"
    convert_pcap(pcap, cap)
    from_pcap = rows_from_path(str(pcap))
    from_cap = list(rows_from_bytes("c.rmqcap", cap.read_bytes()))

    def key(r: dict) -> tuple:
        return (
            r["ts"],
            r["direction"],
            r["client"],
            r["server"],
            r["code"],
            r["req_code"],
            r["opaque"],
            r["raw"],
        )

    assert sorted(map(key, from_cap)) == sorted(map(key, from_pcap))
    assert {r["role"] for r in from_cap} == {"namesrv", "broker"}  # recorded, not guessed
    assert sum(len(p.requests) for p in _plans_of(from_cap)) == sum(len(p.requests) for p in _plans(pcap))
