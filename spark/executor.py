"""What one Spark task does: replay its connection plans against the target with asyncio.

A minimal per-connection replayer on rmqgate.server.client.RemotingClient (kept here until the shared
replay engine of tools/replay.py can run a list of plans; the lead dedupes). Each connection sends
its requests in recorded order, at ``start_at + t / speed`` (or at once with speed None = max), and
before each request waits for the responses the capture shows had arrived before it (so a sync
producer stays sync and a parked long-poll does not hold up the heartbeats behind it). Requests the
server makes are answered with what the recorded client answered (or SUCCESS). One outcome row per
request.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rmqgate.server.client import RemotingClient
from rmqgate.spark.plan import PULL_CODES, ConnPlan, Step
from rmqgate.wire.codes import ResponseCode
from rmqgate.wire.command import ONEWAY_FLAG, RemotingCommand
from rmqgate.wire.frame import decode_frame

#: (name, Spark SQL type) of an outcome row, in order.
OUTCOME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("task", "int"),
    ("conn", "string"),
    ("clone", "int"),
    ("role", "string"),
    ("target", "string"),
    ("seq", "int"),
    ("code", "int"),
    ("topic", "string"),
    ("status", "string"),  # ok / oneway / unanswered / timeout / conn_error / unroutable
    ("resp_code", "int"),  # -1: no response
    ("expected", "int"),  # recorded response code, -1: none recorded
    ("mismatch", "boolean"),
    ("messages", "int"),  # messages a SEND carried
    ("sched_s", "double"),  # when the plan said to send, seconds after start
    ("sent_s", "double"),  # when it was sent, seconds after start
    ("latency_ms", "double"),  # -1: no response
    ("req_bytes", "int"),
    ("resp_bytes", "int"),
    ("error", "string"),
    ("long_poll", "boolean"),  # a pull the recorded broker held (its latency is reported apart)
    ("task_cpu_s", "double"),  # CPU seconds the whole task used replaying (same on each of its rows)
)
OUTCOME_DDL = ", ".join(f"{n} {t}" for n, t in OUTCOME_COLUMNS)
ERROR_STATUSES = ("timeout", "conn_error", "unroutable")


@dataclass(slots=True)
class ReplayOptions:
    speed: float | None = 1.0  # None: as fast as the target answers
    timeout: float = 30.0  # per request with a recorded response
    grace: float = 1.0  # how long requests the capture never saw answered may stay open at the end
    connect_timeout: float = 5.0


def _outcome(
    task: int,
    plan: ConnPlan,
    target: str,
    step: Step,
    status: str,
    sched: float,
    sent: float,
    resp: RemotingCommand | None = None,
    latency_ms: float = -1.0,
    error: str | None = None,
) -> tuple[Any, ...]:
    resp_code = resp.code if resp is not None else -1
    expected = -1 if step.expected is None else step.expected
    resp_bytes = 0
    if resp is not None:
        resp_bytes = len(resp.body) if resp.body else 0
    return (
        task,
        plan.key,
        plan.clone,
        plan.role,
        target,
        step.seq,
        step.code,
        step.topic,
        status,
        resp_code,
        expected,
        resp is not None and expected >= 0 and resp_code != expected,
        step.messages,
        sched,
        sent,
        latency_ms,
        len(step.frame),
        resp_bytes,
        error,
        step.code in PULL_CODES and step.expected is None,
    )


async def replay_connection(
    plan: ConnPlan, target: str, start_at: float, opts: ReplayOptions, task: int = 0
) -> list[tuple[Any, ...]]:
    """Replay one connection; one outcome per step, in step order."""
    out: dict[int, tuple[Any, ...]] = {}
    speed = opts.speed
    steps = plan.steps
    now = time.time

    def sched_of(step: Step) -> float:
        return step.t / speed if speed else 0.0

    if not target:
        return [
            _outcome(
                task, plan, target, s, "unroutable", sched_of(s), -1.0, error="no target for " + plan.server
            )
            for s in steps
        ]
    cmds = [decode_frame(s.frame) for s in steps]
    reply_index: dict[int, int] = {}

    def on_request(cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.flag & ONEWAY_FLAG:
            return None
        recorded = plan.replies.get(cmd.code)
        if not recorded:
            return cmd.response(ResponseCode.SUCCESS)
        i = reply_index.get(cmd.code, 0)
        reply_index[cmd.code] = i + 1
        resp = decode_frame(recorded[i % len(recorded)])
        resp.opaque = cmd.opaque
        return resp

    host, _, port = target.rpartition(":")
    delay = start_at + (sched_of(steps[0]) if speed else 0.0) - now()
    if delay > 0:
        await asyncio.sleep(delay)
    try:
        client = await RemotingClient.connect(
            host.strip("[]"), int(port), on_request=on_request, timeout=opts.connect_timeout
        )
    except (OSError, TimeoutError) as exc:
        msg = f"connect {target}: {exc or type(exc).__name__}"
        return [_outcome(task, plan, target, s, "conn_error", sched_of(s), -1.0, error=msg) for s in steps]

    done: dict[int, asyncio.Event] = {}
    needed = {d for s in steps for d in s.deps}
    for d in needed:
        done[d] = asyncio.Event()

    async def call(step: Step, cmd: RemotingCommand, sched: float, sent: float, timeout: float) -> None:
        t = time.perf_counter()
        try:
            resp = await client.invoke(cmd, timeout)
            latency = (time.perf_counter() - t) * 1000.0
            out[step.seq] = _outcome(task, plan, target, step, "ok", sched, sent, resp, latency)
        except TimeoutError:
            # no answer is what the capture shows for a request it never saw answered
            status = "unanswered" if step.expected is None else "timeout"
            out[step.seq] = _outcome(task, plan, target, step, status, sched, sent, error="timeout")
        except asyncio.CancelledError:
            out[step.seq] = _outcome(task, plan, target, step, "unanswered", sched, sent)
        except (ConnectionError, OSError) as exc:
            out[step.seq] = _outcome(task, plan, target, step, "conn_error", sched, sent, error=str(exc))
        finally:
            ev = done.get(step.seq)
            if ev is not None:
                ev.set()

    expected_tasks: list[asyncio.Task[None]] = []
    open_tasks: list[asyncio.Task[None]] = []
    try:
        for step, cmd in zip(steps, cmds, strict=True):
            sched = sched_of(step)
            if speed:
                delay = start_at + sched - now()
                if delay > 0:
                    await asyncio.sleep(delay)
            for d in step.deps:
                ev = done.get(d)
                if ev is not None and not ev.is_set():
                    await ev.wait()
            sent = now() - start_at
            if client.closed:
                out[step.seq] = _outcome(
                    task, plan, target, step, "conn_error", sched, sent, error="connection closed"
                )
                continue
            if step.oneway:
                client.invoke_oneway(cmd)
                out[step.seq] = _outcome(task, plan, target, step, "oneway", sched, sent)
                continue
            if step.expected is None:
                open_tasks.append(asyncio.create_task(call(step, cmd, sched, sent, opts.timeout)))
            else:
                expected_tasks.append(asyncio.create_task(call(step, cmd, sched, sent, opts.timeout)))
        if expected_tasks:
            await asyncio.gather(*expected_tasks)
        if open_tasks:
            _, pending = await asyncio.wait(open_tasks, timeout=opts.grace)
            for t in pending:
                t.cancel()
            await asyncio.gather(*open_tasks, return_exceptions=True)
    finally:
        await client.aclose()
    return [out[s.seq] for s in steps]


async def replay_plans(
    plans: Iterable[ConnPlan], targets: dict[str, str], start_at: float, opts: ReplayOptions, task: int = 0
) -> list[tuple[Any, ...]]:
    plans = list(plans)
    results = await asyncio.gather(
        *(replay_connection(p, targets.get(p.server, ""), start_at, opts, task) for p in plans)
    )
    return [row for rows in results for row in rows]


def _with_cpu(replay: Any) -> list[tuple[Any, ...]]:
    """Run ``replay()`` with the cyclic GC off and append the CPU time it took to every row."""
    gc.collect()
    gc.freeze()
    gc.disable()
    cpu = time.process_time()
    try:
        rows = replay()
    finally:
        cpu = time.process_time() - cpu
        gc.enable()
        gc.unfreeze()
        gc.collect()
    return [(*r, cpu) for r in rows]


def run_task(
    plans: Iterable[ConnPlan], targets: dict[str, str], start_at: float, opts: ReplayOptions, task: int = 0
) -> list[tuple[Any, ...]]:
    """Entry point inside a Spark task (its own event loop).

    The cyclic garbage collector is off while replaying: with tens of thousands of live requests its
    full passes cost more than the replay itself (3x fewer requests/s measured); it runs once after.
    Rows are ``OUTCOME_COLUMNS``.
    """
    return _with_cpu(lambda: asyncio.run(replay_plans(plans, targets, start_at, opts, task)))


# --- the shared engine (tools/replay.py) -----------------------------------------------------------


@dataclass(slots=True)
class SharedUnit:
    """One (connection, clone) for tools/replay's engine: its PlannedConnection and our names for it."""

    key: str
    clone: int
    role: str
    conn: Any  # rmqgate.tools.replay.PlannedConnection (conn_id unique in the task)
    messages: list[int]  # messages each request stores (SENDs), by request index


def _status(o: Any, oneway: bool) -> str:
    if o.response_code is not None:
        return "ok"
    if o.error:
        return "timeout" if o.error == "timeout" else "conn_error"
    return "oneway" if oneway else "unanswered"


async def _replay_shared(
    units: list[SharedUnit],
    brokers: dict[str, str],
    namesrv: str,
    start_at: float,
    opts: ReplayOptions,
    task: int,
    topic_map: dict[str, str],
    broker_map: dict[str, str],
) -> list[tuple[Any, ...]]:
    from rmqgate.tools.replay import ReplayOptions as SharedOptions
    from rmqgate.tools.replay import replay_connections

    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    shared = SharedOptions(
        speed=opts.speed,
        topic_map=topic_map,
        broker_map=broker_map,
        request_timeout=opts.timeout,
        connect_timeout=opts.connect_timeout,
        unanswered_timeout=opts.grace,
    )
    outcomes = await replay_connections(
        [u.conn for u in units], namesrv, shared, plan_start=0.0, brokers=brokers
    )
    by_id = {u.conn.conn_id: u for u in units}
    seqs: dict[int, int] = {}
    rows = []
    for o in outcomes:
        u = by_id[o.conn_id]
        if o.kind == "request":
            seq = seqs.get(o.conn_id, 0)
            seqs[o.conn_id] = seq + 1
            req = u.conn.requests[seq] if seq < len(u.conn.requests) else None
        else:  # an END_TRANSACTION answering the target's CHECK_TRANSACTION_STATE
            seq, req = -1, None
        oneway = bool(req.oneway) if req is not None else False
        latency = o.latency_ms
        expected = -1 if o.recorded_code is None else int(o.recorded_code)
        resp = -1 if o.response_code is None else int(o.response_code)
        rows.append(
            (
                task,
                u.key,
                u.clone,
                u.role,
                "",
                seq,
                int(o.code),
                o.topic,
                _status(o, oneway),
                resp,
                expected,
                bool(o.mismatch),
                u.messages[seq] if 0 <= seq < len(u.messages) else 0,
                (req.ts / opts.speed if opts.speed else 0.0) if req is not None else -1.0,
                o.sent - start_at,
                latency if latency is not None else -1.0,
                len(req.raw) if req is not None else 0,
                0,
                o.error,
                bool(o.long_poll),
            )
        )
    return rows


def run_task_shared(
    units: Iterable[SharedUnit],
    brokers: dict[str, str],
    namesrv: str,
    start_at: float,
    opts: ReplayOptions,
    task: int = 0,
    topic_map: dict[str, str] | None = None,
    broker_map: dict[str, str] | None = None,
) -> list[tuple[Any, ...]]:
    """Like ``run_task`` with tools/replay's engine (cross-connection causality within the task, offset
    translation, long-poll suspend scaling, CHECK_TRANSACTION_STATE answers)."""
    units = list(units)
    if not units:
        return []
    return _with_cpu(
        lambda: asyncio.run(
            _replay_shared(units, brokers, namesrv, start_at, opts, task, topic_map or {}, broker_map or {})
        )
    )


def task_id() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None:
            return int(ctx.partitionId())
    except ImportError:
        pass
    return os.getpid()
