"""Slow and stuck consumers against a live `rmqgate serve`: the broker's memory stays bounded, other
clients keep their latency, and idle channels are closed on time.

Phases, one after another on one broker (serverChannelMaxIdleTimeSeconds set short):
- stuck: consumers pipeline PULL_MESSAGE as fast as their sockets take it and never read;
- parked: thousands of long polls parked on an empty topic, then all woken by one message a queue;
- idle: 10,000 connections that send nothing.
The broker's RSS and open fds are sampled throughout (the series is printed); a well-behaved client's
send and pull latency is measured before and in each phase. Fails when RSS keeps growing while a
phase holds, a probe request starves, a parked poll is not answered once woken, or the idle channels
(the stuck ones included, whose unread responses must not keep them open) are not closed on time.
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests.adversity.probes import log_excerpt, log_problems, percentile, rss_kib
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess
from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    WireClient,
    create_routed_topic,
    split_addr,
    wait_until,
)
from rmqgate.wire import FrameDecoder, RemotingCommand, encode_frame
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IDLE_S = 15
STUCK = 40
PUMP_S = 12.0
PARKED_CONNS, PARKED_PER = 20, 100
IDLE_CONNS = 10_000
FILL, FILL_SIZE = 2000, 4096
PROBES = 100
#: A probe request slower than this counts as starved (a bound on unfairness, not a speed target).
STARVED_S = 2.0
#: RSS may grow this much between the halves of a phase's hold before it counts as growing.
PLATEAU_KIB = 24 * 1024


class Sampler(threading.Thread):
    """The server's RSS (KiB) and open fds every 0.25 s, each sample tagged with the current phase."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.phase = "start"
        self.began = time.monotonic()
        self.samples: list[tuple[float, str, int, int]] = []
        self.done = threading.Event()

    def fds(self) -> int:
        return len(list(Path(f"/proc/{self.pid}/fd").iterdir()))

    def run(self) -> None:
        while not self.done.wait(0.25):
            with contextlib.suppress(OSError, RuntimeError):
                self.samples.append(
                    (time.monotonic() - self.began, self.phase, rss_kib(self.pid), self.fds())
                )

    def window(self, since: float) -> list[tuple[float, str, int, int]]:
        return [s for s in self.samples if s[0] >= since - self.began]


def plateau_growth(samples: list[tuple[float, str, int, int]]) -> int:
    """KiB the peak RSS of a window's second half exceeds its first half's by."""
    half = len(samples) // 2
    assert half >= 2, "too few RSS samples"
    return max(s[2] for s in samples[half:]) - max(s[2] for s in samples[:half])


def probe(broker: str, topic: str) -> dict[str, float]:
    """A well-behaved client on a fresh connection: PROBES sends and pulls, latency in ms."""
    sends: list[float] = []
    pulls: list[float] = []
    with WireClient(broker, timeout=STARVED_S * 5) as c:
        for i in range(PROBES):
            began = time.perf_counter()
            resp = c.send_message(topic, b"probe", queue_id=i % 4)
            sends.append((time.perf_counter() - began) * 1000)
            assert resp.code == ResponseCode.SUCCESS, resp
            began = time.perf_counter()
            resp = c.pull("ProbeG", topic, i % 4, 0, max_nums=1, sys_flag=PULL_SUBSCRIPTION, subscription="*")
            pulls.append((time.perf_counter() - began) * 1000)
            assert resp.code == ResponseCode.SUCCESS, resp
    return {
        "send_p50": percentile(sends, 50),
        "send_p99": percentile(sends, 99),
        "pull_p50": percentile(pulls, 50),
        "pull_p99": percentile(pulls, 99),
    }


def pull_frame(topic: str, queue_id: int, offset: int, *, flags: int, suspend_ms: int, opaque: int) -> bytes:
    fields = {
        "consumerGroup": "SlowG", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
        "sysFlag": flags, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms, "subscription": "*",
        "subVersion": 0, "expressionType": "TAG",
    }  # fmt: skip
    return encode_frame(
        RemotingCommand.request(
            RequestCode.PULL_MESSAGE, {k: str(v) for k, v in fields.items()}, opaque=opaque
        )
    )


def connect(addr: str, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(split_addr(addr))
    return sock


def pump_stuck(socks: list[socket.socket], chunk: bytes, seconds: float) -> int:
    """Write pipelined pulls to every stuck socket for ``seconds``, as much as each takes; bytes taken."""
    for s in socks:
        s.setblocking(False)
    taken = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        progressed = False
        for s in socks:
            with contextlib.suppress(BlockingIOError):
                taken += s.send(chunk)
                progressed = True
        if not progressed:
            time.sleep(0.05)
    return taken


def read_answers(socks: list[socket.socket], per_socket: int, timeout: float) -> tuple[int, int]:
    """(responses read, FOUND among them) from every socket, each read bounded by ``timeout``."""
    answered = found = 0
    for s in socks:
        s.settimeout(timeout)
        decoder = FrameDecoder()
        got = 0
        with contextlib.suppress(TimeoutError, OSError):
            while got < per_socket:
                data = s.recv(1 << 20)
                if not data:
                    break
                for resp in decoder.feed(data):
                    got += 1
                    found += resp.code == ResponseCode.SUCCESS
        answered += got
    return answered, found


def closed_by_peer(socks: list[socket.socket], deadline: float) -> int:
    """How many of ``socks`` the server closed before ``deadline`` (EOF or reset seen)."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    while closed < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                closed += 1
    sel.close()
    return closed


@contextlib.contextmanager
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for s in opened:
            s.close()


def test_slow_stuck_and_idle_consumers(tmp_path: Path, report) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = IDLE_CONNS + 2000
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want, "fd limit too low for 10,000 connections"
    (tmp_path / "rmqgate").mkdir()
    conf = BROKER_CONF + f"serverChannelMaxIdleTimeSeconds = {IDLE_S}\n"
    server = ServerProcess(tmp_path / "rmqgate", conf=conf)
    sampler = Sampler(server.proc.pid)
    rows: list[list[object]] = []
    try:
        server.wait_ready()
        sampler.start()
        topic = create_routed_topic(server.broker, server.namesrv, "SlowT", 4)
        park_topic = create_routed_topic(server.broker, server.namesrv, "ParkT", 4)
        with WireClient(server.broker) as c:
            for i in range(FILL):
                assert c.send_message(topic, bytes([65 + i % 26]) * FILL_SIZE, queue_id=i % 4).code == 0
        base_fds = sampler.fds()

        def row(phase: str, latency: dict[str, float], extra: str) -> None:
            now = (0.0, phase, rss_kib(sampler.pid), sampler.fds())  # for a phase with no samples of its own
            window = [s for s in sampler.samples if s[1] == phase] or [now]
            rows.append(
                [phase, *(f"{latency[k]:.1f}" for k in ("send_p50", "send_p99", "pull_p50", "pull_p99")),
                 f"{max(s[2] for s in window) / 1024:.0f}", max(s[3] for s in window), extra]
            )  # fmt: skip

        sampler.phase = "quiet"
        quiet = probe(server.broker, topic)
        row("quiet", quiet, "")

        with sockets() as stuck, sockets() as parked, sockets() as idle:
            # stuck: pulls of 32 x 4 KiB messages pipelined, responses never read
            sampler.phase = "stuck"
            stuck += [connect(server.broker, rcvbuf=4096) for _ in range(STUCK)]
            chunk = b"".join(
                pull_frame(
                    topic, q, (q * 97) % (FILL // 4), flags=PULL_SUBSCRIPTION, suspend_ms=0, opaque=q + 1
                )
                for q in range(64)
            )
            pump_began = time.monotonic()
            holder = threading.Thread(target=lambda: pumped.append(pump_stuck(stuck, chunk, PUMP_S)))
            pumped: list[int] = []
            holder.start()
            time.sleep(PUMP_S / 3)
            stuck_latency = probe(server.broker, topic)
            holder.join()
            stuck_growth = plateau_growth(sampler.window(pump_began + PUMP_S / 2))
            row("stuck", stuck_latency, f"{STUCK} conns took {pumped[0] / 1e6:.1f} MB of pulls")

            # parked: long polls on an empty topic, then woken by one message a queue
            sampler.phase = "parked"
            parked += [connect(server.broker) for _ in range(PARKED_CONNS)]
            for n, s in enumerate(parked):
                s.sendall(
                    b"".join(
                        pull_frame(park_topic, (n + i) % 4, 0, flags=PULL_SUBSCRIPTION | PULL_SUSPEND,
                                   suspend_ms=120_000, opaque=i + 1)
                        for i in range(PARKED_PER)
                    )
                )  # fmt: skip
            time.sleep(2)
            park_began = time.monotonic()
            parked_latency = probe(server.broker, topic)
            time.sleep(max(0.0, park_began + 4 - time.monotonic()))
            park_growth = plateau_growth(sampler.window(park_began))
            with WireClient(server.broker) as c:
                for q in range(4):
                    assert c.send_message(park_topic, b"wake", queue_id=q).code == 0
            answered, found = read_answers(parked, PARKED_PER, timeout=30)
            row("parked", parked_latency, f"{answered}/{PARKED_CONNS * PARKED_PER} woken polls answered")

            # idle: 10,000 connections that never send
            sampler.phase = "idle"
            opened_at = time.monotonic()
            idle += [connect(server.broker) for _ in range(IDLE_CONNS)]
            open_s = time.monotonic() - opened_at
            idle_began = time.monotonic()
            idle_latency = probe(server.broker, topic)
            time.sleep(max(0.0, idle_began + 4 - time.monotonic()))
            idle_growth = plateau_growth(sampler.window(idle_began))
            row("idle", idle_latency, f"{IDLE_CONNS} conns opened in {open_s:.1f} s")

            # every idle connection, the stuck ones included, closed within the timeout + a scan period
            sampler.phase = "closing"
            close_deadline = opened_at + open_s + IDLE_S + IDLE_S / 4 + 15
            idle_closed = closed_by_peer(idle, close_deadline)
            closed_after = time.monotonic() - opened_at
            fds_back = wait_until(lambda: sampler.fds() <= base_fds + 5, timeout=30, interval=0.5)
            after = probe(server.broker, topic)
            row(
                "after close", after, f"{idle_closed} idle closed {closed_after:.0f} s after the first opened"
            )
        sampler.done.set()
        alive = server.proc.poll() is None
    finally:
        sampler.done.set()
        server.stop()

    report(
        "slow_consumers",
        f"Slow and stuck consumers (idle timeout {IDLE_S} s; latency ms from {PROBES} sends + pulls; "
        "shared 2-core box)",
        ["phase", "send p50", "send p99", "pull p50", "pull p99", "peak RSS MiB", "peak fds", "note"],
        rows,
    )
    series = sampler.samples[:: max(1, len(sampler.samples) // 60)]
    print(
        "RSS series (s, phase, MiB, fds): "
        + ", ".join(f"{t:.0f} {p} {r / 1024:.0f} {f}" for t, p, r, f in series)
    )
    print(f"RSS growth while holding (KiB): stuck {stuck_growth}, parked {park_growth}, idle {idle_growth}")
    assert alive
    assert log_problems(server.log_path) == (0, 0), log_excerpt(server.log_path)
    assert stuck_growth <= PLATEAU_KIB, f"RSS kept growing under stuck consumers: +{stuck_growth} KiB"
    assert park_growth <= PLATEAU_KIB, f"RSS kept growing with parked polls: +{park_growth} KiB"
    assert idle_growth <= PLATEAU_KIB, f"RSS kept growing with idle connections: +{idle_growth} KiB"
    assert answered == found == PARKED_CONNS * PARKED_PER, (answered, found)
    assert idle_closed == IDLE_CONNS, f"{IDLE_CONNS - idle_closed} idle connections left open"
    assert fds_back, f"the server's open fds never came back to {base_fds} + 5 once the idle channels closed"
    for phase, latency in (("stuck", stuck_latency), ("parked", parked_latency), ("idle", idle_latency)):
        assert max(latency.values()) < STARVED_S * 1000, (phase, latency)
