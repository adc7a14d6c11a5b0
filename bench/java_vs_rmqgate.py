"""rmqgate next to the stock Java 4.9.8 broker, both driven by the stock benchmark producer.

``bin/benchmark.sh Producer -n NS -t TOPIC -w THREADS -s 1024`` (sync sends, SEND_MESSAGE_V2 with
ROCKETMQ headers) runs against the Java 4.9.8 name server + broker and against ``rmqgate serve``
(both roles in one process) in alternating rounds - java, rmqgate, java, rmqgate ... - for each
thread count. Each run warms up, then is measured over a window: TPS (messages the broker stored in
the window, from its GET_BROKER_RUNTIME_INFO msgPutTotalTodayNow), the producer's own "Send TPS" and
"Average RT(ms)" lines (printed every 10 s; a window shorter than that shows the latest line), the
server's CPU microseconds per message (utime + stime of its whole process tree from /proc: Java's
two JVMs, rmqgate's serve process and its index dispatcher) and its RSS; then medians per server and
the rmqgate / Java ratios.

A script of its own rather than a mode of broker.py: broker.py measures rmqgate against a bare
asyncio floor with its own in-process load generator; here the load generator is the stock Java
tool, the baseline is a second server (two JVMs) and the figures are read from outside both.

Run: ``.venv/bin/python bench/java_vs_rmqgate.py [--threads 4 16] [--seconds 20] [--warmup 10]
[--rounds 2] [--size 1024] [--event-loop asyncio uvloop]``; ``--event-loop`` with several loops runs one
rmqgate per loop in each round (java, rmqgate asyncio, rmqgate uvloop, java ...); ``ROCKETMQ_HOME``
overrides the distribution (../shared/rocketmq-java).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import cpu_seconds, print_table, process_tree

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import ServerProcess
from rmqgate.compat_tests.wire_client import WireClient, runtime_info, wait_until

JAVA = "Java 4.9.8"
TOPIC = "BenchJavaVsRmqgate"  # (BenchmarkTest, the tool's default, is a system topic)
STATS_PERIOD = 10.0  # seconds between the producer's stats lines, each over the period before it
_STATS = re.compile(
    r"Send TPS:\s*(?P<tps>\d+)\s+Max RT\(ms\):\s*(?P<max>\d+)\s+Average RT\(ms\):\s*(?P<avg>[\d.]+)"
    r"\s+Send Failed:\s*(?P<failed>\d+)\s+Response Failed:\s*(?P<resp_failed>\d+)"
)


# --- the server's process tree, from /proc ---------------------------------------------------------
def rss_mib(roots: list[int]) -> tuple[float, float]:
    """(VmRSS, RssAnon) of the trees under ``roots`` in MiB: resident pages in all, and those not
    backed by a file (heaps, as opposed to the mapped CommitLog and ConsumeQueue files)."""
    kib = {"VmRSS:": 0, "RssAnon:": 0}
    for pid in (p for root in roots for p in process_tree(root)):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            key = line.split(maxsplit=1)[0] if line else ""
            if key in kib:
                kib[key] += int(line.split()[1])
    return kib["VmRSS:"] / 1024, kib["RssAnon:"] / 1024


# --- the servers -----------------------------------------------------------------------------------
#: The stock broker's defaults but for the address clients are given and the flush mode, which is
#: rmqgate's too (the compat suite's Java broker also checks transactions every second).
JAVA_CONF = "brokerIP1=127.0.0.1\nflushDiskType=ASYNC_FLUSH\n"


class StockJavaBroker(java.JavaBroker):
    heap = "1g"  # bin/broker.sh's default


@dataclass
class Target:
    """A name server + broker pair under test; ``roots`` are the processes whose trees it runs in."""

    name: str
    namesrv: str
    broker: str
    roots: list[int]
    stops: list[object]

    def stored(self) -> int:
        return int(runtime_info(self.broker)["msgPutTotalTodayNow"])

    def stop(self) -> None:
        for server in reversed(self.stops):
            server.stop()  # type: ignore[attr-defined]


def start_java(workdir: Path) -> Target:
    namesrv = java.JavaNameServer(workdir / "namesrv")
    stops: list[object] = [namesrv]
    try:
        namesrv.wait_ready()
        broker = StockJavaBroker(workdir / "broker", namesrv.addr, name="bench-java", extra_conf=JAVA_CONF)
        stops.append(broker)
        broker.wait_ready()
    except BaseException:
        for server in reversed(stops):
            server.stop()  # type: ignore[attr-defined]
        raise
    return Target(JAVA, namesrv.addr, broker.addr, [namesrv.proc.pid, broker.proc.pid], stops)


def start_rmqgate(workdir: Path, event_loop: str | None = None) -> Target:
    """``rmqgate serve``; ``event_loop``: its ``--event-loop`` (and the target is named after it)."""
    workdir.mkdir(parents=True)
    server = ServerProcess(workdir, extra_args=("--event-loop", event_loop) if event_loop else ())
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    name = f"rmqgate {event_loop}" if event_loop else "rmqgate"
    return Target(name, server.namesrv, server.broker, [server.proc.pid], [server])


def create_topic(target: Target, queues: int = 4) -> None:
    with WireClient(target.broker) as b:
        resp = b.create_topic(TOPIC, queues)
    assert resp.code == 0, f"UPDATE_AND_CREATE_TOPIC on {target.name}: {resp!r}"
    with WireClient(target.namesrv) as ns:
        assert wait_until(lambda: ns.route(TOPIC).code == 0, timeout=30), f"{TOPIC} never routed"


# --- one run of the stock producer -----------------------------------------------------------------
class Producer:
    """``bin/benchmark.sh Producer`` in the background; its stats lines collected as they come."""

    def __init__(self, namesrv: str, threads: int, size: int, log_dir: Path) -> None:
        cmd = [str(java.rocketmq_home() / "bin" / "benchmark.sh"), "Producer",
               "-n", namesrv, "-t", TOPIC, "-w", str(threads), "-s", str(size)]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=java.java_env(log_dir)
        )
        self.stats: list[tuple[float, dict[str, float]]] = []  # (monotonic time, figures)
        self.tail: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail = [*self.tail[-20:], line.rstrip()]
            m = _STATS.search(line)
            if m:
                self.stats.append((time.monotonic(), {k: float(v) for k, v in m.groupdict().items()}))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)


@dataclass
class Run:
    server: str
    threads: int
    round: int
    tps: float
    bench_tps: float
    avg_rt_ms: float
    cpu_us_per_msg: float
    rss_mib: float
    anon_mib: float
    failed: int


def measure(target: Target, threads: int, round_no: int, args: argparse.Namespace, log_dir: Path) -> Run:
    producer = Producer(target.namesrv, threads, args.size, log_dir)
    try:
        stored_before = target.stored()
        time.sleep(args.warmup)
        # a JVM starting on a loaded machine may not have sent yet: the window opens once it has
        wait_until(lambda: not producer.alive() or target.stored() > stored_before, timeout=60, interval=0.5)
        if not producer.alive():
            raise SystemExit("benchmark Producer exited early:\n" + "\n".join(producer.tail))
        stored0, cpu0, t0 = target.stored(), cpu_seconds(target.roots), time.monotonic()
        time.sleep(args.seconds)
        stored1, cpu1, t1 = target.stored(), cpu_seconds(target.roots), time.monotonic()
        rss, anon = rss_mib(target.roots)
    finally:
        producer.stop()
    sent = stored1 - stored0
    if sent <= 0:
        raise SystemExit(f"no message stored on {target.name} in the window:\n" + "\n".join(producer.tail))
    # Each of the producer's lines covers the 10 s before it: those lines covering the window, or
    # (a window too short for one) the latest line seen.
    lines = [(t, s) for t, s in producer.stats if t0 + STATS_PERIOD - 1 <= t <= t1 + 1] or producer.stats[-1:]
    inside = [s for _, s in lines]
    return Run(
        server=target.name,
        threads=threads,
        round=round_no,
        tps=sent / (t1 - t0),
        bench_tps=statistics.mean(s["tps"] for s in inside) if inside else float("nan"),
        avg_rt_ms=statistics.mean(s["avg"] for s in inside) if inside else float("nan"),
        cpu_us_per_msg=(cpu1 - cpu0) * 1e6 / sent,
        rss_mib=rss,
        anon_mib=anon,
        failed=int(producer.stats[-1][1]["failed"]) if producer.stats else 0,
    )


# --- report ----------------------------------------------------------------------------------------
def fmt(value: float, digits: int = 0) -> str:
    return "-" if value != value else f"{value:,.{digits}f}"  # NaN: no stats line in the window


def median(runs: list[Run], attr: str) -> float:
    values = [getattr(r, attr) for r in runs if getattr(r, attr) == getattr(r, attr)]
    return statistics.median(values) if values else float("nan")


def report(runs: list[Run], args: argparse.Namespace) -> None:
    print("\nevery run:")
    print_table(
        ["threads", "round", "server", "TPS", "bench TPS", "avg RT ms", "CPU us/msg", "RSS MiB", "anon MiB",
         "failed"],
        [(r.threads, r.round, r.server, fmt(r.tps), fmt(r.bench_tps), fmt(r.avg_rt_ms, 3),
          fmt(r.cpu_us_per_msg, 1), fmt(r.rss_mib, 1), fmt(r.anon_mib, 1), r.failed) for r in runs],
    )  # fmt: skip
    rows = []
    gates = list(dict.fromkeys(r.server for r in runs if r.server != JAVA))
    for threads in args.threads:
        figures = {}
        for name in (JAVA, *gates):
            group = [r for r in runs if r.threads == threads and r.server == name]
            figures[name] = [
                median(group, a) for a in ("tps", "avg_rt_ms", "cpu_us_per_msg", "rss_mib", "anon_mib")
            ]
            tps, rt, cpu, rss, anon = figures[name]
            rows.append((threads, name, fmt(tps), fmt(rt, 3), fmt(cpu, 1), fmt(rss, 1), fmt(anon, 1)))
        for name in gates:
            ratios = [g / j if j else float("nan") for g, j in zip(figures[name], figures[JAVA], strict=True)]
            rows.append((threads, f"{name} / Java", *(fmt(x, 2) for x in ratios)))
    print(f"\nmedians of {args.rounds} round(s):")
    print_table(["threads", "server", "TPS", "avg RT ms", "CPU us/msg", "RSS MiB", "anon MiB"], rows)
    for threads in args.threads:
        java_tps = [r.tps for r in runs if r.threads == threads and r.server == JAVA]
        for name in gates:
            gate_tps = [r.tps for r in runs if r.threads == threads and r.server == name]
            print(
                f"{name} / Java TPS per round, {threads} threads: "
                + ", ".join(f"{g / j:.2f}" for j, g in zip(java_tps, gate_tps, strict=True))
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[4, 16], help="producer threads (-w)")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window of each run")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of each run before the window")
    ap.add_argument("--rounds", type=int, default=2, help="java, rmqgate pairs per thread count")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes (-s)")
    ap.add_argument(
        "--event-loop",
        nargs="+",
        choices=("auto", "asyncio", "uvloop"),
        help="rmqgate's loop (serve --event-loop); several: one rmqgate per loop in each round",
    )
    args = ap.parse_args()
    reason = java.missing()
    if reason:
        raise SystemExit(reason)
    load0 = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="java-vs-rmqgate-") as tmp:
        root = Path(tmp)
        targets: list[Target] = []
        try:
            targets.append(start_java(root / "java"))
            for event_loop in args.event_loop or [None]:
                targets.append(start_rmqgate(root / f"rmqgate-{event_loop or 'default'}", event_loop))
            for target in targets:
                create_topic(target)
            for threads in args.threads:
                for round_no in range(1, args.rounds + 1):
                    for target in targets:  # java, rmqgate, java, rmqgate ...
                        run = measure(target, threads, round_no, args, root / "producer-logs")
                        print(f"  {threads:>3} threads, round {round_no}, {run.server}: {run.tps:,.0f} msg/s",
                              flush=True)  # fmt: skip
                        runs.append(run)
        finally:
            for target in reversed(targets):
                target.stop()
    print(
        f"\njava_vs_rmqgate: stock benchmark Producer (sync {args.size} B sends, ROCKETMQ headers), "
        f"{args.warmup:g} s warm-up then {args.seconds:g} s measured per run, {args.rounds} alternating "
        f"round(s) per thread count.\nServers: Java = name server + broker JVMs (stock launchers, heap "
        f"256m + 1g, ASYNC_FLUSH); rmqgate = `rmqgate serve` (both roles, --event-loop as named) + its index dispatcher, "
        f"ASYNC_FLUSH. TPS = messages the broker stored in the window; bench TPS / avg RT = the "
        f"producer's own lines; CPU = the server process tree's utime + stime per message; RSS "
        f"counts the mapped store files, anon does not."
    )
    report(runs, args)
    load1 = os.getloadavg()
    print(
        f"\nload average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after on {os.cpu_count()} CPUs: "
        "the producer JVM shares them with the server under test"
    )


if __name__ == "__main__":
    main()
