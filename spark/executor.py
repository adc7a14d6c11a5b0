"""What one Spark task does: replay its connections with tools/replay.py's engine, one outcome row each.

``run_task`` takes the partition's ``ReplayUnit``s (one per recorded connection and clone), waits for the
job's common time zero, replays them together with ``replay_connections`` (cross-connection causality
within the task, offset translation, long-poll suspend scaling, answers to the target's requests) and
turns each ``Outcome`` into an ``OUTCOME_COLUMNS`` row for Spark.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rmqgate.tools.replay import ReplayOptions, replay_connections
from rmqgate.tools.replay_plan import PlannedConnection
from rmqgate.tools.replay_report import Outcome

#: (name, Spark SQL type) of an outcome row, in order.
OUTCOME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("task", "int"),
    ("conn", "string"),
    ("clone", "int"),
    ("role", "string"),
    ("executor", "string"),  # host:working directory of the Python worker: one per Spark executor
    ("seq", "int"),
    ("code", "int"),
    ("topic", "string"),
    ("status", "string"),  # ok / oneway / unanswered / timeout / conn_error
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
ERROR_STATUSES = ("timeout", "conn_error")


@dataclass(slots=True)
class ReplayUnit:
    """One (connection, clone): its PlannedConnection and our names for it."""

    key: str
    clone: int
    role: str
    conn: PlannedConnection  # conn_id unique in the task
    messages: list[int]  # messages each request stores (SENDs), by request index


def executor_id() -> str:
    """Which executor runs this task: cluster managers start each executor in its own working
    directory (standalone: WORK_DIR/APP/EXECUTOR_ID, YARN: the container's), local mode in the driver's."""
    return f"{socket.gethostname()}:{os.getcwd()}"


def _status(o: Outcome, oneway: bool) -> str:
    if o.response_code is not None:
        return "ok"
    if o.error:
        return "timeout" if o.error == "timeout" else "conn_error"
    return "oneway" if oneway else "unanswered"


async def replay_units(
    units: list[ReplayUnit],
    brokers: dict[str, str],
    namesrv: str,
    start_at: float,
    opts: ReplayOptions,
    task: int,
) -> list[tuple[Any, ...]]:
    """Replay ``units`` from wall-clock time ``start_at``; rows are ``OUTCOME_COLUMNS`` but the last."""
    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    outcomes = await replay_connections(
        [u.conn for u in units], namesrv, opts, plan_start=0.0, brokers=brokers
    )
    by_id = {u.conn.conn_id: u for u in units}
    seqs: dict[int, int] = {}
    rows = []
    executor = executor_id()
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
        rows.append(
            (
                task,
                u.key,
                u.clone,
                u.role,
                executor,
                seq,
                int(o.code),
                o.topic,
                _status(o, oneway),
                -1 if o.response_code is None else int(o.response_code),
                -1 if o.recorded_code is None else int(o.recorded_code),
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


def _with_cpu(replay: Callable[[], list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
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
    units: Iterable[ReplayUnit],
    brokers: dict[str, str],
    namesrv: str,
    start_at: float,
    opts: ReplayOptions,
    task: int = 0,
) -> list[tuple[Any, ...]]:
    """Entry point inside a Spark task (its own event loop); rows are ``OUTCOME_COLUMNS``.

    The cyclic garbage collector is off while replaying: with tens of thousands of live requests its
    full passes cost more than the replay itself (3x fewer requests/s measured); it runs once after.
    """
    units = list(units)
    if not units:
        return []
    return _with_cpu(lambda: asyncio.run(replay_units(units, brokers, namesrv, start_at, opts, task)))
