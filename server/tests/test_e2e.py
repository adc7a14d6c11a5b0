"""End to end on the real store: ``rmqgate serve`` subprocesses, raw wire clients.

- one process with both roles: route -> send -> pull -> commit offset -> query offset, restart keeps it;
- a mixed cluster: one process ``--role namesrv``, another ``--role broker`` registering with it;
- SIGTERM: exit 0, abort file removed, broker unregistered from the name server;
- the broker's idle close from broker.conf's serverChannelMaxIdleTimeSeconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import async_test
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.message import format_properties, iter_messages


class Serve:
    """``rmqgate serve`` in a subprocess; ``addrs`` from its ready line."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmqgate.tools.cli", "serve", "--listen", "127.0.0.1", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("rmqgate ready:"):
            self.proc.kill()
            raise AssertionError(
                f"no ready line: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        words = line.split()[2:]
        self.addrs = dict(zip(words[::2], words[1::2], strict=True))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            for f in (self.proc.stdout, self.proc.stderr):
                if f:
                    f.close()

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


def send(topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    ext = {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": format_properties({"TAGS": "T1", "WAIT": "true"}),
    }  # fmt: skip
    return RemotingCommand.request(R.SEND_MESSAGE_V2, ext, body)


def pull(topic: str, offset: int, group: str, sys_flag: int = 4, commit: int = 0) -> RemotingCommand:
    ext = {
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(sys_flag), "commitOffset": str(commit), "suspendTimeoutMillis": "1000",
        "subscription": "*", "subVersion": "0", "expressionType": "TAG",
    }  # fmt: skip
    return RemotingCommand.request(R.PULL_MESSAGE, ext)


async def produce_pull_commit(namesrv: str, topic: str, group: str) -> str:
    ns = await RemotingClient.connect_addr(namesrv)
    tbw = await ns.invoke(RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
    assert tbw.code == 0, tbw.remark
    assert (await ns.invoke(RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))).code == 17
    broker_addr = json.loads(tbw.body)["brokerDatas"][0]["brokerAddrs"]["0"]
    br = await RemotingClient.connect_addr(broker_addr)
    for i in range(5):
        resp = await br.invoke(send(topic, b"payload-%d" % i))
        assert resp.code == 0, resp.remark
        assert resp.ext_fields["queueOffset"] == str(i)
    # auto-creation re-registered the broker at once: the route exists now
    for _ in range(50):
        route = await ns.invoke(RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if route.code == 0:
            break
        time.sleep(0.05)
    assert route.code == 0 and json.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 4
    got = await br.invoke(pull(topic, 0, group))
    assert got.code == 0
    assert [bytes(m.body) for m in iter_messages(got.body)] == [b"payload-%d" % i for i in range(5)]
    upd = RemotingCommand.request(
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "5"},
    )
    assert (await br.invoke(upd)).code == 0
    q = RemotingCommand.request(
        R.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0"}
    )
    assert (await br.invoke(q)).ext_fields == {"offset": "5"}
    await br.aclose()
    await ns.aclose()
    return broker_addr


@async_test
async def test_produce_pull_commit_query_and_restart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = ("--store", str(store), "--namesrv-port", "0", "--broker-port", "0")
    with Serve(*args) as s:
        assert set(s.addrs) == {"namesrv", "broker"}
        await produce_pull_commit(s.addrs["namesrv"], "E2E", "G-e2e")
        assert (store / "abort").exists()
        assert s.stop() == 0
    assert not (store / "abort").exists()
    with Serve(*args) as s:  # offsets and messages survive a clean restart
        br = await RemotingClient.connect_addr(s.addrs["broker"])
        q = RemotingCommand.request(
            R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G-e2e", "topic": "E2E", "queueId": "0"}
        )
        assert (await br.invoke(q)).ext_fields == {"offset": "5"}
        got = await br.invoke(pull("E2E", 3, "G-e2e"))
        assert [bytes(m.body) for m in iter_messages(got.body)] == [b"payload-3", b"payload-4"]
        await br.aclose()


@async_test
async def test_mixed_cluster_namesrv_and_broker_processes(tmp_path: Path) -> None:
    with Serve("--role", "namesrv", "--namesrv-port", "0") as ns_proc:
        assert set(ns_proc.addrs) == {"namesrv"}
        conf = tmp_path / "broker.conf"
        conf.write_text(
            f"brokerClusterName = MixedCluster\nbrokerName=broker-mixed\nbrokerId=0\n"
            f"namesrvAddr={ns_proc.addrs['namesrv']}\nstorePathRootDir={tmp_path / 'bstore'}\n"
            "autoCreateTopicEnable=true\n"
        )
        with Serve("--role", "broker", "--conf", str(conf), "--broker-port", "0") as b_proc:
            assert set(b_proc.addrs) == {"broker"}
            broker_addr = await produce_pull_commit(ns_proc.addrs["namesrv"], "MIX", "G-mix")
            assert broker_addr == b_proc.addrs["broker"]
            ns = await RemotingClient.connect_addr(ns_proc.addrs["namesrv"])
            info = json.loads(
                (await ns.invoke(RemotingCommand.request(R.GET_BROKER_CLUSTER_INFO))).body.replace(
                    b"{0:", b'{"0":'
                )
            )
            assert info["clusterAddrTable"] == {"MixedCluster": ["broker-mixed"]}
            assert b_proc.stop() == 0
            # the broker unregistered on SIGTERM
            route = await ns.invoke(RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "MIX"}))
            assert route.code == ResponseCode.TOPIC_NOT_EXIST
            await ns.aclose()


def test_the_brokers_idle_close_comes_from_broker_conf(tmp_path: Path) -> None:
    """serverChannelMaxIdleTimeSeconds in broker.conf (NettyServerConfig's key) closes the broker's idle
    connections; the name server keeps its own default, and --idle-timeout overrides both."""

    def closed_within(addr: str, seconds: float) -> bool:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=seconds) as s:
            try:
                return s.recv(1) == b""
            except TimeoutError:
                return False

    conf = tmp_path / "broker.conf"
    conf.write_text(f"serverChannelMaxIdleTimeSeconds=1\nstorePathRootDir={tmp_path / 'store'}\n")
    with Serve("--conf", str(conf), "--namesrv-port", "0", "--broker-port", "0") as proc:
        assert closed_within(proc.addrs["broker"], 5)
        assert not closed_within(proc.addrs["namesrv"], 2)
    with Serve(
        "--conf", str(conf), "--namesrv-port", "0", "--broker-port", "0", "--idle-timeout", "30"
    ) as proc:
        assert not closed_within(proc.addrs["broker"], 2)
