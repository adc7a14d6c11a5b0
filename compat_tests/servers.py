"""Start and stop `rmqgate serve` processes for the compat suite (the default target, split roles).

Readiness = the "rmqgate ready" line in the log and every port of the role accepting connections;
stop = SIGTERM (then SIGKILL after a grace period). Output goes to a log file the suite shows
when a test fails.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rmqgate.compat_tests.wire_client import WireClient, wait_until
from rmqgate.server.cluster import BROKER_PORT_STEP

#: Seconds a server may take to come up. It is usually one or two, but a restart recovers the store
#: (zeroing the CommitLog segment's tail scans it), which took 25 s on a loaded 2-core machine; the
#: wait ends as soon as the server is ready, so only a failure waits this long.
STARTUP_TIMEOUT = 120.0

# What the suite's own server runs with; the keys are RocketMQ broker.conf keys.
BROKER_CONF = """\
brokerClusterName = CompatCluster
brokerName = compat-broker-a
brokerId = 0
brokerIP1 = 127.0.0.1
autoCreateTopicEnable = true
autoCreateSubscriptionGroup = true
defaultTopicQueueNums = 4
flushDiskType = ASYNC_FLUSH
transactionTimeOut = 1000
transactionCheckInterval = 1000
enablePropertyFilter = true
"""


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range() -> tuple[int, int]:
    """Ports 10000 up to the kernel's ephemeral range; under pytest-xdist each worker takes its own
    slice of it, so two workers never pick the same port before either server has bound it."""
    low = _ephemeral_low()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return 10_000, low
    width = (low - 10_000) // count
    start = 10_000 + int(worker[2:]) % count * width
    return start, start + width


def free_port() -> int:
    """A port free now, for a server started later. It is picked below the kernel's ephemeral range:
    until the server binds it, no outgoing connection can be given it (a ``bind(0)`` port can)."""
    start, end = _port_range()
    for _ in range(200 if end - start > 1_000 else 0):
        port = random.randrange(start, end)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def free_broker_port(brokers: int = 1) -> int:
    """A free listenPort for ``brokers`` brokers (``rmqgate serve --brokers``: BROKER_PORT_STEP apart)
    whose VIP (port - 2) and HA (port + 1) neighbours are free too: a broker's HA listener on a taken
    port fails its start, and a Java slave would ask whatever holds its master's VIP port for topics."""
    for _ in range(50):
        port = free_port()
        wanted = [
            p + d
            for p in range(port, port + BROKER_PORT_STEP * brokers, BROKER_PORT_STEP)
            for d in (-2, 0, 1)
        ]
        if wanted[-1] < 65536 and all(_bindable(p) for p in wanted if p != port):
            return port
    raise RuntimeError("no free port with free VIP and HA neighbours for a broker")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path | None, lines: int = 200) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def wait_logged(
    proc: subprocess.Popen[bytes], log_path: Path, line: bytes, ports: list[int], timeout: float, what: str
) -> None:
    """Wait until ``line`` is in the server's log and every port accepts connections; RuntimeError
    with the log's tail if it exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log_tail(log_path)}")
        if line in log_path.read_bytes() and all(port_open(p) for p in ports):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {timeout} s:\n{log_tail(log_path)}")


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def discover_broker(namesrv: str, timeout: float = STARTUP_TIMEOUT) -> tuple[str, str, str]:
    """(broker master address, brokerName, clusterName) of the first registered broker."""

    def find() -> tuple[str, str, str] | None:
        try:
            with WireClient(namesrv, timeout=3) as c:
                info = c.cluster_info()
        except (OSError, AssertionError, ValueError):
            return None
        for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
            for name in sorted(names):
                addrs = info["brokerAddrTable"][name]["brokerAddrs"]
                if "0" in addrs:
                    return addrs["0"], name, cluster
        return None

    found = wait_until(find, timeout=timeout, interval=0.2)
    if not found:
        raise RuntimeError(f"no broker master registered with the name server {namesrv}")
    return found


class ServerProcess:
    """`rmqgate serve` in a subprocess with its output in a log file. Another one on the same
    ``workdir`` and ports serves the same store and conf again (a restart)."""

    def __init__(
        self,
        workdir: Path,
        *,
        role: str = "all",
        namesrv_addr: str | None = None,
        conf: str = BROKER_CONF,
        namesrv_port: int | None = None,
        broker_port: int | None = None,
        log_name: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        self.store = workdir / "store"
        self.log_path = workdir / (log_name or f"rmqgate-{role}.log")
        self.conf_path = workdir / "broker.conf"
        self.conf_path.write_text(conf)
        self.namesrv_port = namesrv_port or free_port()
        brokers = extra_args[extra_args.index("--brokers") + 1] if "--brokers" in extra_args else "1"
        self.broker_port = broker_port or free_broker_port(int(brokers) if brokers.isdigit() else 1)
        self.role = role
        args = [
            sys.executable,
            "-m",
            "rmqgate.tools.cli",
            "serve",
            "--store",
            str(self.store),
            "--namesrv-port",
            str(self.namesrv_port),
            "--broker-port",
            str(self.broker_port),
            "--role",
            role,
            "--conf",
            str(self.conf_path),
        ]
        if namesrv_addr:
            args += ["--namesrv-addr", namesrv_addr]
        args += extra_args
        self._log = self.log_path.open("wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir, env=env)

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Ready = the "rmqgate ready" line is logged and every port of the role accepts connections."""
        ports = {
            "all": [self.namesrv_port, self.broker_port],
            "namesrv": [self.namesrv_port],
            "broker": [self.broker_port],
        }[self.role]
        wait_logged(self.proc, self.log_path, b"rmqgate ready", ports, timeout, "rmqgate serve")

    def stop(self, timeout: float = 15.0) -> int | None:
        code = terminate(self.proc, timeout)
        self._log.close()
        return code
