"""One broker per core: ``rmqgate serve --brokers N`` (N = 2 and 3) is one cluster of N brokers, and
stock Java clients use it as a Java multi-broker cluster. A topic made with ``mqadmin updateTopic -c``
gets queues on every broker; TBW102 is on every broker and a topic a producer's sends create lands on
the brokers they reach; the compat suite's Java programs (concurrent and orderly push with
rebalancing and committed offsets, transactions with check-back, delay levels, retry and DLQ, and
CrossBroker's produce/consume over every broker) pass every check on a topic spread over the N. With
N = 2 each program also runs, at the same time, on a stock Java 4.9.8 cluster of two brokers (one
name server), which must pass the same checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import DriverError
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, log_tail
from rmqgate.compat_tests.wire_client import WireClient, cluster_masters, loads, wait_until
from rmqgate.server.cluster import BROKER_PORT_STEP
from rmqgate.wire.codes import ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.java]

CLUSTER = "ScaleCluster"
#: Programs run on a topic of every broker, with their JSON arguments beyond topic and groups.
PROGRAMS: dict[str, dict[str, Any]] = {
    "PushConcurrent": {},
    "PushOrderly": {},
    "Transaction": {},
    "Delay": {},
    "RetryDlq": {},
    "CrossBroker": {"count": 16},
}


@dataclasses.dataclass
class Target:
    """A name server and the brokers of CLUSTER registered with it."""

    namesrv: str
    brokers: dict[str, str]  # brokerName -> address


@dataclasses.dataclass
class Scaled(Target):
    """``rmqgate serve --brokers N`` with every broker registered, and for N = 2 a Java cluster of two."""

    server: ServerProcess | None = None
    java: Target | None = None
    #: program -> {"rmqgate": result, "java": result (N = 2)}
    results: dict[str, dict[str, dict[str, Any] | Exception]] = dataclasses.field(default_factory=dict)

    def log_tail(self) -> str:
        return log_tail(self.server.log_path if self.server else None, 60)


def route(namesrv: str, topic: str) -> dict[str, Any] | None:
    with WireClient(namesrv) as ns:
        resp = ns.route(topic)
    return loads(resp.body) if resp.code == ResponseCode.SUCCESS else None


def queues_by_broker(namesrv: str, topic: str) -> dict[str, int]:
    got = route(namesrv, topic)
    return {q["brokerName"]: q["writeQueueNums"] for q in (got or {}).get("queueDatas", [])}


def create_on_every_broker(target: Target, topic: str, queues: int) -> None:
    for addr in target.brokers.values():
        with WireClient(addr) as b:
            assert b.create_topic(topic, queues).code == ResponseCode.SUCCESS
    want = dict.fromkeys(target.brokers, queues)
    assert wait_until(lambda: queues_by_broker(target.namesrv, topic) == want, timeout=30, interval=0.2)


def start_java_cluster(workdir: Path, count: int, stops: list[Any]) -> Target:
    """A stock Java name server and ``count`` Java brokers of CLUSTER (the suite's Java broker.conf)."""
    namesrv = java.JavaNameServer(workdir / "java-namesrv")
    stops.append(namesrv)
    namesrv.wait_ready()
    brokers = []
    for i in range(count):
        broker = java.JavaBroker(
            workdir / f"java-broker-{i}", namesrv.addr, name=f"scale-java-{i}", cluster=CLUSTER
        )
        stops.append(broker)
        brokers.append(broker)
    for broker in brokers:
        broker.wait_ready()
    want = {b.name: b.addr for b in brokers}
    assert wait_until(lambda: cluster_masters(namesrv.addr, CLUSTER) == want, timeout=60), cluster_masters(
        namesrv.addr, CLUSTER
    )
    return Target(namesrv.addr, want)


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"brokers{n}")
def scaled(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, java_classes: dict[int, Path]
) -> Iterator[Scaled]:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass
    count: int = request.param
    workdir = tmp_path_factory.mktemp(f"scaled{count}")
    conf = BROKER_CONF.replace("compat-broker-a", "scale").replace("CompatCluster", CLUSTER)
    stops: list[Any] = []
    try:
        server = ServerProcess(workdir, conf=conf, extra_args=("--brokers", str(count)))
        stops.append(server)
        server.wait_ready()
        want = {f"scale-{i}": f"127.0.0.1:{server.broker_port + BROKER_PORT_STEP * i}" for i in range(count)}
        assert wait_until(lambda: cluster_masters(server.namesrv, CLUSTER) == want, timeout=60), log_tail(
            server.log_path
        )
        scaled = Scaled(server.namesrv, want, server=server)
        if count == 2:
            scaled.java = start_java_cluster(workdir, count, stops)
        run_programs(scaled, workdir, java_classes[4])
        yield scaled
    finally:
        for server in reversed(stops):
            if isinstance(server, ServerProcess):
                server.stop(60)  # N brokers to flush
            else:
                server.stop()


#: Program JVMs running at once: on a loaded 2-core machine more of them starve one another past the
#: clients' timeouts (a producer's first heartbeat, 1 s after its start, must find the topic's route
#: for the brokers to know it when they check a transaction back).
AT_ONCE = 2


def run_programs(scaled: Scaled, workdir: Path, classes: Path) -> None:
    """Every program of PROGRAMS (client 4.x, JSON headers) on its own topic of 2 queues per broker,
    on rmqgate and on the Java cluster if there is one, AT_ONCE JVMs at a time; the results are
    kept for the tests below."""
    targets = {"rmqgate": scaled, **({"java": scaled.java} if scaled.java else {})}
    runs = [(main, kind) for main in sorted(PROGRAMS) for kind in targets]
    for wave in range(0, len(runs), AT_ONCE):
        started = {}
        for main, kind in runs[wave : wave + AT_ONCE]:
            target = targets[kind]
            topic = f"scale_{main}_{len(scaled.brokers)}"
            create_on_every_broker(target, topic, 2)
            args = {
                "namesrv": target.namesrv, "broker": next(iter(target.brokers.values())), "topic": topic,
                "queues": 2 * len(target.brokers), "brokers": sorted(target.brokers),
                "group": f"cg_{main}", "group2": f"cg2_{main}", "producerGroup": f"pg_{main}", **PROGRAMS[main],
            }  # fmt: skip
            log_dir = workdir / f"{main}-{kind}"
            started[main, kind] = java.java_client(4, classes, main, args, log_dir=log_dir, timeout=180)
        for (main, kind), proc in started.items():
            try:
                scaled.results.setdefault(main, {})[kind] = proc.result()
            except DriverError as e:
                scaled.results.setdefault(main, {})[kind] = e


def test_update_topic_on_the_cluster_puts_queues_on_every_broker(scaled: Scaled, tmp_path: Path) -> None:
    topic = f"scale_cluster_topic_{len(scaled.brokers)}"
    done = java.mqadmin(
        tmp_path, "updateTopic", "-n", scaled.namesrv, "-c", CLUSTER, "-t", topic, "-r", "3", "-w", "3"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    want = dict.fromkeys(scaled.brokers, 3)
    assert wait_until(lambda: queues_by_broker(scaled.namesrv, topic) == want, timeout=30, interval=0.2), (
        queues_by_broker(scaled.namesrv, topic)
    )
    listing = java.mqadmin(tmp_path, "clusterList", "-n", scaled.namesrv)
    assert listing.returncode == 0
    assert all(name in listing.stdout for name in scaled.brokers), listing.stdout


def test_auto_creation_from_tbw102_on_every_broker(scaled: Scaled) -> None:
    """TBW102 is routed on every broker; a send to a new topic on any of them creates it there with
    defaultTopicQueueNums queues (as a producer without the topic's route sends over TBW102's)."""
    assert queues_by_broker(scaled.namesrv, "TBW102").keys() == scaled.brokers.keys()
    topic = f"scale_auto_{len(scaled.brokers)}"
    assert route(scaled.namesrv, topic) is None
    for addr in scaled.brokers.values():
        with WireClient(addr) as b:
            resp = b.send_message(topic, b"auto")
            assert resp.code == ResponseCode.SUCCESS, resp
    want = dict.fromkeys(scaled.brokers, 4)
    assert wait_until(lambda: queues_by_broker(scaled.namesrv, topic) == want, timeout=30, interval=0.2)


@pytest.mark.parametrize("main", sorted(PROGRAMS))
def test_java_program_passes_on_a_topic_over_every_broker(scaled: Scaled, main: str) -> None:
    results = scaled.results[main]
    gate = results["rmqgate"]
    if isinstance(gate, Exception):
        pytest.fail(f"{gate}\n{scaled.log_tail()}")
    failed = [c for c in gate["checks"] if not c["ok"]]
    assert gate["checks"] and not failed, java.detail({f"rmqgate --brokers {len(scaled.brokers)}": gate})
    if "java" in results:  # the same checks hold on a Java cluster of as many brokers
        problems = java.compare_outcomes(results)
        assert not problems, "\n".join(problems) + "\n" + java.detail(results)
