"""Soak: mixed corpus traffic replayed for N minutes against one `rmqgate serve`; nothing may grow.

``soak_load.py`` replays the corpus captures (several at once, over and over, ``--speed max``) while
this test samples the broker process every few seconds: RSS and open fds from /proc, and the asyncio
tasks alive on its loop (``rocketmq_broker_asyncio_tasks`` on the metrics endpoint). It fails when a
figure of the last third of the run is above the middle third's by more than a tolerance (the first
third is warm-up), or when a request failed. RSS is judged by its anonymous part: the mapped CommitLog
and ConsumeQueue pages (RssFile) grow with every message stored, as a Java broker's mapped files do.
p99 latency per interval, the samples and a plot go to the results folder.

``ADVERSITY_SOAK_MINUTES`` (default 30) sets the length.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmqgate.compat_tests.adversity.conftest import results_dir
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, free_port, log_tail

MINUTES = float(os.environ.get("ADVERSITY_SOAK_MINUTES", "30"))
pytestmark = [pytest.mark.timeout(int(MINUTES * 60) + 600)]
SAMPLE_S = 5.0
#: Allowed growth of the last third over the middle third: anonymous RSS by 10 % + 16 MiB (allocator
#: fragmentation); fds and tasks by 20 % + 16 (the replays' connections and parked pulls come and go with
#: the load). The mapped store files' resident pages (RssFile) grow with what is stored and are page
#: cache the kernel reclaims: reported, not judged.
RSS_TOLERANCE = (0.10, 16 * 2**20)
COUNT_TOLERANCE = (0.20, 16)


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS and its parts: RssAnon (the process's own memory: what a leak grows) and RssFile (pages
    of mapped files: the CommitLog and ConsumeQueue segments, resident as they are written)."""
    fields = {"VmRSS:": "rss", "RssAnon:": "rss_anon", "RssFile:": "rss_file"}
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":")[0] + ":"
        if key in fields:
            out[fields[key]] = int(line.split()[1]) * 1024
    return out


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def loop_tasks(metrics_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "rocketmq_broker_asyncio_tasks":
            return int(family.samples[0].value)
    raise RuntimeError("rocketmq_broker_asyncio_tasks is not served")


def thirds(samples: Sequence[dict[str, float]]) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The middle and last thirds of the samples by time."""
    t0, t1 = samples[0]["t"], samples[-1]["t"]
    span = t1 - t0
    middle = [s for s in samples if t0 + span / 3 <= s["t"] < t0 + 2 * span / 3]
    last = [s for s in samples if s["t"] >= t0 + 2 * span / 3]
    return middle, last


def growth_verdicts(samples: Sequence[dict[str, float]]) -> list[tuple[str, float, float, float, bool]]:
    """(figure, middle-third median, last-third median, allowed, ok) for anonymous RSS, fds and tasks."""
    middle, last = thirds(samples)
    out = []
    for key, (ratio, slack) in (
        ("rss_anon", RSS_TOLERANCE),
        ("fds", COUNT_TOLERANCE),
        ("tasks", COUNT_TOLERANCE),
    ):
        mid = statistics.median(s[key] for s in middle)
        end = statistics.median(s[key] for s in last)
        allowed = mid * (1 + ratio) + slack
        out.append((key, mid, end, allowed, end <= allowed))
    return out


def plot(samples: Sequence[dict[str, float]], intervals: Sequence[dict[str, Any]], path: Path) -> Path:
    """RSS, fds, tasks and p99 over time: a PNG (matplotlib is a dependency of the replay report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    ts = [s["t"] / 60 for s in samples]
    for ax, key, label in (
        (axes[0], "rss", "RSS (MiB; dashed: anonymous)"),
        (axes[1], "fds", "open fds"),
        (axes[2], "tasks", "asyncio tasks"),
    ):
        scale = 2**20 if key == "rss" else 1
        ax.plot(ts, [s[key] / scale for s in samples])
        if key == "rss":
            ax.plot(ts, [s["rss_anon"] / scale for s in samples], linestyle="--")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[3].plot([i["t"] / 60 for i in intervals], [i["p99_ms"] for i in intervals], marker=".")
    axes[3].set_ylabel("p99 latency (ms)")
    axes[3].set_xlabel("minutes")
    axes[3].grid(alpha=0.3)
    fig.suptitle("rmqgate soak: corpus replay")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def test_soak_nothing_grows(tmp_path: Path, report: Callable[..., str]) -> None:
    seconds = MINUTES * 60
    interval = 30.0 if seconds >= 600 else 10.0
    metrics_port = free_port()
    server = ServerProcess(
        tmp_path, conf=BROKER_CONF, extra_args=("--metrics-port", str(metrics_port), "--log-level", "WARNING")
    )
    load_out = tmp_path / "load.jsonl"
    samples: list[dict[str, float]] = []
    try:
        server.wait_ready()
        pid = server.proc.pid
        load = subprocess.Popen(
            [sys.executable, "-m", "rmqgate.compat_tests.adversity.soak_load", "--target", server.namesrv,
             "--seconds", str(seconds), "--interval", str(interval), "--out", str(load_out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        start = time.monotonic()
        while load.poll() is None:
            samples.append(
                {"t": time.monotonic() - start, **rss_bytes(pid), "fds": open_fds(pid),
                 "tasks": loop_tasks(metrics_port)}
            )  # fmt: skip
            time.sleep(SAMPLE_S)
        load_output = load.stdout.read().decode(errors="replace") if load.stdout else ""
        assert load.returncode == 0, f"the load failed:\n{load_output}"
        assert server.proc.poll() is None, f"rmqgate died:\n{log_tail(server.log_path)}"
    finally:
        if "load" in locals() and load.poll() is None:
            load.kill()
            load.wait()
        server.stop()

    intervals = [json.loads(line) for line in load_out.read_text().splitlines()]
    out = results_dir()
    (out / "soak-samples.json").write_text(json.dumps({"samples": samples, "intervals": intervals}))
    png = plot(samples, intervals, out / "soak.png")
    rows = []
    for i in intervals:
        near = [s for s in samples if s["t"] <= i["t"]][-1:] or samples[:1]
        rows.append(
            (f"{i['t'] / 60:.1f}", i["requests"], i["errors"], i["p50_ms"], i["p99_ms"],
             f"{near[0]['rss'] / 2**20:.1f}", f"{near[0]['rss_anon'] / 2**20:.1f}",
             f"{near[0]['rss_file'] / 2**20:.1f}", int(near[0]["fds"]), int(near[0]["tasks"]))
        )  # fmt: skip
    report(
        "soak",
        f"Soak: {MINUTES:g} min of corpus replay ({len(samples)} samples every {SAMPLE_S:g} s; plot {png})",
        (
            "minute",
            "requests",
            "errors",
            "p50 ms",
            "p99 ms",
            "RSS MiB",
            "anon MiB",
            "file MiB",
            "fds",
            "tasks",
        ),
        rows,
    )
    verdicts = growth_verdicts(samples)
    report(
        "soak-growth",
        "Soak: last third vs middle third (medians; anonymous RSS in MiB)",
        ("figure", "middle", "last", "allowed", "ok"),
        [
            (k, *(round(v / (2**20 if k == "rss_anon" else 1), 1) for v in (m, e, a)), ok)
            for k, m, e, a, ok in verdicts
        ],
    )
    assert len(samples) >= 6, "too few samples to compare thirds"
    assert all(ok for *_, ok in verdicts), f"growth over the soak: {verdicts}"
    errors = sum(i["errors"] for i in intervals)
    assert errors == 0, f"{errors} requests failed: {[i['error_kinds'] for i in intervals if i['errors']]}"
    assert sum(i["answered"] for i in intervals) > 0
