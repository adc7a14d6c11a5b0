"""Shared timing helpers for the benchmarks: best-of-N per-operation timings and table printing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


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
