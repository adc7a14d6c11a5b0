"""Transactions, send-back and delay delivery next to plain sends, against one `rmqgate serve`.

Each figure is printed next to a floor measured in the same run with the same client: plain
SEND_MESSAGE_V2 (1 KiB) over pipelined connections. Measured:

- transactions/s: half send + END_TRANSACTION commit (sync form, as the C++ client sends it), i.e.
  three store appends (half, real message, op record) per transaction;
- send-backs/s: CONSUMER_SEND_MSG_BACK of stored messages (look-up + one append to SCHEDULE_TOPIC_XXXX);
- delay delivery msgs/s: N messages with delay level 4 (30 s) are put, the broker is stopped until
  they are all due and started again; the time from its start until the last is in the real topic
  gives the ScheduleMessageService's re-put rate (restart included: delay offsets come from LMDB);
- check-backs/s: halves older than transactionTimeOut found and sent CHECK_TRANSACTION_STATE.

Run: ``.venv/bin/python bench/features.py [--seconds 4] [--connections 4] [--window 32] [--delayed 20000]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rmqgate.compat_tests.servers import free_broker_port
from rmqgate.server.client import RemotingClient
from rmqgate.wire import RemotingCommand
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.message import decode_offset_msg_id, format_properties

CONF = """\
brokerClusterName = BenchCluster
brokerName = bench-broker
brokerIP1 = 127.0.0.1
transactionTimeOut = 1000
transactionCheckInterval = 1000
transactionCheckMax = 100
messageDelayLevel = 1s 2s 1s 30s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s
"""
BODY = b"x" * 1024


def send_cmd(
    topic: str,
    *,
    group: str = "PG",
    queue_id: int = 0,
    props: dict[str, str] | None = None,
    sys_flag: int = 0,
) -> RemotingCommand:
    p = {"UNIQ_KEY": os.urandom(8).hex(), **(props or {})}
    ext = {
        "a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
        "g": str(int(time.time() * 1000)), "h": "0", "i": format_properties(p), "j": "0", "k": "false", "m": "false",
    }  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)


async def pipelined(port: int, connections: int, window: int, seconds: float, one) -> int:
    """Run ``one(client, i)`` coroutines, ``window`` at a time per connection, for ``seconds``."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(c: RemotingClient, w: int) -> None:
        nonlocal done
        i = w
        while time.perf_counter() < deadline:
            await one(c, i)
            done += 1
            i += connections * window

    clients = [await RemotingClient.connect("127.0.0.1", port) for _ in range(connections)]
    await asyncio.gather(*(worker(c, k * window + j) for k, c in enumerate(clients) for j in range(window)))
    for c in clients:
        await c.aclose()
    return done


async def bench(port: int, args: argparse.Namespace) -> None:
    s, n, w = args.seconds, args.connections, args.window

    async def plain(c: RemotingClient, i: int) -> None:
        assert (await c.invoke(send_cmd("BenchPlain", queue_id=i % 4))).code == 0

    async def transaction(c: RemotingClient, i: int) -> None:
        props = {"TRAN_MSG": "true", "PGROUP": "PG"}
        resp = await c.invoke(send_cmd("BenchTx", queue_id=i % 4, props=props, sys_flag=4))
        ext = resp.ext_fields or {}
        end = {
            "producerGroup": "PG", "tranStateTableOffset": ext["queueOffset"],
            "commitLogOffset": str(decode_offset_msg_id(ext["msgId"])[2]), "commitOrRollback": "8",
            "fromTransactionCheck": "false", "msgId": ext["msgId"],
        }  # fmt: skip
        assert (await c.invoke(RemotingCommand.request(RequestCode.END_TRANSACTION, end))).code == 0

    floor = await pipelined(port, n, w, s, plain) / s
    FLOOR[0] = floor
    print(f"floor  plain sends            {floor:10.0f} /s")
    tx = await pipelined(port, n, w, s, transaction) / s
    print(f"       transactions (commit)  {tx:10.0f} /s   {tx / floor:5.2f} x floor (3 appends each)")

    c = await RemotingClient.connect("127.0.0.1", port)
    offsets = []
    for i in range(2000):
        resp = await c.invoke(send_cmd("BenchBack", queue_id=i % 4))
        offsets.append(decode_offset_msg_id((resp.ext_fields or {})["msgId"])[2])

    async def send_back(cl: RemotingClient, i: int) -> None:
        ext = {
            "offset": str(offsets[i % len(offsets)]),
            "group": "BenchGroup",
            "delayLevel": "0",
            "maxReconsumeTimes": "16",
        }
        assert (await cl.invoke(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext))).code == 0

    back = await pipelined(port, n, w, s, send_back) / s
    print(f"       send-backs             {back:10.0f} /s   {back / floor:5.2f} x floor")

    # check-backs: halves nobody ends; a producer connection counts the checks it gets
    got = 0
    first = asyncio.get_running_loop().create_future()

    def on_request(cmd: RemotingCommand) -> None:
        nonlocal got
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            got += 1
            if not first.done():
                first.set_result(time.time())

    p = await RemotingClient.connect("127.0.0.1", port, on_request=on_request)
    hb = b'{"clientID":"bench","consumerDataSet":[],"producerDataSet":[{"groupName":"PGC"}]}'
    assert (await p.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {}, hb))).code == 0
    halves = args.halves
    await asyncio.gather(
        *(
            p.invoke(
                send_cmd("BenchCheck", group="PGC", props={"TRAN_MSG": "true", "PGROUP": "PGC"}, sys_flag=4)
            )
            for _ in range(halves)
        )
    )
    t_first = await asyncio.wait_for(first, 10)
    while got < halves:
        await asyncio.sleep(0.01)
    checks = halves / max(time.time() - t_first, 1e-3)
    print(
        f"       check-backs            {checks:10.0f} /s   {checks / floor:5.2f} x floor ({halves} halves)"
    )
    await p.aclose()
    await c.aclose()


async def put_delayed(port: int, args: argparse.Namespace) -> float:
    c = await RemotingClient.connect("127.0.0.1", port)
    sem = asyncio.Semaphore(args.window * args.connections)

    async def put(i: int) -> None:
        async with sem:
            assert (await c.invoke(send_cmd("BenchDelay", queue_id=0, props={"DELAY": "4"}))).code == 0

    t0 = time.time()
    await asyncio.gather(*(put(i) for i in range(args.delayed)))
    await c.aclose()
    return t0


async def wait_delivered(port: int, n: int) -> float:
    c = await RemotingClient.connect("127.0.0.1", port)
    while True:
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "BenchDelay", "queueId": "0"})
        resp = await c.invoke(cmd)
        if int((resp.ext_fields or {}).get("offset", 0)) >= n:
            break
        await asyncio.sleep(0.01)
    await c.aclose()
    return time.time()


class Server:
    def __init__(self, tmp: str, port: int) -> None:
        self.tmp, self.port, self.n = Path(tmp), port, 0
        (self.tmp / "broker.conf").write_text(CONF)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        self.n += 1
        log_path = self.tmp / f"server{self.n}.log"
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rmqgate.tools.cli", "serve", "--role", "broker", "--broker-port",
                 str(self.port), "--store", str(self.tmp / "store"), "--conf", str(self.tmp / "broker.conf")],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.time() + 30
        while b"rmqgate ready" not in log_path.read_bytes():
            if time.time() > deadline or self.proc.poll() is not None:
                raise SystemExit("server did not start:\n" + log_path.read_text())
            time.sleep(0.02)
        return time.time()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)
            self.proc = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--delayed", type=int, default=20000)
    ap.add_argument("--halves", type=int, default=5000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmqgate-bench-features-") as tmp:
        server = Server(tmp, free_broker_port())
        server.start()
        try:
            asyncio.run(bench(server.port, args))
            t0 = asyncio.run(put_delayed(server.port, args))
            put_s = time.time() - t0
            server.stop()
            time.sleep(max(0.0, t0 + put_s + 30.5 - time.time()))  # every one is due
            started = server.start()
            end = asyncio.run(wait_delivered(server.port, args.delayed))
            rate = args.delayed / (end - started)
            print(
                f"       delay delivery         {rate:10.0f} /s   {rate / FLOOR[0]:5.2f} x floor "
                f"({args.delayed} msgs due at start-up, delivered in {end - started:.2f} s)"
            )
        finally:
            server.stop()


FLOOR = [1.0]


if __name__ == "__main__":
    main()
