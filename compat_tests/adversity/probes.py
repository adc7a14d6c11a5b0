"""What the adversity scenarios measure and check: the server log's failures, a process's RSS, the
well-behaved Java clients' sends (SteadyLoad.java), latency percentiles."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import Background

_ERROR_LINE = re.compile(rb"^\S+ \S+ (ERROR|CRITICAL) ", re.MULTILINE)


def log_problems(path: Path | None) -> tuple[int, int]:
    """(tracebacks, ERROR/CRITICAL lines) in a `rmqgate serve` log."""
    if path is None or not path.exists():
        return 0, 0
    text = path.read_bytes()
    return text.count(b"Traceback"), len(_ERROR_LINE.findall(text))


def log_excerpt(path: Path | None, lines: int = 60) -> str:
    """The server log from its first traceback or ERROR line on (what a failing check shows)."""
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    first = next((i for i, x in enumerate(text) if "Traceback" in x or _ERROR_LINE.match(x.encode())), 0)
    return "\n".join(text[max(0, first - 3) : first + lines])


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident set size of a process, KiB (``VmRSS`` of /proc/PID/status; ``VmHWM``: its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def sends_per_second(sends: Sequence[Sequence[int]], start: float, end: float) -> float:
    """Completed sends per second between two wall-clock times (s); ``sends`` is SteadyLoad's
    [epoch ms, latency µs] list."""
    lo, hi = start * 1000, end * 1000
    return sum(1 for at, _ in sends if lo <= at < hi) / max(end - start, 1e-9)


@dataclasses.dataclass
class SteadyLoad:
    program: Background
    stop_file: Path
    result: dict[str, Any] = dataclasses.field(default_factory=dict)


@contextlib.contextmanager
def steady_load(classes: Path, namesrv: str, topic: str, workdir: Path) -> Iterator[SteadyLoad]:
    """SteadyLoad.java (stock 4.9.8 client) sending to and consuming ``topic`` until the block ends;
    ``.result`` holds its RESULT afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    started, stop = workdir / "started", workdir / "stop"
    args = {
        "namesrv": namesrv, "topic": topic, "group": "SteadyConsumer", "producerGroup": "SteadyProducer",
        "startedFile": str(started), "stopFile": str(stop), "maxSeconds": 3000,
    }  # fmt: skip
    program = java.java_client(4, classes, "SteadyLoad", args, log_dir=workdir / "logs", timeout=3600)
    load = SteadyLoad(program, stop)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            if program.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"SteadyLoad did not start: {program.result()}")
            time.sleep(0.1)
        yield load
        stop.write_text("stop")
        load.result = program.result()
    finally:
        program.kill()
