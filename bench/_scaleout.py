"""One run of ``bench/broker.py --brokers``: the stock benchmark Producer, one JVM per broker, against a
cluster, and what the window cost in CPU.

Per run: aggregate sends/s (messages every broker stored in the window), the cores the servers' process
trees used, the cores the Producer JVMs used and the busy cores of the whole machine (/proc/stat), so a
reader can tell whether the load generator had cores to spare. One JVM per broker: the 4.9.8 client
does all its network I/O on one selector thread (NettyRemotingClient's worker group of 1), which one
JVM driving eight brokers would make the bottleneck. Runs are appended to a CSV as they finish.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Protocol

from _timing import CLK_TCK, cpu_seconds
from java_vs_rmqgate import Producer

from rmqgate.compat_tests.wire_client import wait_until


class ClusterUnderTest(Protocol):
    name: str
    namesrv: str
    roots: list[int]

    def stored(self) -> int: ...


@dataclass
class ScaleRun:
    round: int
    server: str
    brokers: int
    producers: int
    threads: int  # per Producer JVM
    seconds: float  # the measured window
    tps: float  # messages all brokers stored in the window, per second
    server_cores: float  # the servers' process trees: CPU seconds / window
    producer_cores: float  # the Producer JVMs: CPU seconds / window
    busy_cores: float  # the whole machine's busy CPU seconds (/proc/stat) / window
    cpus: int
    cpu_us_per_msg: float  # the servers' CPU per stored message
    failed: int  # sends the Producers counted as failed, all told


CSV_FIELDS = [f.name for f in fields(ScaleRun)]


def parse_cpus(text: str) -> set[int]:
    """A CPU list as taskset takes it (``0-7,12``)."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


@contextlib.contextmanager
def children_on(cpus: set[int] | None) -> Iterator[None]:
    """Processes started in the block (by this thread) run on ``cpus``: they inherit this thread's
    affinity at fork, which is restored afterwards."""
    if not cpus:
        yield
        return
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy: /proc/stat's user, nice, system, irq and softirq
    (guest time is inside user and nice; idle, iowait and steal are not work done here)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / CLK_TCK


def measure(
    target: ClusterUnderTest,
    *,
    brokers: int,
    round_no: int,
    args: argparse.Namespace,
    log_dir: Path,
    producer_cpus: set[int] | None = None,
) -> ScaleRun:
    """``brokers`` Producer JVMs of ``args.threads`` threads each: warm-up, then the window."""
    with children_on(producer_cpus):
        producers = [Producer(target.namesrv, args.threads, args.size, log_dir) for _ in range(brokers)]
    try:
        stored_before = target.stored()
        time.sleep(args.warmup)
        # a JVM starting on a loaded machine may not have sent yet: the window opens once one has
        wait_until(
            lambda: not all(p.alive() for p in producers) or target.stored() > stored_before,
            timeout=60,
            interval=0.5,
        )
        dead = [p for p in producers if not p.alive()]
        if dead:
            raise SystemExit("benchmark Producer exited early:\n" + "\n".join(dead[0].tail))
        pids = [p.proc.pid for p in producers]
        stored0, t0 = target.stored(), time.monotonic()
        server0, producer0, busy0 = cpu_seconds(target.roots), cpu_seconds(pids), machine_busy_seconds()
        time.sleep(args.seconds)
        server1, producer1, busy1 = cpu_seconds(target.roots), cpu_seconds(pids), machine_busy_seconds()
        stored1, t1 = target.stored(), time.monotonic()
    finally:
        for p in producers:
            p.stop()
    sent, window = stored1 - stored0, t1 - t0
    if sent <= 0:
        raise SystemExit(
            f"no message stored on {target.name} in the window:\n" + "\n".join(producers[0].tail)
        )
    return ScaleRun(
        round=round_no,
        server=target.name,
        brokers=brokers,
        producers=len(producers),
        threads=args.threads,
        seconds=round(window, 3),
        tps=round(sent / window, 1),
        server_cores=round((server1 - server0) / window, 3),
        producer_cores=round((producer1 - producer0) / window, 3),
        busy_cores=round((busy1 - busy0) / window, 3),
        cpus=os.cpu_count() or 0,
        cpu_us_per_msg=round((server1 - server0) * 1e6 / sent, 2),
        failed=sum(int(p.stats[-1][1]["failed"]) for p in producers if p.stats),
    )


def append_csv(path: Path, run: ScaleRun) -> None:
    """One row per run, the header first into a new file: a run cut short keeps the rows so far."""
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(asdict(run))


def median_of(runs: list[ScaleRun], attr: str) -> float:
    return statistics.median(float(getattr(r, attr)) for r in runs)
