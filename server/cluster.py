"""One broker per core: ``rmqgate serve --brokers N`` (broker.conf ``brokerProcesses=N``) runs N broker
processes of one cluster on this host, as RocketMQ scales out by adding brokers whose queues clients
spread over.

Broker ``i`` is ``<brokerName>-<i>``, listens on ``listenPort + BROKER_PORT_STEP * i`` and keeps its store
in ``<storePathRootDir>/broker-<i>`` with its own broker.conf there (the parent's keys plus its own
name, port and paths; UPDATE_BROKER_CONFIG writes back to it). The ``ClusterSupervisor`` starts them,
restarts one that exits (its store recovers as after a crash) with backoff, and stops them all with
SIGTERM, so each unregisters and flushes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rmqgate.server.config import BrokerConfig, ConfigError, parse_properties_text

log = logging.getLogger("rmqgate.server.cluster")

#: Ports between two brokers' listenPorts: a broker also uses listenPort + 1 (haListenPort's default)
#: and Java clients with the VIP channel on connect to listenPort - 2, so neither may be a neighbour's.
BROKER_PORT_STEP = 4
#: broker.conf key: how many broker processes ``serve`` runs (absent or 0: one broker in-process).
PROCESSES_KEY = "brokerProcesses"
#: A child that ran this long before exiting is restarted at once; quicker exits double the delay.
STABLE_RUN_S = 60.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
#: Seconds a child has after SIGTERM to unregister and flush before it is killed.
STOP_GRACE_S = 60.0


def parse_brokers(value: str) -> int:
    """``--brokers`` / ``brokerProcesses``: a positive count or ``auto`` (this host's CPUs)."""
    if value.strip().lower() == "auto":
        return os.cpu_count() or 1
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(f"{PROCESSES_KEY}={value!r}: a number of brokers or 'auto'") from None
    if count < 0:
        raise ConfigError(f"{PROCESSES_KEY}={value!r}: must not be negative")
    return count


@dataclass
class BrokerSlot:
    """What broker ``index`` of the cluster is started with, and its process while it runs."""

    index: int
    name: str
    port: int
    store: str
    conf_path: str
    overrides: dict[str, str]
    addr: str | None = None  # from its ready line
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)


def plan_brokers(config: BrokerConfig, count: int) -> list[BrokerSlot]:
    """Name, port, store and broker.conf overrides of each of ``count`` brokers built from ``config``
    (the parent's, with command-line flags applied)."""
    slots = []
    for i in range(count):
        store = os.path.join(config.storePathRootDir, f"broker-{i}")
        port = 0 if config.listenPort == 0 else config.listenPort + BROKER_PORT_STEP * i
        overrides = {
            "brokerName": f"{config.brokerName}-{i}",
            "listenPort": str(port),
            "storePathRootDir": store,
            PROCESSES_KEY: "0",
        }
        if config.namesrvAddr:
            overrides["namesrvAddr"] = config.namesrvAddr
        if config.storePathCommitLog:
            overrides["storePathCommitLog"] = os.path.join(config.storePathCommitLog, f"broker-{i}")
        if config.metricsPort:
            overrides["metricsPort"] = str(config.metricsPort + i)
        ha_port = config.haListenPort
        if ha_port > 0:  # set outright: each broker's is its own (-1 follows listenPort, 0 is any)
            overrides["haListenPort"] = str(ha_port + BROKER_PORT_STEP * i)
        slots.append(
            BrokerSlot(i, overrides["brokerName"], port, store, os.path.join(store, "broker.conf"), overrides)
        )
    return slots


def write_broker_conf(slot: BrokerSlot, parent_conf: str | None) -> None:
    """The child's broker.conf: keys an earlier run persisted there, then the parent's broker.conf
    (it wins), then the child's own name, port and paths."""
    os.makedirs(slot.store, exist_ok=True)
    props: dict[str, str] = {}
    for path in (slot.conf_path, parent_conf):
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                props |= parse_properties_text(f.read())
    props |= slot.overrides
    tmp = slot.conf_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
    os.replace(tmp, slot.conf_path)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """What the child runs before exec: SIGTERM when the supervisor dies (Linux PR_SET_PDEATHSIG), so
    a killed supervisor leaves no broker behind, and at once if it died before this was set."""

    def arm() -> None:
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class ClusterSupervisor:
    """Starts the brokers of ``slots``, restarts one that exits, stops them all."""

    def __init__(
        self,
        slots: Sequence[BrokerSlot],
        *,
        parent_conf: str | None,
        child_args: Sequence[str] = (),
        backoff_first: float = BACKOFF_FIRST_S,
        backoff_max: float = BACKOFF_MAX_S,
        stable_run: float = STABLE_RUN_S,
        stop_grace: float = STOP_GRACE_S,
    ) -> None:
        self.slots = list(slots)
        self.parent_conf = parent_conf
        self.child_args = list(child_args)
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        self.stable_run = stable_run
        self.stop_grace = stop_grace
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []

    def command(self, slot: BrokerSlot) -> list[str]:
        return [
            sys.executable, "-m", "rmqgate.tools.cli", "serve", "--role", "broker",
            "--conf", slot.conf_path, *self.child_args,
        ]  # fmt: skip

    async def start(self, timeout: float = 300.0) -> list[str]:
        """Start every broker and wait for each one's ready line; their addresses in order. A broker
        that exits before it is ready stops the start (OSError) and the others."""
        for slot in self.slots:
            write_broker_conf(slot, self.parent_conf)
        self._watchers = [asyncio.create_task(self._watch(slot)) for slot in self.slots]
        all_ready = asyncio.ensure_future(asyncio.gather(*(slot.ready.wait() for slot in self.slots)))
        await asyncio.wait([all_ready, *self._watchers], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        all_ready.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await all_ready
        if not all(slot.ready.is_set() for slot in self.slots):
            await self.stop()
            missing = [slot.name for slot in self.slots if not slot.ready.is_set()]
            raise OSError(f"brokers not ready: {', '.join(missing)}")
        return [slot.addr or "" for slot in self.slots]

    async def _spawn(self, slot: BrokerSlot) -> asyncio.subprocess.Process:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # Its own session: a terminal's Ctrl-C reaches the supervisor only, which stops the brokers
        # itself (rather than watching them exit and taking that for a crash).
        return await asyncio.create_subprocess_exec(
            *self.command(slot),
            stdout=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None,
        )

    async def _read_ready(self, slot: BrokerSlot, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            words = line.split()
            if line.startswith("rmqgate ready:") and "broker" in words:
                slot.addr = words[words.index("broker") + 1]
                slot.ready.set()
                log.info("broker %s ready on %s (pid %d)", slot.name, slot.addr, proc.pid)
            elif line:
                print(line, flush=True)

    async def _watch(self, slot: BrokerSlot) -> None:
        """Run broker ``slot`` until the cluster stops: a start before it is ready that fails ends
        the watch (the cluster's start fails); an exit after that is followed by a restart."""
        delay = self.backoff_first
        while not self._stopping.is_set():
            slot.proc = proc = await self._spawn(slot)
            if self._stopping.is_set():  # stop() began while it was being spawned: it missed this one
                proc.send_signal(signal.SIGTERM)
            started = time.monotonic()
            reader = asyncio.create_task(self._read_ready(slot, proc))
            code = await proc.wait()
            await reader
            if self._stopping.is_set():
                return
            if not slot.ready.is_set():
                log.error("broker %s exited with %s before it was ready", slot.name, code)
                return
            if time.monotonic() - started >= self.stable_run:
                delay = self.backoff_first
            log.warning(
                "broker %s (pid %d) exited with %s; restarting in %.3g s", slot.name, proc.pid, code, delay
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, self.backoff_max)
            slot.restarts += 1

    async def stop(self) -> None:
        """SIGTERM every broker (each unregisters, answers parked pulls and flushes), SIGKILL one that
        has not exited after ``stop_grace`` seconds."""
        self._stopping.set()
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*(self._reap(proc) for proc in procs))
        await asyncio.gather(*self._watchers, return_exceptions=True)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await asyncio.wait_for(proc.wait(), self.stop_grace)
        except TimeoutError:
            log.error("broker pid %d did not stop in %.0f s; killing it", proc.pid, self.stop_grace)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
