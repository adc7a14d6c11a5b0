"""A slave's metadata sync across implementations: a stock Java 4.9.8 slave of an rmqgate master, and
an rmqgate slave of a Java 4.9.8 master. Each slave learns its master from the name server's
REGISTER_BROKER answer and copies its topics, subscription groups, consumer offsets and delay
offsets (SlaveSynchronize: 3 s after start, then every 10 s); what the slave then answers to the
GET_ALL_* requests for topics, groups and consumer offsets, and to QUERY_CONSUMER_OFFSET, must be the
master's, data versions included. Delay offsets are stored for the slave's next start (Java writes
delayOffset.json; its GET_ALL_DELAY_OFFSET answers the table its delay service started with), so
the stored copy is compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import ha, java
from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, free_broker_port, log_tail
from rmqgate.compat_tests.wire_client import WireClient, loads, wait_until
from rmqgate.store.meta import LmdbMetaStore
from rmqgate.wire.bodies import SubscriptionGroupConfig
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.message import iter_messages

pytestmark = [pytest.mark.slow, pytest.mark.java]

CLUSTER = "CompatCluster"
NAME = "sync-broker-a"
TOPIC, GROUP = "SlaveSyncT", "SlaveSyncG"
#: a Java master persists its delay offsets each second (4.9.8: every 10 s), so a test sees them soon
JAVA_MASTER_CONF = java.JAVA_BROKER_CONF + "flushDelayOffsetInterval=1000\n"


def get_all(addr: str, code: int) -> dict[str, Any] | None:
    with WireClient(addr, timeout=5) as c:
        resp = c.invoke(code)
    return loads(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else None


def query_offset(addr: str, queue_id: int) -> int | None:
    with WireClient(addr, timeout=5) as c:
        resp = c.invoke(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id}
        )
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else None


def seed(master: str) -> None:
    """A topic, a subscription group, two committed offsets and a delivered delay-level-1 message."""
    with WireClient(master) as c:
        assert c.create_topic(TOPIC, 4).code == ResponseCode.SUCCESS
        body = SubscriptionGroupConfig(group_name=GROUP, retry_max_times=3).to_json()
        assert (
            c.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body).code == ResponseCode.SUCCESS
        )
        for queue_id, offset in ((0, 5), (2, 7)):
            ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}
            assert c.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, ext).code == ResponseCode.SUCCESS
        assert c.send_message(TOPIC, b"later", properties={"DELAY": "1"}).code == ResponseCode.SUCCESS

    def delivered() -> bool:
        table = (get_all(master, RequestCode.GET_ALL_DELAY_OFFSET) or {}).get("offsetTable") or {}
        return table.get("1", 0) >= 1

    assert wait_until(delivered, timeout=30, interval=0.5), "the master never delivered the delayed message"


def mismatches(master: str, slave: str, stored_delay: Callable[[], dict[int, int]]) -> list[str]:
    """What the slave does not yet answer as the master does (empty: synced)."""
    out = []
    for code, table in (
        (RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable"),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable"),
    ):
        m, s = get_all(master, code), get_all(slave, code)
        if m is None or s is None:
            out.append(f"{code}: no answer")
            continue
        if m["dataVersion"] != s["dataVersion"]:
            out.append(f"{code}: data version {s['dataVersion']} != the master's {m['dataVersion']}")
        name = TOPIC if table == "topicConfigTable" else GROUP
        if s[table].get(name) != m[table].get(name):
            out.append(f"{code}: {name} is {s[table].get(name)}, the master's {m[table].get(name)}")
    key = f"{TOPIC}@{GROUP}"
    m, s = (
        get_all(master, RequestCode.GET_ALL_CONSUMER_OFFSET),
        get_all(slave, RequestCode.GET_ALL_CONSUMER_OFFSET),
    )
    mine, theirs = (
        ((s or {}).get("offsetTable") or {}).get(key),
        ((m or {}).get("offsetTable") or {}).get(key),
    )
    if mine is None or mine != theirs:
        out.append(f"consumer offsets: {key} is {mine}, the master's {theirs}")
    m = get_all(master, RequestCode.GET_ALL_DELAY_OFFSET)
    theirs = {int(k): v for k, v in ((m or {}).get("offsetTable") or {}).items()}
    if stored_delay() != theirs:
        out.append(f"stored delay offsets: {stored_delay()}, the master's {theirs}")
    if query_offset(slave, 0) != 5 or query_offset(slave, 2) != 7:
        out.append(f"QUERY_CONSUMER_OFFSET on the slave: {query_offset(slave, 0)}, {query_offset(slave, 2)}")
    return out


def java_stored_delay(store: Path) -> Callable[[], dict[int, int]]:
    def read() -> dict[int, int]:
        path = store / "config" / "delayOffset.json"
        text = path.read_text("utf-8") if path.is_file() else ""
        return {int(k): v for k, v in (loads(text).get("offsetTable") or {}).items()} if text.strip() else {}

    return read


def rmqgate_stored_delay(store: Path) -> Callable[[], dict[int, int]]:
    def read() -> dict[int, int]:
        meta = LmdbMetaStore(store / "meta")  # (LMDB: another process may read while the broker writes)
        try:
            return meta.delay_offsets()
        finally:
            meta.close()

    return read


def assert_synced(
    master: str, slave: str, stored_delay: Callable[[], dict[int, int]], logs: list[Path]
) -> None:
    last: list[list[str]] = [[]]

    def synced() -> bool:
        last[0] = mismatches(master, slave, stored_delay)
        return not last[0]

    tails = "\n".join(f"--- {p}\n{log_tail(p, 30)}" for p in logs)
    assert wait_until(synced, timeout=45, interval=0.5), f"slave not synced: {last[0]}\n{tails}"


@pytest.fixture
def jdk() -> None:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass


def test_java_slave_of_rmqgate_master(jdk: None, tmp_path: Path) -> None:
    (tmp_path / "gate").mkdir()
    gate = ServerProcess(tmp_path / "gate", conf=BROKER_CONF.replace("compat-broker-a", NAME))
    slave: java.JavaBroker | None = None
    try:
        gate.wait_ready()
        seed(gate.broker)
        slave = java.JavaBroker(
            tmp_path / "java-slave",
            gate.namesrv,
            cluster=CLUSTER,
            name=NAME,
            extra_conf=java.JAVA_BROKER_CONF + "brokerId=1\nbrokerRole=SLAVE\n",
        )
        slave.wait_ready()
        stored = java_stored_delay(tmp_path / "java-slave" / "store")
        assert_synced(gate.broker, slave.addr, stored, [gate.log_path, slave.log_path])
    finally:
        if slave is not None:
            slave.stop()
        gate.stop()


def test_rmqgate_slave_of_java_master(jdk: None, tmp_path: Path) -> None:
    ns = java.JavaNameServer(tmp_path / "namesrv")
    master: java.JavaBroker | None = None
    slave: ServerProcess | None = None
    try:
        ns.wait_ready()
        master = java.JavaBroker(
            tmp_path / "java-master", ns.addr, cluster=CLUSTER, name=NAME, extra_conf=JAVA_MASTER_CONF
        )
        master.wait_ready()
        seed(master.addr)
        conf = BROKER_CONF.replace("compat-broker-a", NAME).replace("brokerId = 0", "brokerId = 1")
        (tmp_path / "gate-slave").mkdir()
        slave = ServerProcess(
            tmp_path / "gate-slave", role="broker", namesrv_addr=ns.addr, conf=conf + "brokerRole = SLAVE\n"
        )
        slave.wait_ready()
        stored = rmqgate_stored_delay(slave.store)
        assert_synced(master.addr, slave.broker, stored, [master.log_path, slave.log_path])
    finally:
        for server in (slave, master, ns):
            if server is not None:
                server.stop()


def group_offsets(addr: str, topic: str, group: str) -> int:
    """The group's committed offsets of the topic's four queues, summed (a queue without one: 0)."""
    total = 0
    with WireClient(addr, timeout=5) as c:
        for queue_id in range(4):
            resp = c.invoke(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": topic, "queueId": queue_id, "setZeroIfNotFound": False},
            )
            total += int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else 0
    return total


def test_java_consumer_across_master_stop_and_return(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A stock 4.9.8 push consumer on an rmqgate master + slave: while the master is gone it commits
    its offsets to the slave (which stores them); when the master is back it pulls there again (the
    slave's answers suggest brokerId 0) and commits its offsets to the master; nothing is delivered
    twice across both switches."""
    reason = java.missing()
    if reason:
        pytest.fail(reason)
    classes = java.compiled_clients(4, tmp_path_factory.mktemp("failover-classes"), ("HaConsume",))
    pair = ha.Pair(tmp_path)
    try:
        pair.start_namesrv("rmqgate")
        port = free_broker_port()
        master = pair.start_broker("rmqgate", "master", broker_id=0, role="ASYNC_MASTER", port=port)
        slave = pair.start_broker("rmqgate", "slave", broker_id=1, role="SLAVE", ha_master=master.ha_addr)
        pair.wait_registered({"0": master.addr, "1": slave.addr})
        topic, group = "FailoverT", "FailoverG"
        ha.create_topic_seen_by_slave(pair, master, slave, topic)
        expect = tmp_path / "expect.json"
        consumer = java.java_client(
            4,
            classes,
            "HaConsume",
            {
                "topic": topic,
                "group": group,
                "expectFile": str(expect),
                "timeoutMs": 150_000,
                "namesrv": pair.namesrv,
            },
            log_dir=tmp_path / "client-logs",
            timeout=170,
        )
        first = [f"before-{i}" for i in range(8)]
        second = [f"after-{i}" for i in range(8)]
        with WireClient(master.addr) as c:
            for i, body in enumerate(first):
                assert c.send_message(topic, body.encode(), queue_id=i % 4).code == ResponseCode.SUCCESS
        consumed = wait_until(lambda: group_offsets(master.addr, topic, group) == 8, timeout=60, interval=0.5)
        assert consumed, f"the consumer never committed the first messages to the master\n{pair.log_tails()}"

        master.stop()  # unregisters: the route lists the slave alone
        pair.wait_registered({"1": slave.addr})
        on_slave = wait_until(lambda: group_offsets(slave.addr, topic, group) == 8, timeout=30, interval=0.5)
        assert on_slave, f"the consumer never committed its offsets to the slave\n{pair.log_tails()}"

        master = pair.start_broker(
            "rmqgate", "master-again", broker_id=0, role="ASYNC_MASTER", port=port, store=master.store
        )
        pair.wait_registered({"0": master.addr, "1": slave.addr})
        with WireClient(master.addr) as c:
            for i, body in enumerate(second):
                assert c.send_message(topic, body.encode(), queue_id=i % 4).code == ResponseCode.SUCCESS
        expect.write_text(json.dumps(first + second))
        result = consumer.result()
        assert result["checks"] and result["checks"][0]["ok"], (
            f"not every message arrived: {result}\n{pair.log_tails()}"
        )
        bodies = [row[0] for row in result["data"]["got"]]
        assert sorted(bodies) == sorted(first + second), f"delivered twice or missing: {bodies}"
        # the consumer's shutdown committed to the master again
        assert group_offsets(master.addr, topic, group) == 16
    finally:
        pair.close()


def pull_answers(kind: str, workdir: Path) -> dict[str, tuple[int, str | None, str | None, int]]:
    """A master + slave of ``kind`` with four messages in queue 0: (code, suggestWhichBrokerId,
    nextBeginOffset, messages) of pulls from either, as slaveReadEnable and
    accessMessageInMemoryMaxRatio change (UPDATE_BROKER_CONFIG)."""
    workdir.mkdir(parents=True)
    pair = ha.Pair(workdir)
    try:
        pair.start_namesrv(kind)
        master = pair.start_broker(kind, "master", broker_id=0, role="ASYNC_MASTER")
        slave = pair.start_broker(kind, "slave", broker_id=1, role="SLAVE", ha_master=master.ha_addr)
        pair.wait_registered({"0": master.addr, "1": slave.addr})
        topic, group = "SlavePullT", "SlavePullG"
        ha.create_topic_seen_by_slave(pair, master, slave, topic)
        with WireClient(master.addr) as c:
            for i in range(4):
                assert c.send_message(topic, f"m{i}".encode()).code == ResponseCode.SUCCESS

        def slave_has_all() -> bool:
            with WireClient(slave.addr) as c:
                resp = c.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
            return resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "4"

        assert wait_until(slave_has_all, timeout=30, interval=0.2), f"not replicated\n{pair.log_tails()}"

        def ask(addr: str, offset: int) -> tuple[int, str | None, str | None, int]:
            with WireClient(addr) as c:
                resp = c.pull(group, topic, 0, offset, sys_flag=4, subscription="*")
            ext = resp.ext_fields or {}
            count = len(list(iter_messages(resp.body))) if resp.code == ResponseCode.SUCCESS else 0
            return resp.code, ext.get("suggestWhichBrokerId"), ext.get("nextBeginOffset"), count

        def configure(addr: str, text: str) -> None:
            with WireClient(addr) as c:
                assert (
                    c.invoke(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()).code
                    == ResponseCode.SUCCESS
                )

        answers = {
            "slave, slaveReadEnable off": ask(slave.addr, 0),
            "slave, offset past the end": ask(slave.addr, 100),
        }
        configure(slave.addr, "slaveReadEnable=true\n")
        answers["slave, slaveReadEnable on"] = ask(slave.addr, 1)
        configure(master.addr, "slaveReadEnable=true\naccessMessageInMemoryMaxRatio=0\n")
        answers["master, consumer behind"] = ask(master.addr, 0)
        configure(master.addr, "accessMessageInMemoryMaxRatio=40\n")
        answers["master, consumer not behind"] = ask(master.addr, 0)
        configure(master.addr, "slaveReadEnable=false\naccessMessageInMemoryMaxRatio=0\n")
        answers["master, slaveReadEnable off"] = ask(master.addr, 0)
        return answers
    finally:
        pair.close()


def test_pull_answers_of_master_and_slave_as_java(tmp_path: Path) -> None:
    """Which broker a pull's answer suggests, and what a slave answers, on a Java 4.9.8 pair and an
    rmqgate pair alike. A slave with slaveReadEnable off serves the pull (Java's SLAVE branch sets
    PULL_RETRY_IMMEDIATELY, which the store status' code then replaces) and sends the consumer to
    the master."""
    reason = java.missing()
    if reason:
        pytest.fail(reason)
    on_java = pull_answers("java", tmp_path / "java")
    on_gate = pull_answers("rmqgate", tmp_path / "rmqgate")
    assert on_gate == on_java, f"rmqgate {on_gate}\njava    {on_java}"
    assert on_java["slave, slaveReadEnable off"][:2] == (ResponseCode.SUCCESS, "0")
