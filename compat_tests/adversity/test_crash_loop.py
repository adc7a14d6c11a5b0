"""Crash loop with real clients: `rmqgate serve` killed with SIGKILL again and again under stock clients,
restarted each time on the same ports and store.

SYNC_FLUSH (``ADVERSITY_CRASH_CYCLES`` kills, default 100): two Java 4.9.8 producers (JSON and ROCKETMQ
headers) and a C++-core producer (rocketmq-python-cvs) send, and two Java push consumers (each the one
member of its group) consume, all the while; each writes down every SEND_OK / delivery as it comes
(compat_tests/java/CrashLoop.java, clients/cpp_driver.py ``produce_until``). After each restart the
groups' committed offsets are queried: none may be below what the previous restart showed (the broker
journals every commit, store/meta.py, where 4.9.8 would lose those since its last 5-s persist). At the
end (one more clean stop and start): every message that got SEND_OK is stored exactly once, in the
queue and at the offset its send returned; each queue's offsets run from 0 without a hole; each
consumer got every stored message, none at an offset holding another body, with no gap in any queue.

ASYNC_FLUSH: after a clean stop nothing acknowledged is missing; after each SIGKILL the recovery line
of the new process says how many messages it dropped, and any acknowledged message missing is one of
the last of its queue and counted there.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import CPP_DRIVER, Background, cpp_env
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, free_broker_port, free_port, log_tail
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic, stored_messages, wait_until
from rmqgate.wire.codes import RequestCode, ResponseCode

CYCLES = int(os.environ.get("ADVERSITY_CRASH_CYCLES", "100"))
ASYNC_CYCLES = int(os.environ.get("ADVERSITY_ASYNC_CRASH_CYCLES", "10"))
pytestmark = [pytest.mark.java, pytest.mark.timeout(900 + 30 * max(CYCLES, ASYNC_CYCLES))]
TOPIC = "CrashLoopTopic"
#: Two consumers, each the one member of its group: two members of one group hand queues back and forth
#: at every restart, and the 4.9.8 client then commits older offsets itself (seen: a member re-reading a
#: queue from 418 after the other had consumed it to 1697), which says nothing about the broker.
GROUPS = ("CrashLoopConsumers-1", "CrashLoopConsumers-2")
QUEUES = 4
RECOVERY = re.compile(
    rb"recovery \(([a-z ]+)\): CommitLog valid to offset (\d+); dropped (\d+) messages, (\d+) bytes"
)


def conf(flush: str) -> str:
    return BROKER_CONF.replace("flushDiskType = ASYNC_FLUSH", f"flushDiskType = {flush}")


class Broker:
    """`rmqgate serve` on fixed ports and one store, killed and started again; a log per start."""

    def __init__(self, workdir: Path, flush: str) -> None:
        self.workdir = workdir
        self.conf = conf(flush)
        self.ns_port, self.broker_port = free_port(), free_broker_port()
        self.starts = 0
        self.server: ServerProcess | None = None
        self.start()

    def start(self) -> float:
        """Start and wait until ready; seconds it took."""
        t = time.monotonic()
        self.server = ServerProcess(
            self.workdir, conf=self.conf, namesrv_port=self.ns_port, broker_port=self.broker_port,
            log_name=f"serve-{self.starts:03d}.log", extra_args=("--log-level", "INFO"),
        )  # fmt: skip
        self.starts += 1
        self.server.wait_ready()
        return time.monotonic() - t

    def kill(self) -> None:
        assert self.server is not None
        assert self.server.proc.poll() is None, f"rmqgate died by itself:\n{log_tail(self.server.log_path)}"
        self.server.proc.send_signal(signal.SIGKILL)
        self.server.proc.wait()
        self.server.stop()  # (closes its log)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def recovery(self) -> tuple[str, int, int]:
        """(kind, messages dropped, bytes dropped) from the running process's recovery line."""
        assert self.server is not None
        m = RECOVERY.search(self.server.log_path.read_bytes())
        return (m.group(1).decode(), int(m.group(3)), int(m.group(4))) if m else ("(not logged)", 0, 0)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"


def committed_offsets(addr: str) -> dict[tuple[str, int], int]:
    """Each group's committed offset of each queue (-1: none yet)."""
    out = {}
    with WireClient(addr, timeout=15) as c:
        for group in GROUPS:
            for q in range(QUEUES):
                ext = {"consumerGroup": group, "topic": TOPIC, "queueId": q}
                resp = c.invoke(RequestCode.QUERY_CONSUMER_OFFSET, ext)
                out[(group, q)] = int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1
    return out


def java_acks(path: Path) -> list[tuple[str, int, int, str]]:
    """(msgId, queueId, queueOffset, body) of each SEND_OK a CrashLoop producer wrote down."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ")
        if len(parts) == 4:  # (a line cut by the program's end is not an acknowledgement yet)
            out.append((parts[0], int(parts[1]), int(parts[2]), parts[3]))
    return out


def cpp_acks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def deliveries(paths: list[Path]) -> list[tuple[int, int, str]]:
    """(queueId, queueOffset, body) of each delivery the consumers wrote down."""
    out = []
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split(" ")
                if len(parts) == 4:
                    out.append((int(parts[0]), int(parts[1]), parts[3]))
    return out


def stored_by_position(addr: str) -> dict[tuple[int, int], Any]:
    """Every stored message by (queueId, queueOffset); each queue's offsets must run from 0 unbroken."""
    out = {}
    for q, msgs in stored_messages(addr, TOPIC, QUEUES).items():
        offsets = [m.queue_offset for m in msgs]
        assert offsets == list(range(len(offsets))), f"queue {q}: offsets not contiguous from 0"
        for m in msgs:
            out[(q, m.queue_offset)] = m
    return out


def at_its_offset(stored: dict[tuple[int, int], Any], ack: tuple[str, int, int, str]) -> bool:
    m = stored.get((ack[1], ack[2]))
    return m is not None and bytes(m.body).decode() == ack[3]


def check_acks(
    stored: dict[tuple[int, int], Any], jacks: list[tuple[str, int, int, str]], cacks: list[dict[str, Any]]
) -> list[str]:
    """What is wrong with the acknowledged messages in the store (empty: each is there once, in place)."""
    problems = []
    by_body = Counter(bytes(m.body).decode() for m in stored.values())
    for msg_id, q, off, body in jacks:
        m = stored.get((q, off))
        if m is None or bytes(m.body).decode() != body:
            problems.append(f"java SEND_OK {body} not at queue {q} offset {off}")
        elif m.properties.get("UNIQ_KEY") != msg_id:
            problems.append(f"java SEND_OK {body}: stored id {m.properties.get('UNIQ_KEY')} != {msg_id}")
        if by_body[body] != 1:
            problems.append(f"java SEND_OK {body} stored {by_body[body]} times")
    positions = {bytes(m.body).decode(): pos for pos, m in stored.items()}
    for a in cacks:
        pos = positions.get(a["body"])
        if pos is None or pos != (a["queue"], a["offset"]):
            problems.append(
                f"c++ SEND_OK {a['body']} at queue {a['queue']} offset {a['offset']}: stored at {pos}"
            )
        elif stored[pos].properties.get("UNIQ_KEY") != a["msg_id"]:
            problems.append(f"c++ SEND_OK {a['body']}: stored id differs from {a['msg_id']}")
        if by_body[a["body"]] != 1:
            problems.append(f"c++ SEND_OK {a['body']} stored {by_body[a['body']]} times")
    return problems


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = java.missing()
    if reason:
        pytest.skip(reason)
    return java.compiled_clients(4, tmp_path_factory.mktemp("crash-java"))


def start_java(classes: Path, workdir: Path, role: str, name: str, namesrv: str, serialization: str,
               stop: Path, timeout: float, group: str = "") -> tuple[Background, Path]:  # fmt: skip
    out = workdir / f"{name}.log"
    args = {"role": role, "namesrv": namesrv, "topic": TOPIC, "out": str(out), "stop": str(stop), "prefix": name,
            "group": group or f"CrashLoopProducer-{name}"}  # fmt: skip
    logs = workdir / f"{name}-client-logs"
    logs.mkdir(exist_ok=True)
    proc = java.java_client(
        4, classes, "CrashLoop", args, serialization=serialization, log_dir=logs, timeout=timeout
    )
    return proc, out


def test_sync_flush_crash_loop_with_java_and_cpp_clients(
    tmp_path: Path, classes: Path, report: Callable[..., str]
) -> None:
    rnd = random.Random(int(os.environ.get("ADVERSITY_CRASH_SEED", "0")) or None)
    budget = 120 + CYCLES * 30  # seconds the clients may run
    broker = Broker(tmp_path, "SYNC_FLUSH")
    stop_producers, stop_consumers = tmp_path / "stop-producers", tmp_path / "stop-consumers"
    clients: list[Background] = []
    try:
        create_routed_topic(broker.addr, broker.namesrv, TOPIC, QUEUES)
        p1, p1_out = start_java(
            classes, tmp_path, "produce", "jp-json", broker.namesrv, "JSON", stop_producers, budget
        )
        p2, p2_out = start_java(
            classes, tmp_path, "produce", "jp-rmq", broker.namesrv, "ROCKETMQ", stop_producers, budget
        )
        c1, c1_out = start_java(
            classes, tmp_path, "consume", "jc-1", broker.namesrv, "JSON", stop_consumers, budget, GROUPS[0]
        )
        c2, c2_out = start_java(
            classes,
            tmp_path,
            "consume",
            "jc-2",
            broker.namesrv,
            "ROCKETMQ",
            stop_consumers,
            budget,
            GROUPS[1],
        )
        cpp_out = tmp_path / "cpp.log"
        home = tmp_path / "cpp-home"
        home.mkdir()
        cpp_args = {"scenario": "produce_until", "namesrv": broker.namesrv, "topic": TOPIC, "group": "CrashLoopCpp",
                    "out": str(cpp_out), "stop": str(stop_producers), "body_prefix": "cpp"}  # fmt: skip
        cpp = Background([sys.executable, str(CPP_DRIVER), json.dumps(cpp_args)], cpp_env(home), home,
                         "cpp driver produce_until", budget)  # fmt: skip
        clients = [p1, p2, c1, c2, cpp]
        consumed = [c1_out, c2_out]
        started = wait_until(
            lambda: java_acks(p1_out) and java_acks(p2_out) and cpp_acks(cpp_out) and all(
                deliveries([c]) for c in consumed
            ),
            timeout=120, interval=0.5,
        )  # fmt: skip
        assert started, "the clients did not all get going"

        rows: list[tuple[Any, ...]] = []
        last_offsets = committed_offsets(broker.addr)
        restart_s: list[float] = []
        dropped_total = 0
        for cycle in range(1, CYCLES + 1):
            time.sleep(rnd.uniform(0.2, 1.5))
            broker.kill()
            took = broker.start()
            restart_s.append(took)
            kind, dropped, _ = broker.recovery()
            assert kind == "after a crash", f"cycle {cycle}: recovery line {kind}"
            dropped_total += dropped
            offsets = committed_offsets(broker.addr)
            back = {k: (last_offsets[k], o) for k, o in offsets.items() if o < last_offsets[k]}
            assert not back, f"cycle {cycle}: committed offsets moved backwards (before, now): {back}"
            last_offsets = offsets
            if cycle % 10 == 0 or cycle == CYCLES:
                acked = len(java_acks(p1_out)) + len(java_acks(p2_out)) + len(cpp_acks(cpp_out))
                rows.append((cycle, f"{took:.2f}", acked, len(deliveries(consumed)), dropped_total,
                             " ".join(str(offsets[(GROUPS[0], q)]) for q in range(QUEUES))))  # fmt: skip

        stop_producers.touch()
        results = {name: p.result() for name, p in (("jp-json", p1), ("jp-rmq", p2), ("cpp", cpp))}
        # a clean stop and start after the last kill: what is stored now is what the checks read
        broker.stop()
        broker.start()
        assert broker.recovery()[0] == "clean shutdown" or broker.recovery()[1] == 0
        stored = stored_by_position(broker.addr)
        jacks = java_acks(p1_out) + java_acks(p2_out)
        cacks = cpp_acks(cpp_out)
        problems = check_acks(stored, jacks, cacks)
        lost = sum(1 for a in jacks if not at_its_offset(stored, a))
        duplicated = sum(
            1 for n in Counter(bytes(m.body).decode() for m in stored.values()).values() if n > 1
        )

        def seen_all() -> bool:
            return all({(q, o) for q, o, _ in deliveries([c])} >= set(stored) for c in consumed)

        drained = wait_until(seen_all, timeout=180, interval=1.0)
        stop_consumers.touch()
        for c in (c1, c2):
            results[c.what] = c.result()
        got = deliveries(consumed)
        for c in consumed:
            missed = set(stored) - {(q, o) for q, o, _ in deliveries([c])}
            assert drained and not missed, (
                f"{c.name}: {len(missed)} stored messages never delivered, e.g. {sorted(missed)[:10]}"
            )
        wrong = [
            (q, o, b) for q, o, b in got if (q, o) not in stored or bytes(stored[(q, o)].body).decode() != b
        ]
        assert not wrong, f"deliveries at an offset holding another message: {wrong[:10]}"
        for c in consumed:
            for q in range(QUEUES):
                seen = sorted({o for qq, o, _ in deliveries([c]) if qq == q})
                assert seen == list(range(len(seen))), f"{c.name} queue {q}: a gap in what it saw"
        final_offsets = committed_offsets(broker.addr)
        assert all(final_offsets[k] >= last_offsets[k] for k in final_offsets), (last_offsets, final_offsets)
    finally:
        stop_producers.touch()
        stop_consumers.touch()
        for c in clients:
            c.kill()
        broker.stop()

    redelivered = sum(len(deliveries([c])) - len({(q, o) for q, o, _ in deliveries([c])}) for c in consumed)
    sent_failed = sum(r.get("data", {}).get("sendFailed", 0) for r in results.values() if isinstance(r, dict))
    report(
        "crash_loop_sync",
        f"Crash loop, SYNC_FLUSH: {CYCLES} SIGKILLs under 2 Java producers, 1 C++ producer, 2 Java consumers",
        (
            "cycle",
            "last restart s",
            "SEND_OK so far",
            "deliveries so far",
            "dropped by recovery",
            "group 1 offsets",
        ),
        rows,
    )
    report(
        "crash_loop_sync_totals",
        "Crash loop, SYNC_FLUSH: totals",
        ("kills", "restart s p50 / max", "SEND_OK (java / c++)", "failed sends (java)", "stored", "deliveries",
         "redelivered", "java SEND_OK lost", "bodies stored twice"),
        [(CYCLES, f"{statistics.median(restart_s):.2f} / {max(restart_s):.2f}", f"{len(jacks)} / {len(cacks)}",
          sent_failed, len(stored), len(got), redelivered, lost, duplicated)],
    )  # fmt: skip
    assert not problems, f"{len(problems)} acknowledged messages wrong, e.g. {problems[:10]}"


def test_async_flush_clean_stop_loses_nothing_and_a_kill_only_a_counted_tail(
    tmp_path: Path, classes: Path, report: Callable[..., str]
) -> None:
    budget = 120 + ASYNC_CYCLES * 30
    broker = Broker(tmp_path, "ASYNC_FLUSH")
    stop = tmp_path / "stop"
    rows: list[tuple[Any, ...]] = []
    producer: Background | None = None
    try:
        create_routed_topic(broker.addr, broker.namesrv, TOPIC, QUEUES)
        producer, out = start_java(
            classes, tmp_path, "produce", "jp-async", broker.namesrv, "JSON", stop, budget
        )
        assert wait_until(lambda: len(java_acks(out)) > 50, timeout=120, interval=0.5), (
            "the producer never got going"
        )

        time.sleep(1.0)
        broker.stop()  # clean: SIGTERM
        acked = java_acks(out)
        broker.start()
        kind, dropped, nbytes = broker.recovery()
        problems = check_acks(stored_by_position(broker.addr), acked, [])
        assert not problems, f"after a clean stop: {problems[:10]}"
        rows.append(("clean stop", kind, len(acked), 0, dropped, nbytes))

        for cycle in range(1, ASYNC_CYCLES + 1):
            time.sleep(random.uniform(0.3, 1.5))
            broker.kill()
            acked = java_acks(out)  # everything acknowledged before the kill (and maybe a few after)
            broker.start()
            kind, dropped, nbytes = broker.recovery()
            stored = stored_by_position(broker.addr)
            missing = [a for a in acked if not at_its_offset(stored, a)]
            kept = set(acked) - set(missing)
            tops: dict[int, int] = defaultdict(lambda: -1)
            for _, q, off, _ in kept:
                tops[q] = max(tops[q], off)
            not_tail = [a for a in missing if a[2] < tops[a[1]]]
            assert not not_tail, (
                f"kill {cycle}: lost acknowledged messages that are not a tail: {not_tail[:10]}"
            )
            assert len(missing) <= dropped, (
                f"kill {cycle}: {len(missing)} acknowledged lost, recovery said {dropped}"
            )
            rows.append((f"kill {cycle}", kind, len(acked), len(missing), dropped, nbytes))
    finally:
        stop.touch()
        if producer is not None:
            producer.kill()
        broker.stop()
    report(
        "crash_loop_async",
        f"ASYNC_FLUSH: a clean stop, then {ASYNC_CYCLES} SIGKILLs under a Java producer",
        (
            "event",
            "recovery",
            "SEND_OK so far",
            "acknowledged lost",
            "recovery: messages dropped",
            "bytes dropped",
        ),
        rows,
    )
