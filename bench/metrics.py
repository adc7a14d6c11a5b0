"""Prometheus metrics' cost: sync 1 KiB SEND_MESSAGE_V2 over N connections to a broker without
metrics, to one with ``--metrics-port`` and nobody scraping, and to one scraped every second (as a
busy Prometheus would), alternated round by round on the same machine. Each broker also holds
``--topics`` topics of 8 queues, one message in each, with a consumer group's offsets committed at 0
on each (what every scrape walks). Prints sends/s, send latency p50/p99, the broker's CPU per send,
each scrape's duration and size, one scrape's cost on and off the loop, and the ratios.

Run: ``.venv/bin/python bench/metrics.py [--connections 16] [--seconds 8] [--rounds 2] [--topics 50]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker import Server, load_arguments, pct, rmqgate_server, send_phase

from rmqgate.compat_tests.servers import free_port
from rmqgate.server.client import RemotingClient
from rmqgate.wire import RemotingCommand
from rmqgate.wire.codes import RequestCode

SETUPS = (
    ("off", "no metrics"),
    ("idle", "--metrics-port, not scraped"),
    ("scraped", "--metrics-port, scraped every 1 s"),
)


def server(store: str, metrics_port: int | None) -> Server:
    return rmqgate_server(
        store, "ASYNC_FLUSH", args=() if metrics_port is None else ("--metrics-port", str(metrics_port))
    )


async def populate(port: int, topics: int) -> None:
    """``topics`` topics of 8 queues, one message in each queue and a group's offsets committed at 0
    on every queue: each scrape reads every queue's offsets and its oldest unconsumed message."""
    from rmqgate.server.testing import send_v2

    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        for i in range(topics):
            topic = f"BenchMetricsTopic{i}"
            ext = {"topic": topic, "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
                   "topicFilterType": "SINGLE_TAG"}  # fmt: skip
            assert (
                await client.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
            ).code == 0
            for q in range(8):
                assert (await client.invoke(send_v2(topic, b"m" * 100, queue_id=q))).code == 0
                ext = {
                    "consumerGroup": f"BenchMetricsGroup{i}",
                    "topic": topic,
                    "queueId": str(q),
                    "commitOffset": "0",
                }
                await client.invoke(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext))
    finally:
        client.close()


class Scraper(threading.Thread):
    """GET /metrics once a second; keeps each scrape's seconds and bytes."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.stop_event = threading.Event()
        self.durations: list[float] = []
        self.sizes: list[int] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                body = resp.read()
            self.durations.append(time.perf_counter() - t0)
            self.sizes.append(len(body))
            self.stop_event.wait(1.0)


def loop_cost(topics: int) -> tuple[float, float, float, int]:
    """In process: ms the broker's loop spends on the first scrape's snapshot and on a later one (the
    groups' offsets unmoved), ms formatting it (off the loop), and the text's size."""
    from prometheus_client import CollectorRegistry, generate_latest

    from rmqgate.server.metrics import MetricsServer, RocketMQCollector
    from rmqgate.server.testing import small_broker

    async def run(root: str) -> tuple[float, float, float, int]:
        broker = small_broker(root)
        await broker.start()
        try:
            await populate(broker.port, topics)
            metrics = MetricsServer([broker], 0, "127.0.0.1")
            brokers = metrics.brokers
            first = _timed(brokers[0].snapshot)  # (reads every lagging queue's oldest message)
            snap = min(_timed(brokers[0].snapshot) for _ in range(20))
            collector = RocketMQCollector(brokers, asyncio.get_running_loop())
            registry = CollectorRegistry(auto_describe=False)
            registry.register(collector)
            text = generate_latest(registry)
            snaps = [b.snapshot() for b in brokers]

            class Fixed:
                def collect(self) -> list[object]:
                    return collector.families(snaps)

            fixed = CollectorRegistry(auto_describe=False)
            fixed.register(Fixed())  # type: ignore[arg-type]
            fmt = min(_timed(lambda: generate_latest(fixed)) for _ in range(20))
            return first, snap, fmt, len(text)
        finally:
            await broker.stop()

    with tempfile.TemporaryDirectory(prefix="rmqgate-bench-metrics-") as tmp:
        return asyncio.run(run(tmp))


def wrapper_cost_us() -> tuple[float, float]:
    """µs per request of a processor answering pre-encoded bytes, bare and behind TimedProcessor
    (what metrics add to every send and pull)."""
    from _timing import per_op_us

    from rmqgate.server.metrics import LatencyHistogram, TimedProcessor
    from rmqgate.server.remoting import RequestProcessor
    from rmqgate.server.testing import send_v2

    class Answer(RequestProcessor):
        codes = (RequestCode.SEND_MESSAGE_V2,)

        def process(self, channel: object, request: RemotingCommand) -> bytes:  # type: ignore[override]
            return b"answer"

    bare = Answer()
    timed = TimedProcessor(bare, LatencyHistogram(), pull=False)
    request = send_v2("BenchMetrics", b"x" * 1024)
    return (
        per_op_us(lambda: bare.process(None, request)),  # type: ignore[arg-type]
        per_op_us(lambda: timed.process(None, request)),  # type: ignore[arg-type]
    )


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(setup: str, args: argparse.Namespace) -> tuple[float, list[float], Scraper | None, float]:
    """sends/s, each send's latency, the scraper, and the broker process's CPU µs per send."""
    with tempfile.TemporaryDirectory(prefix="rmqgate-bench-metrics-") as tmp:
        port = None if setup == "off" else free_port()
        srv = server(tmp, port)
        scraper = None
        try:
            asyncio.run(populate(srv.port, args.topics))
            cpu0 = cpu_seconds(srv.proc.pid)
            if setup == "scraped":
                assert port is not None
                scraper = Scraper(port)
                scraper.start()
            n, lat = asyncio.run(
                send_phase(srv.port, args.connections, args.seconds, args.size, "BenchMetrics")
            )
            if scraper is not None:
                scraper.stop_event.set()
                scraper.join(15)
            cpu_us = (cpu_seconds(srv.proc.pid) - cpu0) / max(n, 1) * 1e6
        finally:
            srv.stop()
    return n / args.seconds, lat, scraper, cpu_us


def main() -> None:
    ap = load_arguments(__doc__)
    ap.add_argument("--topics", type=int, default=50)
    args = ap.parse_args()
    first_ms, snap_ms, format_ms, size = loop_cost(args.topics)
    bare_us, timed_us = wrapper_cost_us()
    rates: dict[str, list[float]] = {name: [] for name, _ in SETUPS}
    cpu: dict[str, list[float]] = {name: [] for name, _ in SETUPS}
    best: dict[str, tuple[float, list[float]]] = {}
    scrapes: list[Scraper] = []
    for r in range(args.rounds):
        for name, _ in SETUPS[r % 3 :] + SETUPS[: r % 3]:  # each setup takes each place in turn
            rate, lat, scraper, cpu_us = one_run(name, args)
            rates[name].append(rate)
            cpu[name].append(cpu_us)
            if scraper is not None:
                scrapes.append(scraper)
            if name not in best or rate > best[name][0]:
                best[name] = (rate, lat)
    print(
        f"\nmetrics bench: {args.connections} connections, sync {args.size} B SEND_MESSAGE_V2 for "
        f"{args.seconds:.0f} s each; {args.topics} topics x 8 queues, each queue 1 message behind a group\n"
    )
    print(f"{'broker':36} {'sends/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/send':>12}")
    for name, label in SETUPS:
        rate, lat = best[name]
        median_cpu = statistics.median(cpu[name])
        print(f"{label:36} {rate:10.0f} {pct(lat, 0.5):8.2f} {pct(lat, 0.99):8.2f} {median_cpu:12.1f}")
    print(
        "(sends/s and latencies: the best round; CPU: the broker process's µs per send, median of the rounds)"
    )
    durations = [d for s in scrapes for d in s.durations]
    sizes = [n for s in scrapes for n in s.sizes]
    if durations:
        print(
            f"\n{len(durations)} scrapes: median {statistics.median(durations) * 1000:.1f} ms, "
            f"max {max(durations) * 1000:.1f} ms, {statistics.median(sizes) / 1024:.0f} KiB each"
        )
    print(
        f"one scrape in process: snapshot on the broker's loop {first_ms:.2f} ms the first time, "
        f"{snap_ms:.2f} ms later (best of 20); formatting off the loop {format_ms:.2f} ms, {size / 1024:.0f} KiB"
    )
    print(
        f"per request (best of 7): a processor answering at once {bare_us:.3f} µs, behind the metrics' "
        f"timing {timed_us:.3f} µs: +{timed_us - bare_us:.3f} µs"
    )
    print(f"\nbest of {args.rounds} alternating rounds; runs: " + ", ".join(
        f"{name} {[round(r) for r in rates[name]]}" for name, _ in SETUPS))  # fmt: skip
    for name in ("idle", "scraped"):
        per_round = [x / o for o, x in zip(rates["off"], rates[name], strict=True)]
        print(f"{name} / off per round: {', '.join(f'{r:.0%}' for r in per_round)}; "
              f"best vs best {best[name][0] / best['off'][0]:.0%}")  # fmt: skip
    print(
        "CPU µs per send by round: "
        + ", ".join(f"{name} {[round(c, 1) for c in cpu[name]]}" for name, _ in SETUPS)
    )
    per_round = [x / o for o, x in zip(rates["idle"], rates["scraped"], strict=True)]
    print(f"scraped / idle per round: {', '.join(f'{r:.0%}' for r in per_round)}; "
          f"best vs best {best['scraped'][0] / best['idle'][0]:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
