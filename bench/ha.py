"""Replication's cost: sync 1 KiB SEND_MESSAGE_V2 from N connections to a lone ASYNC_MASTER, to an
ASYNC_MASTER with a slave and to a SYNC_MASTER with a slave, in one run (rmqgate processes started
and loaded by bench/broker.py's helpers), and how far the slave trails under that load.

The lag is sampled every 0.1 s during the send window as the master's commitLogMaxOffset minus the
slave's (GET_BROKER_RUNTIME_INFO to both at once); "catch-up" is how long the slave took after the
window to reach the master's end. The setups run in a rotated order round by round and the best
round of each is kept: on a shared machine other load skews single runs.

Run: ``.venv/bin/python bench/ha.py [--connections 16] [--seconds 8] [--size 1024] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table
from broker import Server, load_arguments, pct, rmqgate_server, send_frame, send_phase

from rmqgate.compat_tests.servers import free_port
from rmqgate.server.client import RemotingClient
from rmqgate.wire import RemotingCommand
from rmqgate.wire.bodies import KVTable
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.frame import FrameDecoder

TOPIC = "BenchHA"
SETUPS = ("lone ASYNC_MASTER", "ASYNC_MASTER + slave", "SYNC_MASTER + slave")
SAMPLE_EVERY = 0.1


@dataclass
class Result:
    rate: float
    latencies: list[float]
    lags: list[int] = field(default_factory=list)  # bytes the slave trailed, per sample
    catch_up: float | None = None  # seconds after the window until the slave had everything


async def max_offset(client: RemotingClient) -> int:
    resp = await client.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0)
    return int(KVTable.from_json(resp.body).table["commitLogMaxOffset"])


async def wait_replicating(master: int, slave: int, timeout: float = 30.0) -> None:
    """Until a send to the master is answered SEND_OK (a SYNC_MASTER refuses while no slave is
    connected) and the slave holds everything the master does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    m = await RemotingClient.connect("127.0.0.1", master)
    s = await RemotingClient.connect("127.0.0.1", slave)
    probe = FrameDecoder().feed(send_frame(TOPIC, 0, 64))[0]
    try:
        while (await m.invoke(probe, 5.0)).code != ResponseCode.SUCCESS:
            if loop.time() > deadline:
                raise SystemExit("the master never took a send (no slave connected?)")
            await asyncio.sleep(0.2)
        end = await max_offset(m)
        while await max_offset(s) < end:
            if loop.time() > deadline:
                raise SystemExit("the slave never caught up with the master")
            await asyncio.sleep(0.05)
    finally:
        m.close()
        s.close()


async def sample_lag(master: int, slave: int, lags: list[int], stop: asyncio.Event) -> None:
    m = await RemotingClient.connect("127.0.0.1", master)
    s = await RemotingClient.connect("127.0.0.1", slave)
    try:
        while not stop.is_set():
            mo, so = await asyncio.gather(max_offset(m), max_offset(s))
            lags.append(max(0, mo - so))
            await asyncio.sleep(SAMPLE_EVERY)
    finally:
        m.close()
        s.close()


async def catch_up(master: int, slave: int, timeout: float = 60.0) -> float | None:
    m = await RemotingClient.connect("127.0.0.1", master)
    s = await RemotingClient.connect("127.0.0.1", slave)
    start = time.perf_counter()
    try:
        end = await max_offset(m)
        while time.perf_counter() - start < timeout:
            if await max_offset(s) >= end:
                return time.perf_counter() - start
            await asyncio.sleep(0.01)
        return None
    finally:
        m.close()
        s.close()


async def loaded(args: argparse.Namespace, master: Server, slave: Server | None) -> Result:
    if slave is None:
        n, lat = await send_phase(master.port, args.connections, args.seconds, args.size, TOPIC)
        return Result(n / args.seconds, lat)
    await wait_replicating(master.port, slave.port)
    lags: list[int] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_lag(master.port, slave.port, lags, stop))
    try:
        n, lat = await send_phase(master.port, args.connections, args.seconds, args.size, TOPIC)
    finally:
        stop.set()
        await sampler
    return Result(n / args.seconds, lat, lags, await catch_up(master.port, slave.port))


def run_setup(args: argparse.Namespace, setup: str) -> Result:
    ha_port = free_port()
    role = "SYNC_MASTER" if setup.startswith("SYNC") else "ASYNC_MASTER"
    with tempfile.TemporaryDirectory(prefix="rmqgate-bench-ha-") as tmp:
        servers: list[Server] = []
        try:
            master = rmqgate_server(
                f"{tmp}/master", "ASYNC_FLUSH", f"brokerRole={role}\nhaListenPort={ha_port}\n"
            )
            servers.append(master)
            slave = None
            if setup.endswith("slave"):
                slave = rmqgate_server(
                    f"{tmp}/slave",
                    "ASYNC_FLUSH",
                    f"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=127.0.0.1:{ha_port}\n",
                )
                servers.append(slave)
            return asyncio.run(loaded(args, master, slave))
        finally:
            for server in reversed(servers):
                server.stop()


def kib(n: float) -> str:
    return f"{n / 1024:.1f}"


def main() -> None:
    ap = load_arguments(__doc__)
    args = ap.parse_args()
    best: dict[str, Result] = {}
    per_round: list[dict[str, float]] = []
    for r in range(args.rounds):
        rates = {}
        for setup in SETUPS[r % len(SETUPS) :] + SETUPS[: r % len(SETUPS)]:
            result = run_setup(args, setup)
            rates[setup] = result.rate
            if setup not in best or result.rate > best[setup].rate:
                best[setup] = result
        per_round.append(rates)

    print(
        f"\nHA bench: {args.connections} connections, sync {args.size} B SEND_MESSAGE_V2 for "
        f"{args.seconds:g} s per setup, ASYNC_FLUSH, best of {args.rounds} round(s)\n"
    )
    rows = []
    for setup in SETUPS:
        res = best[setup]
        lag = (
            ("-", "-", "-", "-")
            if not res.lags
            else (
                kib(statistics.mean(res.lags)),
                kib(sorted(res.lags)[int(0.99 * (len(res.lags) - 1))]),
                kib(max(res.lags)),
                "never" if res.catch_up is None else f"{res.catch_up * 1000:.0f}",
            )
        )
        rows.append(
            (
                setup,
                f"{res.rate:.0f}",
                f"{pct(res.latencies, 0.5):.2f}",
                f"{pct(res.latencies, 0.99):.2f}",
                *lag,
            )
        )
    print_table(
        ("setup", "sends/s", "p50 ms", "p99 ms", "lag mean KiB", "lag p99 KiB", "lag max KiB", "catch-up ms"),
        rows,
    )
    lone = SETUPS[0]
    print("\nsends/s relative to the lone master, per round:")
    for n, rates in enumerate(per_round, 1):
        print(f"  round {n}: " + ", ".join(f"{s} {rates[s] / rates[lone]:.2f}" for s in SETUPS[1:]))


if __name__ == "__main__":
    main()
