"""Helpers for the orderly / transaction / retry / delay compat modules.

``FeatureServer`` runs its own ``rmqgate serve --conf broker.conf`` (free ports, temp store) with the
short timeouts these flows need, set through broker.conf keys: transactionTimeOut,
transactionCheckInterval, transactionCheckMax, messageDelayLevel and
rocketmq.broker.rebalance.lockMaxLiveTime. It can be stopped and started again on the same ports
and store (restart tests). The client flows run in the background (``drivers.Background``), so
several clients can overlap (a consumer joining or leaving mid-stream).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import (
    CPP_FLOWS,
    DRIVER_TIMEOUT,
    TX_DRIVER,
    Background,
    cpp_env,
    kill_all,
    run_cpp,
)
from rmqgate.compat_tests.servers import (
    STARTUP_TIMEOUT,
    ServerProcess,
    discover_broker,
    free_broker_port,
    free_port,
    log_tail,
)
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic
from rmqgate.wire.codes import RequestCode

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
    """``rmqgate serve`` (both roles) with a broker.conf; each ``start`` is a ``ServerProcess`` on the
    same ports and store, logging to a file of its own, and returns once the broker is registered."""

    def __init__(self, workdir: Path, conf: str = FEATURE_CONF) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.conf = conf
        self.namesrv_port = free_port()
        self.broker_port = free_broker_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.broker = f"127.0.0.1:{self.broker_port}"
        self.process: ServerProcess | None = None
        self.starts = 0

    def start(self, timeout: float = STARTUP_TIMEOUT) -> FeatureServer:
        self.starts += 1
        self.process = ServerProcess(
            self.workdir,
            conf=self.conf,
            namesrv_port=self.namesrv_port,
            broker_port=self.broker_port,
            log_name=f"rmqgate-{self.starts}.log",
        )
        log_path = self.process.log_path
        try:
            self.process.wait_ready(timeout)  # (its error carries the log)
            try:
                discover_broker(self.namesrv, timeout)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}:\n{log_tail(log_path)}") from None
        except BaseException:
            self.stop()  # a server that never came up is not left running
            raise
        return self

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (SIGKILL after ``timeout``); the exit code, None if not running."""
        process, self.process = self.process, None
        return None if process is None else process.stop(timeout)

    def create_topic(self, name: str, queues: int = 4, **kw: Any) -> str:
        return create_routed_topic(self.broker, self.namesrv, name, queues, **kw)


#: FEATURE_CONF's settings for the stock Java 4.9.8 broker: the suite's Java broker.conf plus the
#: flows' own. Its lock lifetime is the system property rocketmq.broker.rebalance.lockMaxLiveTime,
#: whose default is FEATURE_CONF's 60000 ms.
JAVA_FEATURE_CONF = java.JAVA_BROKER_CONF + f"transactionCheckMax=5\nmessageDelayLevel={DELAY_LEVELS}\n"


class JavaFeatureServer:
    """The stock Java 4.9.8 name server + broker (``--target java``) with FEATURE_CONF's settings and
    names, in FeatureServer's place: ``start`` again serves the same store on the same ports."""

    def __init__(self, workdir: Path, extra_conf: str = "") -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.conf = JAVA_FEATURE_CONF + extra_conf
        self.namesrv_port = free_port()
        self.broker_port = free_broker_port()  # its VIP and HA neighbours free too
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.broker = f"127.0.0.1:{self.broker_port}"
        self.servers: list[java.JavaServer] = []
        self.starts = 0

    def start(self, timeout: float = STARTUP_TIMEOUT) -> JavaFeatureServer:
        self.starts += 1
        try:
            namesrv = java.JavaNameServer(self.workdir / f"namesrv-{self.starts}", self.namesrv_port)
            self.servers.append(namesrv)
            namesrv.wait_ready(timeout)
            broker = java.JavaBroker(
                self.workdir / "broker", self.namesrv, cluster="FlowCluster", name="flow-broker-a",
                port=self.broker_port, extra_conf=self.conf,
            )  # fmt: skip
            self.servers.append(broker)
            broker.wait_ready(timeout)
            discover_broker(self.namesrv, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM to the broker, then the name server; 0 when both ended by it (a JVM that ran its
        shutdown hooks exits with 143), else the first other exit code; None if not running."""
        servers, self.servers = self.servers, []
        codes = []
        for server in reversed(servers):
            server.stop(timeout)
            codes.append(server.proc.returncode)
        bad = [c for c in codes if c not in (0, 143)]
        return None if not servers else (bad[0] if bad else 0)

    create_topic = FeatureServer.create_topic


def feature_server(
    config: pytest.Config, workdir: Path, extra_conf: str = ""
) -> FeatureServer | JavaFeatureServer:
    """The flows' server for the suite's target: rmqgate (FeatureServer) or, with ``--target java``,
    the stock Java pair (JavaFeatureServer); ``extra_conf`` (broker.conf lines) overrides FEATURE_CONF.
    Not started."""
    if config.getoption("--target") == "java" and not config.getoption("--namesrv"):
        return JavaFeatureServer(workdir, extra_conf)
    return FeatureServer(workdir, FEATURE_CONF + extra_conf)


def consumer_count(broker: str, group: str) -> int:
    """How many consumers of ``group`` are registered with ``broker`` (GET_CONSUMER_LIST_BY_GROUP). A
    test waits on it rather than sleeping until a consumer it started is up."""
    with WireClient(broker) as c:
        resp = c.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if resp.code != 0:
        return 0
    return len(json.loads(resp.body or b"{}").get("consumerIdList") or [])


@pytest.fixture(autouse=True)
def no_leftover_clients() -> Iterator[None]:
    """Kills the client drivers a test left running (autouse in the test modules that import it)."""
    yield
    kill_all()


def feature_server_fixture(name: str) -> Any:
    """A module-scoped ``flow_server`` fixture: one FeatureServer in a temp dir called ``name``."""

    @pytest.fixture(scope="module")
    def flow_server(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[FeatureServer | JavaFeatureServer]:
        server = feature_server(request.config, tmp_path_factory.mktemp(name)).start()
        try:
            yield server
        finally:
            server.stop()

    return flow_server


def cpp_flow(args: dict[str, Any], home: Path, timeout: float = DRIVER_TIMEOUT) -> Background:
    """cpp_flows.py (rocketmq-python-cvs) in the background."""
    cmd = [sys.executable, str(CPP_FLOWS), json.dumps(args)]
    return Background(cmd, cpp_env(home), home, f"cpp_flows {args.get('scenario')}", timeout)


def cpp_produce(args: dict[str, Any], home: Path, timeout: float = DRIVER_TIMEOUT) -> dict[str, Any]:
    """cpp_driver.py produce (rocketmq-python-cvs)."""
    return run_cpp({"scenario": "produce", **args}, home, timeout=timeout)


def tx_produce(args: dict[str, Any], home: Path, timeout: float = DRIVER_TIMEOUT) -> Background:
    """tx_driver.py on rocketmq-client-python 2.0.0 in the background."""
    cmd = [sys.executable, str(TX_DRIVER), json.dumps(args)]
    env = cpp_env(home, "rocketmq-client-python200")
    return Background(cmd, env, home, "tx_driver (rocketmq-client-python 2.0.0)", timeout)
