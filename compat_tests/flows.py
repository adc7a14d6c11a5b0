"""Helpers for the orderly / transaction / retry / delay compat modules.

``FeatureServer`` runs its own ``rmqgate serve --conf broker.conf`` (free ports, temp store) with the
short timeouts these flows need, set through broker.conf keys: transactionTimeOut,
transactionCheckInterval, transactionCheckMax, messageDelayLevel and
rocketmq.broker.rebalance.lockMaxLiveTime. It can be stopped and started again on the same ports
and store (restart tests). ``Background`` runs a client driver in a subprocess without waiting, so
several clients can overlap (a consumer joining or leaving mid-stream).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.drivers import NODE_DIR, DriverError, client_target, node_binary
from rmqgate.compat_tests.servers import free_port, port_open
from rmqgate.compat_tests.wire_client import WireClient, wait_until

CLIENTS_DIR = Path(__file__).resolve().parent / "clients"
CPP_FLOWS = CLIENTS_DIR / "cpp_flows.py"
CPP_DRIVER = CLIENTS_DIR / "cpp_driver.py"
TX_DRIVER = CLIENTS_DIR / "tx_driver.py"

#: Level 1 = 1 s, level 2 = 2 s, every other level 1 s (retries: level 3 + reconsumeTimes).
DELAY_LEVELS = "1s 2s " + " ".join(["1s"] * 16)

FEATURE_CONF = f"""\
brokerClusterName = FlowCluster
brokerName = flow-broker-a
brokerId = 0
brokerIP1 = 127.0.0.1
autoCreateTopicEnable = true
autoCreateSubscriptionGroup = true
defaultTopicQueueNums = 4
flushDiskType = ASYNC_FLUSH
transactionTimeOut = 1000
transactionCheckInterval = 1000
transactionCheckMax = 5
messageDelayLevel = {DELAY_LEVELS}
rocketmq.broker.rebalance.lockMaxLiveTime = 60000
"""


class FeatureServer:
    """``rmqgate serve`` (both roles) on fixed free ports with a broker.conf; restartable."""

    def __init__(self, workdir: Path, conf: str = FEATURE_CONF) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.store = workdir / "store"
        self.conf_path = workdir / "broker.conf"
        self.conf_path.write_text(conf)
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "rmqgate.log"
        self.starts = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self, timeout: float = 30.0) -> FeatureServer:
        self.starts += 1
        log = (self.workdir / f"rmqgate-{self.starts}.log").open("wb")
        self.log_path = Path(log.name)
        args = [
            sys.executable, "-m", "rmqgate.tools.cli", "serve",
            "--store", str(self.store), "--conf", str(self.conf_path),
            "--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.broker_port),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rmqgate serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            if (
                b"rmqgate ready" in self.log_path.read_bytes()
                and port_open(self.namesrv_port)
                and port_open(self.broker_port)
            ):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"rmqgate serve not ready after {timeout} s:\n{self.log_tail()}")

        def registered() -> bool:
            try:
                with WireClient(self.namesrv, timeout=3) as c:
                    return bool(c.cluster_info().get("brokerAddrTable") or {})
            except (OSError, AssertionError, ValueError):
                return False

        if not wait_until(registered, timeout=timeout, interval=0.1):
            raise RuntimeError(f"broker never registered:\n{self.log_tail()}")
        return self

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def log_tail(self, lines: int = 120) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def create_topic(self, name: str, queues: int = 4, **kw: Any) -> str:
        with WireClient(self.broker) as c:
            resp = c.create_topic(name, queues, **kw)
            assert resp.code == 0, f"UPDATE_AND_CREATE_TOPIC {name}: {resp!r}"
        with WireClient(self.namesrv) as ns:
            assert wait_until(lambda: ns.route(name).code == 0, timeout=40, interval=0.1), (
                f"no route for {name}"
            )
        return name


def _parse(out: str, err: str, code: int | None, what: str) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise DriverError(
            f"{what} produced no result (exit {code})\n--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"
        )
    data = json.loads(lines[-1][len("RESULT ") :])
    if "exception" in data:
        raise DriverError(f"{what} raised {data['exception']}\n{data.get('traceback', '')}\n{err[-2000:]}")
    return data


_LIVE: list[Background] = []


def kill_all() -> None:
    """Kill the drivers still running (a test that failed before collecting them)."""
    while _LIVE:
        _LIVE[-1].kill()


@pytest.fixture(autouse=True)
def no_leftover_clients() -> Iterator[None]:
    """Kills the client drivers a test left running (autouse in the test modules that import it)."""
    yield
    kill_all()


def feature_server_fixture(name: str) -> Any:
    """A module-scoped ``flow_server`` fixture: one FeatureServer in a temp dir called ``name``."""

    @pytest.fixture(scope="module")
    def flow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FeatureServer]:
        server = FeatureServer(tmp_path_factory.mktemp(name)).start()
        try:
            yield server
        finally:
            server.stop()

    return flow_server


class Background:
    """A driver subprocess started now, its ``RESULT`` collected by ``result()``."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        _LIVE.append(self)

    def result(self) -> dict[str, Any]:
        left = max(1.0, self.timeout - (time.monotonic() - self.started))
        try:
            out, err = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            self._forget()
            raise DriverError(
                f"{self.what} timed out after {self.timeout} s\n{out[-3000:]}\n{err[-3000:]}"
            ) from None
        self._forget()
        return _parse(out, err, self.proc.returncode, self.what)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._forget()

    def _forget(self) -> None:
        if self in _LIVE:
            _LIVE.remove(self)


def cpp_env(home: Path, client: str | None = None) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if client is not None:
        env["PYTHONPATH"] = str(client_target(client))
    return env


def cpp_flow(args: dict[str, Any], home: Path, timeout: float = 90) -> Background:
    """cpp_flows.py (rocketmq-python-cvs) in the background."""
    cmd = [sys.executable, str(CPP_FLOWS), json.dumps(args)]
    return Background(cmd, cpp_env(home), home, f"cpp_flows {args.get('scenario')}", timeout)


def cpp_produce(args: dict[str, Any], home: Path, timeout: float = 60) -> dict[str, Any]:
    """cpp_driver.py produce (rocketmq-python-cvs). Once in a while the C++ producer's first route
    lookup fails ("No route info of this topic") on a route the name server has: one retry."""
    cmd = [sys.executable, str(CPP_DRIVER), json.dumps({"scenario": "produce", **args})]
    try:
        return Background(cmd, cpp_env(home), home, "cpp_driver produce", timeout).result()
    except DriverError as exc:
        if "No route info of this topic" not in str(exc):
            raise
        time.sleep(1.0)
        return Background(cmd, cpp_env(home), home, "cpp_driver produce (retry)", timeout).result()


def tx_produce(args: dict[str, Any], home: Path, timeout: float = 60) -> Background:
    """tx_driver.py on rocketmq-client-python 2.0.0 in the background."""
    cmd = [sys.executable, str(TX_DRIVER), json.dumps(args)]
    env = cpp_env(home, "rocketmq-client-python200")
    return Background(cmd, env, home, "tx_driver (rocketmq-client-python 2.0.0)", timeout)


def node_flow(script: str, args: dict[str, Any], home: Path, timeout: float = 90) -> Background:
    if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        raise DriverError(f"ali-ons is not installed: run `npm ci` in {NODE_DIR} (make setup does)")
    cmd = [node_binary(), str(NODE_DIR / script), json.dumps(args)]
    return Background(cmd, dict(os.environ, HOME=str(home)), NODE_DIR, f"node {script}", timeout)
