"""Mixed clusters with the stock Java 4.9.8 servers: one cluster, one rmqgate broker and one Java
broker, registered with rmqgate's name server (``--role namesrv``) or with Java's. One topic lives on
both brokers; stock Java clients (4.9.8 and 5.3.3, both header serializations) route over both,
send to the queues of both and consume every message from both (compat_tests/java/CrossBroker.java).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import DriverError
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, log_tail
from rmqgate.compat_tests.wire_client import WireClient, cluster_masters, loads, wait_until
from rmqgate.wire.codes import ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.java]

CLUSTER = "MixedCluster"
JAVA_BROKER = "mixed-java-a"
GATE_BROKER = "mixed-rmqgate-b"


@dataclasses.dataclass
class Mixed:
    """A name server with a Java broker and an rmqgate broker of one cluster registered."""

    namesrv_kind: str  # "rmqgate" or "java"
    namesrv: str
    brokers: dict[str, str]  # brokerName -> address
    logs: list[Path]

    def log_tails(self) -> str:
        return "\n".join(f"--- {path}\n{log_tail(path, 40)}" for path in self.logs)


@pytest.fixture(scope="module", params=["rmqgate", "java"], ids=lambda k: f"{k}-namesrv")
def mixed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass
    workdir = tmp_path_factory.mktemp(f"mixed-{request.param}")
    stops: list[object] = []
    try:
        if request.param == "rmqgate":
            (workdir / "namesrv").mkdir()
            ns_proc = ServerProcess(workdir / "namesrv", role="namesrv")
            stops.append(ns_proc)
            ns_proc.wait_ready()
            namesrv, ns_log = ns_proc.namesrv, ns_proc.log_path
        else:
            java_ns = java.JavaNameServer(workdir / "namesrv")
            stops.append(java_ns)
            java_ns.wait_ready()
            namesrv, ns_log = java_ns.addr, java_ns.log_path
        jbroker = java.JavaBroker(workdir / "java-broker", namesrv, name=JAVA_BROKER, cluster=CLUSTER)
        stops.append(jbroker)
        conf = BROKER_CONF.replace("compat-broker-a", GATE_BROKER).replace("CompatCluster", CLUSTER)
        (workdir / "rmqgate-broker").mkdir()
        gate = ServerProcess(workdir / "rmqgate-broker", role="broker", namesrv_addr=namesrv, conf=conf)
        stops.append(gate)
        gate.wait_ready()
        jbroker.wait_ready()
        want = {JAVA_BROKER: jbroker.addr, GATE_BROKER: gate.broker}
        assert wait_until(lambda: cluster_masters(namesrv, CLUSTER) == want, timeout=30), (
            f"both brokers never registered with the {request.param} name server: {cluster_masters(namesrv, CLUSTER)}"
        )
        yield Mixed(request.param, namesrv, want, [ns_log, jbroker.log_path, gate.log_path])
    finally:
        for server in reversed(stops):
            server.stop()  # type: ignore[attr-defined]


def route_brokers(namesrv: str, topic: str) -> set[str] | None:
    """The brokerNames the name server routes ``topic`` to (None: no route)."""
    with WireClient(namesrv) as ns:
        resp = ns.route(topic)
    if resp.code != ResponseCode.SUCCESS:
        return None
    return {bd["brokerName"] for bd in loads(resp.body)["brokerDatas"]}


def create_on_both(mixed: Mixed, topic: str, queues: int = 4) -> dict:
    """The topic created on each broker; the name server's route then lists both brokerDatas."""
    for name, addr in mixed.brokers.items():
        with WireClient(addr) as b:
            resp = b.create_topic(topic, queues)
        assert resp.code == ResponseCode.SUCCESS, f"UPDATE_AND_CREATE_TOPIC on {name}: {resp!r}"

    def both_routed() -> dict | None:
        with WireClient(mixed.namesrv) as ns:
            resp = ns.route(topic)
        if resp.code != ResponseCode.SUCCESS:
            return None
        route = loads(resp.body)
        return route if {bd["brokerName"] for bd in route["brokerDatas"]} == set(mixed.brokers) else None

    route = wait_until(both_routed, timeout=30, interval=0.2)
    assert route, f"{topic} never routed to both brokers by the {mixed.namesrv_kind} name server"
    return route


def test_route_lists_both_brokers(mixed: Mixed, uniq) -> None:
    topic = uniq()
    route = create_on_both(mixed, topic, 4)
    addrs = {bd["brokerName"]: (bd["cluster"], bd["brokerAddrs"]) for bd in route["brokerDatas"]}
    assert addrs == {name: (CLUSTER, {"0": addr}) for name, addr in mixed.brokers.items()}
    queues = {
        q["brokerName"]: (q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]
    }
    assert queues == dict.fromkeys(mixed.brokers, (4, 4, 6))


def run_cross_broker(
    mixed: Mixed, classes: Path, topic: str, group: str, log_dir: Path, version: int, serialization: str,
    *, orderly: bool = False,
) -> None:  # fmt: skip
    """CrossBroker.java on ``topic``; every one of its checks must hold."""
    args = {"namesrv": mixed.namesrv, "topic": topic, "group": group, "count": 16,
            "brokers": sorted(mixed.brokers), "orderly": orderly}  # fmt: skip
    proc = java.java_client(
        version, classes, "CrossBroker", args, serialization=serialization, log_dir=log_dir, timeout=120
    )
    try:
        result = proc.result()
    except DriverError as e:
        pytest.fail(f"{e}\n{mixed.log_tails()}")
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed and len(result["checks"]) == 8 + orderly, (
        java.detail({mixed.namesrv_kind + " namesrv": result}) + "\n" + mixed.log_tails()
    )
    assert set(result["data"]["sentPerBroker"]) == set(mixed.brokers)


@pytest.mark.parametrize("serialization", java.SERIALIZATIONS)
@pytest.mark.parametrize("version", java.CLIENT_VERSIONS, ids=lambda v: f"client{v}")
def test_java_clients_produce_and_consume_across_both_brokers(
    mixed: Mixed, java_classes: dict[int, Path], uniq, tmp_path: Path, version: int, serialization: str
) -> None:
    topic = uniq()
    create_on_both(mixed, topic, 4)
    run_cross_broker(mixed, java_classes[version], topic, uniq("cg"), tmp_path, version, serialization)


@pytest.mark.parametrize(("version", "serialization"), [(4, "JSON"), (5, "ROCKETMQ")])
def test_orderly_push_consumer_locks_queues_on_both_brokers(
    mixed: Mixed, java_classes: dict[int, Path], uniq, tmp_path: Path, version: int, serialization: str
) -> None:
    """An orderly push consumer locks its queues on each broker (LOCK_BATCH_MQ) before it consumes
    them, and gets every message from both, each queue in offset order."""
    topic = uniq()
    create_on_both(mixed, topic, 4)
    run_cross_broker(
        mixed, java_classes[version], topic, uniq("cg"), tmp_path, version, serialization, orderly=True
    )


@pytest.mark.parametrize("leaver", ["java", "java-rocketmq-headers", "rmqgate"])
def test_a_broker_shut_down_leaves_the_route(
    mixed: Mixed, uniq, tmp_path: Path, leaver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third broker of the cluster (a Java or an rmqgate one) joins and takes the topic too; on a
    clean shutdown it unregisters and closes its connection, and the name server routes the topic
    to the two left at once (not after the 120 s a silent broker takes to expire). One Java broker
    speaks ROCKETMQ headers to the name server (``-Drocketmq.serialize.type``, a JVM-wide setting)."""
    name = f"mixed-{leaver}-c"[:40]
    if leaver.startswith("java"):
        if leaver == "java-rocketmq-headers":
            monkeypatch.setenv("JAVA_OPTS", "-Drocketmq.serialize.type=ROCKETMQ")  # read by the launcher
        third: object = java.JavaBroker(tmp_path / "third", mixed.namesrv, name=name, cluster=CLUSTER)
    else:
        conf = BROKER_CONF.replace("compat-broker-a", name).replace("CompatCluster", CLUSTER)
        third = ServerProcess(tmp_path, role="broker", namesrv_addr=mixed.namesrv, conf=conf)
    topic = uniq()
    try:
        third.wait_ready()  # type: ignore[attr-defined]
        addr = third.addr if leaver.startswith("java") else third.broker  # type: ignore[attr-defined]
        assert wait_until(lambda: cluster_masters(mixed.namesrv, CLUSTER).get(name) == addr, timeout=30), (
            cluster_masters(mixed.namesrv, CLUSTER)
        )
        create_on_both(mixed, topic)
        with WireClient(addr) as b:
            assert b.create_topic(topic, 4).code == ResponseCode.SUCCESS
        three = {*mixed.brokers, name}
        assert wait_until(lambda: route_brokers(mixed.namesrv, topic) == three, timeout=30), route_brokers(
            mixed.namesrv, topic
        )
    finally:
        third.stop()  # type: ignore[attr-defined]
    assert wait_until(lambda: route_brokers(mixed.namesrv, topic) == set(mixed.brokers), timeout=15), (
        f"{name} still routed after its shutdown: {route_brokers(mixed.namesrv, topic)}\n{mixed.log_tails()}"
    )
    assert cluster_masters(mixed.namesrv, CLUSTER) == mixed.brokers


def test_mqadmin_lists_both_brokers_and_their_queues(mixed: Mixed, uniq, tmp_path: Path) -> None:
    """Stock mqadmin over the mixed cluster: clusterList reads both brokers' runtime info through
    the name server, topicStatus both brokers' queue offsets."""
    topic = uniq()
    create_on_both(mixed, topic, 4)
    for addr in mixed.brokers.values():
        with WireClient(addr) as b:
            for queue_id in (0, 0, 1):
                assert b.send_message(topic, b"m", queue_id=queue_id).code == ResponseCode.SUCCESS

    done = java.mqadmin(tmp_path, "clusterList", "-n", mixed.namesrv)
    assert done.returncode == 0 and "#Cluster Name" in done.stdout, done.stdout + done.stderr
    rows = {line.split()[1]: line.split() for line in done.stdout.splitlines() if line.startswith(CLUSTER)}
    assert {name: (row[2], row[3]) for name, row in rows.items()} == {
        name: ("0", addr) for name, addr in mixed.brokers.items()
    }, done.stdout

    done = java.mqadmin(tmp_path, "topicStatus", "-n", mixed.namesrv, "-t", topic)
    assert done.returncode == 0 and "#Max Offset" in done.stdout, done.stdout + done.stderr
    offsets = {
        (row[0], int(row[1])): (int(row[2]), int(row[3]))
        for row in (line.split() for line in done.stdout.splitlines())
        if row and row[0] in mixed.brokers
    }
    assert offsets == {(name, q): (0, {0: 2, 1: 1}.get(q, 0)) for name in mixed.brokers for q in range(4)}, (
        done.stdout
    )
