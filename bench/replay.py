"""Traffic tools benchmark: proxy overhead and replay throughput, each next to a same-run floor.

1. Proxy overhead: synchronous SEND_MESSAGE_V2 round trips straight to the broker and through
   ``rmqgate proxy`` (a subprocess, recording), alternating request by request so both paths see
   the same machine load; added latency p50/p99 = proxied minus direct. Direct is the floor.
2. Replay throughput: the proxy's recording (plus a pipelined load phase) replayed at --speed max
   against a fresh rmqgate; requests/s next to the floor, the pipelined load generator's own
   requests/s against the same kind of server (as fast as the target answers that load).

Run: ``.venv/bin/python bench/replay.py [--requests 2000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table

from rmqgate.compat_tests.servers import free_broker_port, free_port
from rmqgate.tools.capture_cli import compute_stats
from rmqgate.tools.proxy import broker_addresses
from rmqgate.tools.replay import ReplayOptions, call, discover_brokers, open_connection, replay_file
from rmqgate.tools.replay_report import latency_summary
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RemotingCommand

TOPIC = "BenchReplayTopic"


class Server:
    def __init__(self, workdir: Path) -> None:
        self.ns_port, self.broker_port = free_port(), free_broker_port()
        self.log = (workdir / "rmqgate.log").open("wb")
        exe = Path(sys.executable).with_name("rmqgate")
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--role", "all", "--namesrv-port", str(self.ns_port), "--broker-port",
             str(self.broker_port), "--store", str(workdir / "store"), "--log-level", "WARNING"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.namesrv = f"127.0.0.1:{self.ns_port}"

    async def ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await discover_brokers(self.namesrv, 1.0):
                    return
            except (OSError, ConnectionError, TimeoutError):
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError("rmqgate did not become ready")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def send_request(i: int) -> RemotingCommand:
    ext = {"a": "PG_bench", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % 4), "f": "0", "g": str(int(time.time() * 1000)),
           "h": "0", "i": f"UNIQ_KEY\x01BENCH{i:012d}\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false"}  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x" * 256)


async def broker_of(namesrv: str) -> str:
    conn = await open_connection(namesrv)
    try:
        resp = await call(conn, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}))
    finally:
        conn.close()
    if resp.code != 0:
        raise RuntimeError(f"no route for {TOPIC}: {resp!r}")
    return next(iter(broker_addresses(bytes(resp.body))))


async def create_topic(namesrv: str) -> None:
    broker = next(iter((await discover_brokers(namesrv)).values()))
    conn = await open_connection(broker)
    ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}  # fmt: skip
    resp = await call(conn, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
    conn.close()
    assert resp.code == 0, resp
    for _ in range(100):
        try:
            await broker_of(namesrv)
            return
        except RuntimeError:
            await asyncio.sleep(0.1)


async def sync_latencies(namesrv: str, n: int) -> list[float]:
    """``n`` synchronous sends on one connection, found via ``namesrv``; latencies in ms."""
    conn = await open_connection(await broker_of(namesrv))
    out = []
    try:
        for i in range(n):
            t = time.perf_counter()
            resp = await call(conn, send_request(i))
            out.append((time.perf_counter() - t) * 1e3)
            assert resp.code == 0, resp
    finally:
        conn.close()
    return out


async def paired_latencies(direct_ns: str, proxy_ns: str, n: int) -> tuple[list[float], list[float]]:
    """``n`` sync sends each way, alternating direct and proxied so both see the same machine load."""
    direct = await open_connection(await broker_of(direct_ns))
    proxied = await open_connection(await broker_of(proxy_ns))
    out: tuple[list[float], list[float]] = ([], [])
    try:
        for i in range(n):
            for conn, lat in (
                ((direct, out[0]), (proxied, out[1])) if i % 2 else ((proxied, out[1]), (direct, out[0]))
            ):
                t = time.perf_counter()
                resp = await call(conn, send_request(i))
                lat.append((time.perf_counter() - t) * 1e3)
                assert resp.code == 0, resp
    finally:
        direct.close()
        proxied.close()
    return out


async def pipelined(namesrv: str, n: int, conns: int, window: int) -> float:
    """requests/s of ``conns`` connections keeping ``window`` sends in flight each."""
    addr = await broker_of(namesrv)
    per = n // conns

    async def one(c: int) -> None:
        conn = await open_connection(addr)
        sem = asyncio.Semaphore(window)

        async def req(i: int) -> None:
            async with sem:
                resp = await call(conn, send_request(c * per + i), 30)
                assert resp.code == 0, resp

        try:
            await asyncio.gather(*(req(i) for i in range(per)))
        finally:
            conn.close()

    t = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(conns)))
    return per * conns / (time.perf_counter() - t)


async def start_proxy(upstream: str, record: Path) -> tuple[asyncio.subprocess.Process, str]:
    code = ("import sys, argparse; from rmqgate.tools import proxy; p = argparse.ArgumentParser(); "
            "proxy.add_arguments(p); sys.exit(proxy.run(p.parse_args(sys.argv[1:])))")  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, "--listen", "127.0.0.1:0", "--upstream", upstream, "--record", str(record),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()  # type: ignore[union-attr]
    if "ready" not in line:
        raise RuntimeError(f"proxy did not start: {line!r}")
    return proc, line.split()[3]


async def replay_rate(capture: Path, workdir: Path) -> dict:
    server = Server(workdir)
    try:
        await server.ready()
        report, _ = await replay_file(capture, server.namesrv, ReplayOptions(speed=None))
    finally:
        server.stop()
    return report


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    sync_capture, pipe_capture = work / "sync.rmqcap", work / "pipelined.rmqcap"
    for d in ("a", "b", "c"):
        (work / d).mkdir()
    server = Server(work / "a")
    try:
        await server.ready()
        proxy, proxy_addr = await start_proxy(server.namesrv, sync_capture)
        await create_topic(proxy_addr)  # recorded, so the replay creates it too
        await sync_latencies(server.namesrv, 300)  # warm-up
        await sync_latencies(proxy_addr, 300)
        direct: list[float] = []
        proxied: list[float] = []
        for _ in range(args.rounds):
            d_lat, p_lat = await paired_latencies(server.namesrv, proxy_addr, args.requests)
            direct += d_lat
            proxied += p_lat
        t_direct, t_proxied = sum(direct) / 1e3, sum(proxied) / 1e3
        proxy.send_signal(signal.SIGTERM)
        await proxy.wait()
        proxy, proxy_addr = await start_proxy(server.namesrv, pipe_capture)
        await create_topic(proxy_addr)
        floor_rps = await pipelined(server.namesrv, args.pipelined, 4, 16)
        proxied_rps = await pipelined(proxy_addr, args.pipelined, 4, 16)
        proxy.send_signal(signal.SIGTERM)
        await proxy.wait()
    finally:
        server.stop()
    n = args.rounds * args.requests
    d, p = latency_summary(direct), latency_summary(proxied)
    print(
        f"Proxy overhead: {args.rounds} rounds x {args.requests} sync SEND_MESSAGE_V2 (256 B body), one connection;"
    )
    print("pipelined: 4 connections x 16 requests in flight")
    print_table(
        ["path", "p50 ms", "p90 ms", "p99 ms", "sync req/s", "pipelined req/s"],
        [
            ["direct (floor)", f"{d['p50']:.3f}", f"{d['p90']:.3f}", f"{d['p99']:.3f}", f"{n / t_direct:.0f}",
             f"{floor_rps:.0f}"],
            ["via proxy (recording)", f"{p['p50']:.3f}", f"{p['p90']:.3f}", f"{p['p99']:.3f}",
             f"{n / t_proxied:.0f}", f"{proxied_rps:.0f}"],
            ["added", f"{p['p50'] - d['p50']:+.3f}", f"{p['p90'] - d['p90']:+.3f}", f"{p['p99'] - d['p99']:+.3f}",
             f"{100 * (t_direct / t_proxied - 1):+.1f}%", f"{100 * (proxied_rps / floor_rps - 1):+.1f}%"],
        ],
    )  # fmt: skip
    for cap in (sync_capture, pipe_capture):
        stats = compute_stats(cap)
        raw = sum(stats["bytes"].values())
        print(f"recording {cap.name}: {stats['requests']} requests, {raw} frame bytes -> "
              f"{cap.stat().st_size} bytes ({raw / cap.stat().st_size:.1f}x)")  # fmt: skip
    sync_report = await replay_rate(sync_capture, work / "b")
    pipe_report = await replay_rate(pipe_capture, work / "c")
    print(
        "\nReplay at --speed max against a fresh rmqgate; floor = the recorded load run straight at rmqgate"
    )
    rows = []
    for what, report, floor in (("sync recording", sync_report, n / t_direct),
                                ("pipelined recording", pipe_report, floor_rps)):  # fmt: skip
        rows.append([what, report["requests"], f"{floor:.0f}", f"{report['requests_per_s']:.0f}", report["errors"],
                     report["mismatches"], f"{report['latency_ms']['p50']:.3f}", f"{report['latency_ms']['p99']:.3f}"])  # fmt: skip
    print_table(
        ["replayed", "requests", "floor req/s", "replay req/s", "errors", "mismatches", "p50 ms", "p99 ms"],
        rows,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="sync round trips per path per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipelined", type=int, default=8000, help="requests of the pipelined phase")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(parser.parse_args()))
