"""Shared timing helpers for the benchmarks: best-of-N per-operation timings, table printing, how
much a busy second CPU slows this one (the context for work moved to "the other core") and the CPU
time of a server's process tree from /proc."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def per_op_us(fn: Callable[[], object], *, repeat: int = 7, min_time: float = 0.2) -> float:
    """Best-of-``repeat`` microseconds per call, each round running for at least ``min_time`` s."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time / 10:
            break
        number *= 4
    number = max(1, int(number * (min_time / max(elapsed, 1e-9))))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _spin_seconds(n: int = 3_000_000) -> float:
    start = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - start


def busy_neighbour_speed(rounds: int = 3) -> float | None:
    """Speed of a CPU-bound loop on one CPU while another process spins on a second CPU, relative to
    the same loop alone (median of alternating rounds): 1.0 for independent cores, lower where two
    vCPUs share a physical core. What a helper process or thread on "the other core" costs the
    thread it was meant to relieve. None with fewer than two CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    spin = f"import os\nos.sched_setaffinity(0, {{{cpus[1]}}})\nwhile True: pass"
    alone: list[float] = []
    shared: list[float] = []
    try:
        for _ in range(rounds):
            alone.append(_spin_seconds())
            neighbour = subprocess.Popen([sys.executable, "-c", spin])
            try:
                time.sleep(0.3)  # started and spinning
                shared.append(_spin_seconds())
            finally:
                neighbour.kill()
                neighbour.wait()
    finally:
        os.sched_setaffinity(0, saved)
    return statistics.median(alone) / statistics.median(shared)


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on: the command name may hold spaces and parentheses."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def cpu_times(roots: list[int]) -> tuple[float, float]:
    """(utime, stime) in seconds of every process in the trees under ``roots``."""
    user = system = 0
    for pid in (p for root in roots for p in process_tree(root)):
        try:
            fields = _stat(pid)
        except OSError:
            continue
        user += int(fields[11])  # utime, stime (fields 14 and 15)
        system += int(fields[12])
    return user / CLK_TCK, system / CLK_TCK


def cpu_seconds(roots: list[int]) -> float:
    """utime + stime of every process in the trees under ``roots``."""
    return sum(cpu_times(roots))
