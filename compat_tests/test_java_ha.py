"""Master/slave replication proved with stock Java 4.9.8 clients through a name server: a SYNC_MASTER
and its SLAVE of one brokerName, for each pairing of rmqgate and the stock Java broker. Sends answered
SEND_OK are on the slave when the master is killed with SIGKILL; the CommitLog files of both are
byte-identical over the replicated range; a Java push consumer then reads everything from the slave at
the same queue offsets; the master restarted on its store serves again. An empty slave attached late
starts at the master's last CommitLog file. The migration test runs the README's "Migrating a live
Java broker" recipe with producers and consumers running throughout.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.drivers import Background
from rmqgate.compat_tests.ha import BROKER_NAME, QUEUES, Broker, Pair, create_topic_seen_by_slave, has_topic
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic, runtime_info, wait_until
from rmqgate.wire.codes import RequestCode

pytestmark = [pytest.mark.slow, pytest.mark.java]

#: Messages each pairing sends before the master is killed.
COUNT = 200


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this module: a missing JDK is a failure, not a pass
    return java.compiled_clients(4, tmp_path_factory.mktemp("ha-classes"), ("HaProduce", "HaConsume"))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    p = Pair(tmp_path)
    try:
        yield p
    finally:
        p.close()


def client(classes: Path, pair: Pair, main: str, args: dict[str, Any], timeout: float = 120) -> Background:
    log_dir = pair.workdir / "client-logs"
    return java.java_client(
        4, classes, main, {**args, "namesrv": pair.namesrv}, log_dir=log_dir, timeout=timeout
    )


def max_phy_offset(addr: str) -> int:
    return int(runtime_info(addr)["commitLogMaxOffset"])


def ha_attached(master: Broker) -> bool:
    """Whether a connection to the master's HA port is established (the slave's HAClient is in): a
    SYNC_MASTER answers SLAVE_NOT_AVAILABLE until then. Read from /proc/net/tcp*, state 01."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == master.ha_port:
                    return True
    return False


def wait_ha_attached(pair: Pair, master: Broker) -> None:
    attached = wait_until(lambda: ha_attached(master), timeout=60, interval=0.2)
    assert attached, f"no slave connected to the master's HA port {master.ha_port}\n{pair.log_tails()}"


def committed_offsets(addr: str, topic: str, group: str) -> dict[int, int]:
    """QUERY_CONSUMER_OFFSET of each queue (-1: none committed)."""
    offsets = {}
    with WireClient(addr, timeout=5) as c:
        for q in range(QUEUES):
            header = {"consumerGroup": group, "topic": topic, "queueId": q}
            resp = c.invoke(RequestCode.QUERY_CONSUMER_OFFSET, header)
            offsets[q] = int(resp.ext_fields["offset"]) if resp.code == 0 else -1
    return offsets


def wait_sync_ok(pair: Pair, master: Broker) -> None:
    """Probe sends (to a topic of their own) until the SYNC_MASTER answers one SEND_OK: the slave is
    attached and has reported its offset. A Java slave reports it first haSendHeartbeatInterval (5 s)
    after connecting (HAClient.connectMaster sets lastWriteTimestamp), so a send in between waits for
    syncFlushTimeout (5 s) and is answered FLUSH_SLAVE_TIMEOUT."""
    wait_ha_attached(pair, master)

    def probe() -> bool:
        with WireClient(master.addr, timeout=15) as c:
            return c.send_message("HaProbe", b"probe", queue_id=0).code == 0

    assert wait_until(probe, timeout=60, interval=0.5), f"no SEND_OK from {master.addr}\n{pair.log_tails()}"


def sent_rows(result: dict[str, Any]) -> list[list[Any]]:
    """The producer's SEND_OK rows: [body, msgId, brokerName, queueId, queueOffset, offsetMsgId]."""
    return result["data"]["sent"]


def phy_offset(offset_msg_id: str) -> int:
    """The CommitLog offset in an offsetMsgId (store host, port, then the offset: 16 hex digits)."""
    return int(offset_msg_id[-16:], 16)


def by_position(rows: list[list[Any]], queue_col: int) -> dict[tuple[int, int], str]:
    """(queueId, queueOffset) -> body of each row."""
    return {(int(r[queue_col]), int(r[queue_col + 1])): r[0] for r in rows}


def read_range(path: Path, end: int) -> bytes:
    with path.open("rb") as f:
        return f.read(end)


def assert_same_commitlog(master: Broker, slave: Broker, end: int) -> None:
    """Both CommitLog files hold the same bytes over [0, end)."""
    m, s = read_range(master.commitlog(), end), read_range(slave.commitlog(), end)
    assert len(m) == len(s) == end, f"short CommitLog: master {len(m)}, slave {len(s)} of {end} bytes"
    if m != s:
        first = next(i for i in range(end) if m[i] != s[i])
        raise AssertionError(f"CommitLog bytes differ first at offset {first} of the {end} replicated")


def consume_all(
    classes: Path, pair: Pair, topic: str, group: str, bodies: list[str], grace_ms: int = 2000
) -> list[list[Any]]:
    """What a new push consumer of ``group`` got, once it has every one of ``bodies``."""
    expect = pair.workdir / f"expect-{group}-{len(bodies)}.json"
    expect.write_text(json.dumps(bodies))
    args = {"topic": topic, "group": group, "expectFile": str(expect), "graceMs": grace_ms}
    result = client(classes, pair, "HaConsume", args).result()
    assert result["checks"] and result["checks"][0]["ok"], (
        f"{group} did not get every message: {result}\n{pair.log_tails()}"
    )
    return result["data"]["got"]


#: (master, slave, name server) of each pairing rmqgate supports. HA_JAVA_BASELINE=1 adds the stock
#: Java master + Java slave, the reference these runs were written against (it passes them as well).
PAIRINGS = [
    pytest.param("rmqgate", "rmqgate", "rmqgate", id="rmqgate-master+rmqgate-slave"),
    pytest.param("rmqgate", "java", "java", id="rmqgate-master+java-slave"),
    pytest.param("java", "rmqgate", "java", id="java-master+rmqgate-slave"),
] + (
    [pytest.param("java", "java", "java", id="java-master+java-slave")]
    if os.environ.get("HA_JAVA_BASELINE")
    else []
)


@pytest.mark.parametrize(("master_kind", "slave_kind", "namesrv_kind"), PAIRINGS)
def test_sync_master_slave_survives_master_kill(
    classes: Path, pair: Pair, uniq: Callable[..., str], master_kind: str, slave_kind: str, namesrv_kind: str
) -> None:
    topic = uniq()
    pair.start_namesrv(namesrv_kind)
    master = pair.start_broker(master_kind, "master", broker_id=0, role="SYNC_MASTER")
    pair.wait_registered({"0": master.addr})
    create_routed_topic(master.addr, pair.namesrv, topic, QUEUES)
    slave = pair.start_broker(slave_kind, "slave", broker_id=1, role="SLAVE", ha_master=master.ha_addr)
    pair.wait_registered({"0": master.addr, "1": slave.addr})
    create_topic_seen_by_slave(pair, master, slave, topic)
    wait_sync_ok(pair, master)

    produced = client(
        classes, pair, "HaProduce", {"topic": topic, "group": uniq("pg"), "count": COUNT}
    ).result()
    sent = sent_rows(produced)
    master.kill()  # at once: SYNC_MASTER answered SEND_OK only once the slave had each message
    assert len(sent) == COUNT, f"{len(sent)} of {COUNT} sends answered SEND_OK: {produced['data']}"
    assert {r[2] for r in sent} == {BROKER_NAME}

    slave_end = max_phy_offset(slave.addr)
    assert slave_end > 0, f"the slave holds nothing\n{pair.log_tails()}"
    beyond = [r[0] for r in sent if phy_offset(r[5]) >= slave_end]
    assert not beyond, f"SEND_OK messages the slave did not have at the kill: {beyond[:10]}"
    assert_same_commitlog(master, slave, slave_end)
    print(
        f"{master_kind} master, {slave_kind} slave: {len(sent)} SEND_OK, {slave_end} bytes equal at the kill"
    )
    # the master wrote nothing past what the slave has: its file is zero from there on
    tail = read_range(master.commitlog(), slave_end + 4096)[slave_end:]
    assert tail == bytes(len(tail)), "the master's CommitLog holds bytes past the slave's max offset"

    pair.wait_registered({"1": slave.addr})
    group = uniq("cg")
    got = consume_all(classes, pair, topic, group, [r[0] for r in sent])
    assert by_position(got, 2) == by_position(sent, 3), "the slave served other messages or offsets"
    assert len(got) == len(sent), f"{len(got) - len(sent)} deliveries repeated"
    # with no master the consumer committed its offsets to the slave (findBrokerAddressInAdmin)
    per_queue = {q: sum(1 for r in sent if r[3] == q) for q in range(QUEUES)}
    committed = wait_until(lambda: committed_offsets(slave.addr, topic, group) == per_queue, timeout=10)
    assert committed, (
        f"the slave holds offsets {committed_offsets(slave.addr, topic, group)}, not {per_queue}"
    )

    restarted = pair.start_broker(
        master_kind,
        "master-restarted",
        broker_id=0,
        role="SYNC_MASTER",
        store=master.store,
        port=master.port,
    )
    pair.wait_registered({"0": restarted.addr, "1": slave.addr})
    wait_sync_ok(pair, restarted)  # the slave's HAClient reconnects every 5 s
    after = client(
        classes, pair, "HaProduce", {"topic": topic, "group": uniq("pg"), "count": 20, "prefix": "after"}
    ).result()
    again = sent_rows(after)
    assert len(again) == 20, f"the restarted master answered {len(again)} of 20 sends SEND_OK: {after}"
    before = by_position(sent, 3)
    for _, _, _, queue_id, offset, _ in again:
        assert (queue_id, offset) not in before, f"queue {queue_id} offset {offset} was given twice"
        assert offset >= sum(1 for q, _ in before if q == queue_id)
    assert_same_commitlog(restarted, slave, max_phy_offset(slave.addr))


def stop_file_producer(classes: Path, pair: Pair, topic: str, group: str, stop: Path) -> Background:
    args = {"topic": topic, "group": group, "count": 1_000_000, "pauseMs": 20, "stopFile": str(stop)}
    return client(classes, pair, "HaProduce", args, timeout=400)


def migrate(classes: Path, pair: Pair, uniq: Callable[..., str], target: str) -> None:
    """The README's "Migrating a live Java broker" recipe, step by step, with a Java producer and a
    Java push consumer running throughout; ``target`` is what replaces the Java master."""
    topic, group = uniq(), uniq("cg")
    pair.start_namesrv("java")
    old = pair.start_broker("java", "java-master", broker_id=0, role="ASYNC_MASTER")
    pair.wait_registered({"0": old.addr})
    create_routed_topic(old.addr, pair.namesrv, topic, QUEUES)
    stop, expect = pair.workdir / "stop-producing", pair.workdir / "expect.json"
    producer = stop_file_producer(classes, pair, topic, uniq("pg"), stop)
    consumer = client(
        classes,
        pair,
        "HaConsume",
        {"topic": topic, "group": group, "expectFile": str(expect), "timeoutMs": 380_000},
        timeout=400,
    )
    assert wait_until(lambda: max_phy_offset(old.addr) > 0, timeout=60), "nothing was produced"

    # 1. a slave of the same brokerName on a store of its own, attached to the master's HA port
    slave = pair.start_broker(target, "slave", broker_id=1, role="SLAVE", ha_master=old.ha_addr)
    pair.wait_registered({"0": old.addr, "1": slave.addr})
    # 2. caught up: the slave's commitLogMaxOffset (brokerStatus) reaches the master's, and its
    # metadata sync has brought the topics (and subscription groups, consumer offsets)
    mark = max_phy_offset(old.addr)
    caught_up = wait_until(lambda: max_phy_offset(slave.addr) >= mark, timeout=60, interval=0.2)
    assert caught_up, f"the slave never reached the master's offset {mark}\n{pair.log_tails()}"
    assert wait_until(lambda: has_topic(slave.addr, topic), timeout=90, interval=0.5), (
        f"the slave never synced topic {topic}\n{pair.log_tails()}"
    )
    # 3. the master stops taking sends (brokerPermission=4, read only); the slave takes the rest
    done = java.mqadmin(
        pair.workdir / "mqadmin-logs",
        "updateBrokerConfig",
        "-b",
        old.addr,
        "-k",
        "brokerPermission",
        "-v",
        "4",
        java_opts=java.QUICK_JVM,
    )
    assert done.returncode == 0 and "success" in done.stdout, done.stdout + done.stderr
    final = wait_until(
        lambda: (m := max_phy_offset(old.addr)) == max_phy_offset(slave.addr) and m, timeout=60, interval=0.5
    )
    assert final, f"the slave never reached the read-only master's offset\n{pair.log_tails()}"
    assert max_phy_offset(old.addr) == final, "the read-only master still took messages"
    # 4. stop the Java master, then the slave; 5. the slave's store serves as brokerId 0 on the old port
    old.stop()
    slave.stop()
    new = pair.start_broker(
        target, "new-master", broker_id=0, role="ASYNC_MASTER", store=slave.store, port=old.port
    )
    pair.wait_registered({"0": new.addr})
    assert_same_commitlog(old, new, final)
    carried_on = wait_until(lambda: max_phy_offset(new.addr) > final + 20 * 150, timeout=90, interval=0.5)
    assert carried_on, f"the producer never sent to the new master\n{pair.log_tails()}"

    stop.touch()
    produced = producer.result()
    sent = sent_rows(produced)
    before = sum(1 for r in sent if phy_offset(r[5]) < final)
    assert 0 < before < len(sent), f"{before} of {len(sent)} SEND_OK before the switch: not throughout"
    print(
        f"migration: {len(sent)} SEND_OK ({before} to the Java master), refused {produced['data']['refused']},"
        f" {final} CommitLog bytes moved"
    )
    expect.write_text(json.dumps([r[0] for r in sent]))
    got = consumer.result()
    assert got["checks"][0]["ok"], f"not every SEND_OK message was consumed: {got['checks']}"
    delivered = got["data"]["got"]
    positions = [(r[2], r[3]) for r in delivered]
    repeated = {p for p in positions if positions.count(p) > 1}
    assert not repeated, f"delivered twice to {group}: {sorted(repeated)[:10]}"
    at = by_position(delivered, 2)
    moved = {p: b for p, b in by_position(sent, 3).items() if at.get(p) != b}
    assert not moved, f"SEND_OK messages consumed elsewhere or not at all: {sorted(moved.items())[:10]}"
    # the group committed what it consumed: a new instance of it gets nothing again
    again = consume_all(classes, pair, topic, group, [], grace_ms=5000)
    assert again == [], f"{len(again)} messages delivered again to {group} after the migration"


def test_migrating_a_live_java_broker(classes: Path, pair: Pair, uniq: Callable[..., str]) -> None:
    migrate(classes, pair, uniq, "rmqgate")


#: CommitLog files of 64 KiB, so that a few hundred messages fill several.
SMALL_FILES = "mappedFileSizeCommitLog=65536\n"


@pytest.mark.parametrize(("master_kind", "slave_kind", "namesrv_kind"), PAIRINGS)
def test_empty_slave_attached_late_starts_at_the_masters_last_file(
    pair: Pair, uniq: Callable[..., str], master_kind: str, slave_kind: str, namesrv_kind: str
) -> None:
    """HAConnection: a slave reporting offset 0 is sent the master's CommitLog from the start of its
    last file (masterOffset - masterOffset % mappedFileSizeCommitLog), not from the beginning."""
    topic = uniq()
    pair.start_namesrv(namesrv_kind)
    master = pair.start_broker(master_kind, "master", broker_id=0, role="ASYNC_MASTER", extra=SMALL_FILES)
    pair.wait_registered({"0": master.addr})
    create_routed_topic(master.addr, pair.namesrv, topic, QUEUES)
    with WireClient(master.addr) as c:
        for i in range(400):
            resp = c.send_message(topic, f"late-{i}-".encode() + bytes(400), queue_id=i % QUEUES)
            assert resp.code == 0, f"send {i}: {resp!r}"
    end = max_phy_offset(master.addr)
    start = end - end % 65536
    assert start >= 2 * 65536, f"only {end} bytes written: fewer than three CommitLog files"

    slave = pair.start_broker(
        slave_kind, "slave", broker_id=1, role="SLAVE", ha_master=master.ha_addr, extra=SMALL_FILES
    )
    pair.wait_registered({"0": master.addr, "1": slave.addr})
    caught_up = wait_until(lambda: max_phy_offset(slave.addr) == end, timeout=60, interval=0.2)
    assert caught_up, f"the slave never reached the master's offset {end}\n{pair.log_tails()}"
    info = runtime_info(slave.addr)
    assert int(info["commitLogMinOffset"]) == start, f"the slave starts at {info['commitLogMinOffset']}"
    name = f"{start:020d}"
    slave_files = sorted(p.name for p in slave.commitlog_dir().iterdir())
    # (a Java slave has also preallocated the file after it: AllocateMappedFileService)
    assert slave_files[0] == name, f"the slave's CommitLog files: {slave_files}"
    with (master.commitlog_dir() / name).open("rb") as m, (slave.commitlog_dir() / name).open("rb") as s:
        assert m.read(end - start) == s.read(end - start), f"CommitLog file {name} differs"
