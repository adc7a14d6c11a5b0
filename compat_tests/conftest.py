"""Compat suite set-up: a name server + broker to test against, and per-test unique names.

``--namesrv HOST:PORT`` (or env RMQ_NAMESRV) points the suite at a running cluster — rmqgate or an
Apache RocketMQ 4.9 name server + broker; ``--target java`` starts the stock 4.9.8 name server and
broker (compat_tests/java.py) and runs the suite against them. Otherwise ``rmqgate serve`` is
started on free ports with a temporary store and a broker.conf, and stopped with SIGTERM at the
end. Logs are dumped in the summary when a test failed. Assertions use only the protocol and
client-visible behaviour. ``java_cluster`` is the stock pair for tests that compare both brokers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, discover_broker, log_tail
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic, wait_until
from rmqgate.wire.codes import RequestCode


@dataclasses.dataclass
class Cluster:
    namesrv: str  # "host:port"
    broker: str  # master address of the broker under test
    broker_name: str
    cluster_name: str
    started_here: bool  # True when the suite started rmqgate itself
    log_path: Path | None = None
    store: Path | None = None

    def namesrv_client(self, **kw: object) -> WireClient:
        return WireClient(self.namesrv, **kw)  # type: ignore[arg-type]

    def broker_client(self, **kw: object) -> WireClient:
        return WireClient(self.broker, **kw)  # type: ignore[arg-type]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "RocketMQ compatibility suite")
    group.addoption(
        "--namesrv",
        default=os.environ.get("RMQ_NAMESRV"),
        help="name server HOST:PORT to test against (env RMQ_NAMESRV); default: start `rmqgate serve`",
    )
    group.addoption(
        "--target",
        choices=("rmqgate", "java"),
        default=os.environ.get("RMQ_TARGET", "rmqgate"),
        help="without --namesrv: start `rmqgate serve` (default) or the stock Java 4.9.8 name server + broker",
    )


_STARTED: list[ServerProcess] = []
_JAVA_STARTED: list[java.JavaServer] = []


def start_java_cluster(
    workdir: Path, *, extra_conf: str = java.JAVA_BROKER_CONF, home: Path | None = None
) -> tuple[Cluster, list[java.JavaServer]]:
    """A stock 4.9.8 name server and broker on free ports, ready; the caller stops both. ``home``:
    the broker's ROCKETMQ_HOME (its conf/, e.g. an ACL broker's plain_acl.yml)."""
    reason = java.missing()
    if reason:
        raise RuntimeError(reason)
    namesrv = java.JavaNameServer(workdir / "namesrv")
    servers: list[java.JavaServer] = [namesrv]
    _JAVA_STARTED.append(namesrv)
    try:
        namesrv.wait_ready()
        broker = java.JavaBroker(workdir / "broker", namesrv.addr, extra_conf=extra_conf, home=home)
        servers.append(broker)
        _JAVA_STARTED.append(broker)
        broker.wait_ready()
        addr, name, cluster_name = discover_broker(namesrv.addr)
    except BaseException:
        for server in reversed(servers):
            server.stop()
        raise
    cluster = Cluster(
        namesrv.addr, addr, name, cluster_name, True, broker.log_path, workdir / "broker" / "store"
    )
    return cluster, servers


@pytest.fixture(scope="session")
def java_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The stock Java 4.9.8 name server + broker (session-wide), for tests that compare both."""
    cluster, servers = start_java_cluster(tmp_path_factory.mktemp("java-cluster"))
    try:
        yield cluster
    finally:
        for server in reversed(servers):
            server.stop()


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """compat_tests/java/*.java compiled against each Java client generation."""
    out = tmp_path_factory.mktemp("java-classes")
    return {v: java.compiled_clients(v, out) for v in java.CLIENT_VERSIONS}


@pytest.fixture(scope="session")
def broker_pair(
    request: pytest.FixtureRequest, java_cluster: Cluster, java_classes: dict[int, Path], tmp_path_factory
) -> java.BrokerPair:
    """rmqgate and the stock Java broker, each with its own name server, for side-by-side runs."""
    rmqgate = request.getfixturevalue("rmqgate_cluster")
    return java.BrokerPair(
        {"rmqgate": rmqgate, "java": java_cluster}, java_classes, tmp_path_factory.mktemp("java-client-logs")
    )


@contextlib.contextmanager
def started_pair(
    workdir: Path,
    java_classes: dict[int, Path],
    *,
    gate_conf: str = BROKER_CONF,
    gate_args: tuple[str, ...] = (),
    java_conf: str = java.JAVA_BROKER_CONF,
    java_home: Path | None = None,
) -> Iterator[java.BrokerPair]:
    """A new `rmqgate serve` (in ``workdir``/rmqgate, with ``gate_conf`` and ``gate_args``) and a new
    stock Java name server + broker (``java_conf``, ``java_home``), both empty; stopped after."""
    (workdir / "rmqgate").mkdir(exist_ok=True)
    server = ServerProcess(workdir / "rmqgate", conf=gate_conf, extra_args=gate_args)
    _STARTED.append(server)
    try:
        server.wait_ready()
        addr, name, cluster_name = discover_broker(server.namesrv)
        rmqgate = Cluster(server.namesrv, addr, name, cluster_name, True, server.log_path, server.store)
        java_pair, java_servers = start_java_cluster(workdir / "java", extra_conf=java_conf, home=java_home)
        try:
            yield java.BrokerPair(
                {"rmqgate": rmqgate, "java": java_pair}, java_classes, workdir / "client-logs"
            )
        finally:
            for jserver in reversed(java_servers):
                jserver.stop()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fresh_broker_pair(
    java_classes: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[java.BrokerPair]:
    """A new `rmqgate serve` and a new stock Java pair for one module, both empty: for comparisons of
    whole-cluster listings, which the session's brokers fill differently as other modules run."""
    with started_pair(tmp_path_factory.mktemp("fresh-pair"), java_classes) as pair:
        yield pair


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The name server + broker under test (session-wide)."""
    namesrv = request.config.getoption("--namesrv")
    if namesrv:
        addr, name, cluster_name = discover_broker(namesrv)
        yield Cluster(namesrv, addr, name, cluster_name, started_here=False)
        return
    if request.config.getoption("--target") == "java":
        yield request.getfixturevalue("java_cluster")
        return
    yield request.getfixturevalue("rmqgate_cluster")


@pytest.fixture(scope="session")
def rmqgate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`rmqgate serve` on free ports with a temporary store (session-wide)."""
    workdir = tmp_path_factory.mktemp("rmqgate-compat")  # pytest keeps only the last few runs
    server = ServerProcess(workdir)
    _STARTED.append(server)
    try:
        server.wait_ready()
        addr, name, cluster_name = discover_broker(server.namesrv)
        yield Cluster(server.namesrv, addr, name, cluster_name, True, server.log_path, server.store)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rmqgate_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Start extra `rmqgate serve` processes (mixed-cluster tests); all stopped at session end."""
    servers: list[ServerProcess] = []

    def start(**kw: object) -> ServerProcess:
        server = ServerProcess(tmp_path_factory.mktemp("rmqgate"), **kw)  # type: ignore[arg-type]
        servers.append(server)
        _STARTED.append(server)
        server.wait_ready()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def fresh_rmqgate(tmp_path: Path) -> Iterator[ServerProcess]:
    """A separate `rmqgate serve` (both roles, empty store) for this test only."""
    server = ServerProcess(tmp_path)
    _STARTED.append(server)
    try:
        server.wait_ready()
        discover_broker(server.namesrv)
        yield server
    finally:
        server.stop()
        _STARTED.remove(server)


@pytest.fixture
def uniq(request: pytest.FixtureRequest) -> object:
    """``uniq("topic")`` -> a fresh, valid topic/group name tied to this test."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    token = secrets.token_hex(3)

    def make(kind: str = "t") -> str:
        return f"ct_{kind}_{base}_{token}"[:120]

    return make


@pytest.fixture
def namesrv(cluster: Cluster) -> Iterator[WireClient]:
    with cluster.namesrv_client() as c:
        yield c


@pytest.fixture
def broker(cluster: Cluster) -> Iterator[WireClient]:
    with cluster.broker_client() as c:
        yield c


@pytest.fixture
def client_home(tmp_path: Path) -> Path:
    """A HOME for native clients (the C++ core writes logs under $HOME/logs)."""
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def make_topic(cluster: Cluster) -> object:
    """``make_topic(name, queues=4)``: UPDATE_AND_CREATE_TOPIC on the broker, then wait for the route."""

    def make(name: str, queues: int = 4, **kw: object) -> str:
        return create_routed_topic(cluster.broker, cluster.namesrv, name, queues, **kw)

    return make


@pytest.fixture
def dispatched(cluster: Cluster) -> object:
    """``dispatched(topic, queue_id, count, broker=None)``: wait until the queue's max offset reaches
    ``count``. A Java broker answers a send once the message is in its CommitLog and adds it to the
    consume queue just after (ReputMessageService, every millisecond), so a pull, an offset or the
    topic stats read right after the send may not see it yet; rmqgate does both before answering."""

    def wait(topic: str, queue_id: int, count: int, broker: str | None = None, timeout: float = 10) -> None:
        def max_offset() -> int:
            with WireClient(broker or cluster.broker) as c:
                resp = c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
            return int(resp.ext_fields["offset"]) if resp.code == 0 else -1

        got = wait_until(lambda: max_offset() >= count, timeout=timeout, interval=0.02)
        assert got, f"{topic} queue {queue_id}: max offset {max_offset()}, {count} messages sent"

    return wait


def _server_logs() -> list[tuple[str, str]]:
    """(title, log tail) of every server this process started."""
    logs = [
        (f"rmqgate serve --role {server.role} log (tail): {server.log_path}", log_tail(server.log_path))
        for server in _STARTED
    ]
    logs += [
        (f"Java {jserver.launcher} log (tail): {jserver.log_path}", log_tail(jserver.log_path, 60))
        for jserver in _JAVA_STARTED
    ]
    return logs


#: server logs of pytest-xdist workers that had a failure, for the controller's summary
_WORKER_LOGS: list[tuple[str, str]] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under pytest-xdist a worker's tables and server logs go to the controller, which prints the
    summary (``workeroutput`` exists only in a worker)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is None:
        return
    workeroutput["java_matrix"] = java.MATRIX
    workeroutput["mqadmin"] = java.MQADMIN
    workeroutput["server_logs"] = _server_logs() if session.testsfailed else []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    out = getattr(node, "workeroutput", None) or {}
    java.MATRIX.extend(out.get("java_matrix", []))
    java.MQADMIN.extend(out.get("mqadmin", []))
    _WORKER_LOGS.extend(tuple(log) for log in out.get("server_logs", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if java.MATRIX:
        terminalreporter.write_sep("=", "Java client programs: checks held on each broker")
        for line in java.matrix_table():
            terminalreporter.write_line(line)
    if java.MQADMIN:
        terminalreporter.write_sep("=", "stock mqadmin commands: rmqgate vs the Java name server and broker")
        for line in java.mqadmin_table():
            terminalreporter.write_line(line)
    if not (terminalreporter.stats.get("failed") or terminalreporter.stats.get("error")):
        return
    for title, tail in _server_logs() + _WORKER_LOGS:
        terminalreporter.write_sep("=", title)
        terminalreporter.write_line(tail)
