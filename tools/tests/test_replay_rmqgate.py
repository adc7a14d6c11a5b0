"""The traffic tools against the real rmqgate: corpus replays, a real client through the proxy.

Each test starts its own ``rmqgate serve`` (both roles, empty store) so a replay meets the fresh
state the recording started from.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests.servers import free_broker_port, free_port
from rmqgate.compat_tests.wire_client import WireClient, wait_until
from rmqgate.tools.capture import CaptureWriter, Direction, Kind, read_capture
from rmqgate.tools.proxy import RecordingProxy
from rmqgate.tools.replay import ReplayOptions, replay_file
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import decode_frame

ROOT = Path(__file__).resolve().parents[2]
_CORPUS = ROOT.parent / "shared" / "corpus"  # listed at collection; tests open files via `corpus`
PCAPS = [
    str(p.relative_to(_CORPUS))
    for d in ("pcap", "pcap-thirdparty")
    for p in sorted((_CORPUS / d).glob("*.pcap"))
]

#: Pull outcomes that depend on scheduling the replay cannot reproduce, so a mismatch between two
#: of them is tolerated: whether a message had arrived yet (SUCCESS / 19 / 20 / 21 at --speed max),
#: and SUBSCRIPTION_NOT_LATEST, which the Java broker answers when a pull overtakes the heartbeat
#: the client pipelined just before it (heartbeats and pulls run on separate Java thread pools;
#: rmqgate handles one connection's requests in order). Anything else is a divergence.
PULL_TIMING_CODES = {
    "SUCCESS",
    "PULL_NOT_FOUND",
    "PULL_RETRY_IMMEDIATELY",
    "PULL_OFFSET_MOVED",
    "SUBSCRIPTION_NOT_LATEST",
}
PULL_REQUESTS = {"PULL_MESSAGE", "LITE_PULL_MESSAGE"}


#: The corpus's transactional producer saw CHECK_TRANSACTION_STATE about 3 s after its half
#: messages, so the Java broker checked sooner than the defaults (6 s / 60 s); match that.
BROKER_CONF = """\
brokerIP1 = 127.0.0.1
transactionTimeOut = 2000
transactionCheckInterval = 1000
"""


def _stored(broker: str, topic: str, queues: int = 8) -> int:
    """How many messages the broker holds in ``topic`` (GET_MAX_OFFSET over its queues)."""
    with WireClient(broker, timeout=3) as c:
        replies = [
            c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": q}) for q in range(queues)
        ]
    return sum(int(r.ext_field("offset", "0")) for r in replies if r.code == 0)


class Rmqgate:
    """``rmqgate serve --role all`` on free ports with a temporary store."""

    def __init__(self, workdir: Path, ports: tuple[int, int] | None = None) -> None:
        self.workdir = workdir
        self.namesrv_port, self.broker_port = ports or (free_port(), free_broker_port())
        self.log = workdir / "rmqgate.log"
        self._log = self.log.open("ab")
        exe = Path(sys.executable).with_name("rmqgate")
        conf = workdir / "broker.conf"
        conf.write_text(BROKER_CONF)
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--role", "all", "--namesrv-port", str(self.namesrv_port),
             "--broker-port", str(self.broker_port), "--store", str(workdir / "store"), "--conf", str(conf)],
            stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"rmqgate serve exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            # ready, and the broker registered (a replay looks its address up)
            if b"rmqgate ready" in self.log.read_bytes() and asyncio.run(_has_broker(self.namesrv)):
                return
            time.sleep(0.1)
        raise RuntimeError(f"rmqgate serve not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


async def _has_broker(namesrv: str) -> bool:
    from rmqgate.tools.replay import discover_brokers

    try:
        return bool(await discover_brokers(namesrv, 2.0))
    except (OSError, ConnectionError, TimeoutError, ValueError):
        return False


@pytest.fixture
def rmqgate(tmp_path: Path) -> Iterator[Rmqgate]:
    server = Rmqgate(tmp_path)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _unexplained(report: dict) -> list[dict]:
    # a topic the recorded broker had before the capture began and the target refused to create
    # up front (rmq_sys_* trace topics: system topics cannot be created by admin request)
    missing = {t for t, outcome in report.get("preexisting_topics", {}).items() if outcome != "created"}
    return [
        m
        for m in report["mismatch_details"]
        if not (m["request"] in PULL_REQUESTS and {m["recorded"], m["got"]} <= PULL_TIMING_CODES)
        and not (
            m["request"] == "GET_ROUTEINFO_BY_TOPIC"
            and m["topic"] in missing
            and m["got"] == "TOPIC_NOT_EXIST"
        )
    ]


@pytest.mark.slow
@pytest.mark.parametrize("pcap", PCAPS)
def test_corpus_pcap_replays_against_rmqgate(pcap: str, corpus: Path, rmqgate: Rmqgate) -> None:
    report, _ = asyncio.run(
        replay_file(corpus / pcap, rmqgate.namesrv, ReplayOptions(speed=None, request_timeout=10))
    )
    assert report["errors"] == 0, report["error_kinds"]
    answered = sum(sum(e["recorded"].values()) for e in report["by_code"].values())
    assert report["responses"] >= answered
    assert _unexplained(report) == [], report["mismatch_details"]


def _run_cpp(args: dict, home: Path, timeout: float = 90) -> dict:
    from rmqgate.compat_tests.drivers import run_cpp

    return run_cpp(args, home, timeout=timeout)


async def _record(namesrv: str, path: Path, session) -> RecordingProxy:
    proxy = RecordingProxy(namesrv, CaptureWriter(path, source=f"proxy:{namesrv}"))
    await proxy.start()
    try:
        await asyncio.to_thread(session, proxy.address)
        await asyncio.sleep(0.3)
    finally:
        await proxy.stop()
        proxy.writer.close()
    return proxy


def _record_then_replay(
    tmp_path: Path, capture: Path, session: Callable[[str], None]
) -> tuple[RecordingProxy, dict]:
    """Record ``session`` through the proxy on a fresh rmqgate, then replay it on another fresh one."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Rmqgate(tmp_path / "a")
    try:
        first.wait_ready()
        proxy = asyncio.run(_record(first.namesrv, capture, session))
    finally:
        first.stop()
    second = Rmqgate(tmp_path / "b")
    try:
        second.wait_ready()
        report, _ = asyncio.run(replay_file(capture, second.namesrv, ReplayOptions(speed=1.0)))
    finally:
        second.stop()
    return proxy, report


@pytest.mark.slow
def test_cpp_client_through_proxy_then_replay(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    capture = tmp_path / "cpp.rmqcap"
    topic, group = "ReplayCppTopic", "ReplayCppGroup"

    def session(addr: str) -> None:
        sent = _run_cpp({"scenario": "produce", "namesrv": addr, "group": "PG_" + group, "topic": topic,
                         "count": 5, "mode": "sync"}, home)  # fmt: skip
        assert len(sent["results"]) == 5 and not sent["errors"], sent
        got = _run_cpp({"scenario": "push_consume", "namesrv": addr, "group": group, "topic": topic,
                        "expect": 5, "wait_s": 30, "linger_s": 1.0}, home)  # fmt: skip
        assert len(got["received"]) >= 5, got

    proxy, report = _record_then_replay(tmp_path, capture, session)
    assert proxy.stats.rewritten > 0 and proxy.broker_ports
    recs = list(read_capture(capture))
    requests = [decode_frame(r.data) for r in recs if r.kind == Kind.FRAME and r.direction == Direction.C2S]
    codes = {c.code for c in requests if not c.is_response}
    assert {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.PULL_MESSAGE,
    } <= codes
    assert report["errors"] == 0, report["error_kinds"]
    assert report["mismatches"] == 0, report["mismatch_details"]
    assert report["by_code"]["SEND_MESSAGE_V2"]["responses"].get("SUCCESS", 0) >= 5


@pytest.mark.slow
def test_cpp_client_killed_mid_stream_through_proxy(tmp_path: Path, rmqgate: Rmqgate) -> None:
    home = tmp_path / "home"
    home.mkdir()
    capture = tmp_path / "killed.rmqcap"
    from rmqgate.compat_tests.drivers import CPP_DRIVER, cpp_env

    def session(addr: str) -> None:
        import json

        args = {"scenario": "produce", "namesrv": addr, "group": "PG_kill", "topic": "KillTopic",
                "count": 100000, "mode": "async", "wait_s": 60}  # fmt: skip
        proc = subprocess.Popen([sys.executable, str(CPP_DRIVER), json.dumps(args)], env=cpp_env(home), cwd=home,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        broker = f"127.0.0.1:{rmqgate.broker_port}"
        wait_until(
            lambda: proc.poll() is not None or _stored(broker, "KillTopic") > 20, timeout=60, interval=0.2
        )
        assert proc.poll() is None and _stored(broker, "KillTopic") > 20, "the C++ producer is not sending"
        proc.send_signal(signal.SIGKILL)  # mid-stream
        proc.wait()

    proxy = asyncio.run(_record(rmqgate.namesrv, capture, session))
    recs = list(read_capture(capture))
    frames = [r for r in recs if r.kind == Kind.FRAME]
    sends = [decode_frame(r.data) for r in frames if r.direction == Direction.C2S]
    assert sum(1 for c in sends if c.code == RequestCode.SEND_MESSAGE_V2) > 10
    opens = {r.conn_id for r in recs if r.kind == Kind.CONN_OPEN}
    closes = {r.conn_id for r in recs if r.kind == Kind.CONN_CLOSE}
    assert opens == closes and len(opens) == proxy.stats.connections
    assert len(frames) == proxy.stats.frames


@pytest.mark.slow
def test_ali_ons_through_proxy_then_replay(tmp_path: Path) -> None:
    from rmqgate.compat_tests.drivers import run_node
    from rmqgate.tools.replay import discover_brokers

    home = tmp_path / "home"
    home.mkdir()
    capture = tmp_path / "ons.rmqcap"
    topic, group = "ReplayOnsTopic", "ReplayOnsGroup"

    def session(addr: str) -> None:
        # the proxy opens its broker listener when a cluster/route answer names the broker
        broker = next(iter(asyncio.run(discover_brokers(addr)).values()))
        sent = run_node("produce.js", {"namesrv": addr, "broker": broker, "topic": topic, "group": "PG_ons",
                                       "create": True, "queues": 4, "count": 6}, home)  # fmt: skip
        assert [r["sendStatus"] for r in sent["results"]] == ["SEND_OK"] * 6, sent
        got = run_node("consume.js", {"namesrv": addr, "topic": topic, "group": group, "expect": 6,
                                      "lingerMs": 1000, "timeoutMs": 60000}, home, timeout=90)  # fmt: skip
        assert len(got["received"]) >= 6, got

    _, report = _record_then_replay(tmp_path, capture, session)
    assert report["errors"] == 0, report["error_kinds"]
    assert report["mismatches"] == 0, report["mismatch_details"]
    assert report["by_code"]["SEND_MESSAGE_V2"]["responses"] == {"SUCCESS": 6}
    assert report["by_code"]["UPDATE_AND_CREATE_TOPIC"]["responses"] == {"SUCCESS": 1}


@pytest.mark.slow
def test_rmqgate_restarted_under_the_proxy(tmp_path: Path) -> None:
    """Upstream restart: live connections end, later ones work, every whole frame stays recorded."""
    from rmqgate.server.client import RemotingClient
    from rmqgate.tools.proxy import broker_addresses

    capture = tmp_path / "restart.rmqcap"
    server = Rmqgate(tmp_path)

    async def session(proxy_addr: str, phase: int) -> list[int]:
        ns = await RemotingClient.connect_addr(proxy_addr)
        route = await ns.invoke(
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        )
        broker = await RemotingClient.connect_addr(next(iter(broker_addresses(bytes(route.body)))))
        codes = []
        for i in range(20):
            ext = {"a": "PG_restart", "b": "RestartTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                   "g": "1", "h": "0", "i": f"UNIQ_KEY\x01R{phase}-{i}\x02"}  # fmt: skip
            resp = await broker.invoke(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x"))
            codes.append(resp.code)
        await broker.aclose()
        await ns.aclose()
        return codes

    async def main() -> tuple[list[int], list[int], RecordingProxy]:
        proxy = RecordingProxy(server.namesrv, CaptureWriter(capture, source="restart"))
        await proxy.start()
        before = await session(proxy.address, 1)
        held = await RemotingClient.connect_addr(proxy.address)  # open across the restart
        await asyncio.to_thread(server.stop)
        for _ in range(50):
            if held.closed:
                break
            await asyncio.sleep(0.1)
        assert held.closed, "the proxy kept a client connection whose upstream went away"
        restarted = Rmqgate(tmp_path, (server.namesrv_port, server.broker_port))
        try:
            await asyncio.to_thread(restarted.wait_ready)
            after = await session(proxy.address, 2)
        finally:
            await asyncio.to_thread(restarted.stop)
            await proxy.stop()
            proxy.writer.close()
        return before, after, proxy

    try:
        server.wait_ready()
        before, after, proxy = asyncio.run(main())
    finally:
        server.stop()
    assert before == after == [0] * 20
    recs = list(read_capture(capture))
    sends = [decode_frame(r.data) for r in recs if r.kind == Kind.FRAME and r.direction == Direction.C2S]
    assert sum(1 for c in sends if c.code == RequestCode.SEND_MESSAGE_V2) == 40
    frames = [r for r in recs if r.kind == Kind.FRAME]
    assert len(frames) == proxy.stats.frames
    opens = {r.conn_id for r in recs if r.kind == Kind.CONN_OPEN}
    assert opens == {r.conn_id for r in recs if r.kind == Kind.CONN_CLOSE} and len(opens) == 5
