"""The master/slave harness of the HA compat modules: a name server and the brokers of one
brokerName (stock Java 4.9.8 or rmqgate, any role) started as processes, stopped or killed on close,
and waits on what the name server and the slave's metadata sync show.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import ServerProcess, free_broker_port, log_tail
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic, loads, wait_until
from rmqgate.wire.codes import RequestCode

CLUSTER = "HaCluster"
BROKER_NAME = "ha-broker-a"
QUEUES = 4
#: CommitLog's first file name (offset 0); every run of the HA modules stays within it.
FIRST_FILE = "00000000000000000000"

#: broker.conf lines an rmqgate broker of a pair has besides names, role and ports.
GATE_CONF = """\
brokerIP1 = 127.0.0.1
autoCreateTopicEnable = true
autoCreateSubscriptionGroup = true
defaultTopicQueueNums = 4
flushDiskType = ASYNC_FLUSH
"""


@dataclasses.dataclass
class Broker:
    """One broker process of the pair, Java or rmqgate, with what a restart on its store needs."""

    kind: str  # "java" or "rmqgate"
    broker_id: int
    role: str
    port: int
    ha_port: int
    store: Path
    log_path: Path
    stop: Callable[[], None]
    kill: Callable[[], None]

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ha_addr(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def commitlog_dir(self) -> Path:
        found = sorted(p for p in self.store.rglob("commitlog") if p.is_dir())
        assert found, f"no CommitLog directory under {self.store}"
        return found[0]

    def commitlog(self) -> Path:
        """The CommitLog's first file."""
        return self.commitlog_dir() / FIRST_FILE


def gate_conf(broker_id: int, role: str, ha_port: int, ha_master: str | None) -> str:
    """An rmqgate broker.conf of the pair: the same RocketMQ keys a Java broker of it has."""
    conf = (
        f"brokerClusterName = {CLUSTER}\nbrokerName = {BROKER_NAME}\nbrokerId = {broker_id}\n"
        f"brokerRole = {role}\nhaListenPort = {ha_port}\n" + GATE_CONF
    )
    return conf + (f"haMasterAddress = {ha_master}\n" if ha_master else "")


class Pair:
    """A name server and the brokers started on it; everything is stopped (or killed) on exit."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.cleanups: list[Callable[[], None]] = []
        self.logs: list[Path] = []
        self.namesrv = ""

    def start_namesrv(self, kind: str) -> None:
        if kind == "java":
            ns = java.JavaNameServer(self.workdir / "namesrv")
            self.cleanups.append(ns.stop)
            ns.wait_ready()
            self.namesrv, log = ns.addr, ns.log_path
        else:
            (self.workdir / "namesrv").mkdir()
            proc = ServerProcess(self.workdir / "namesrv", role="namesrv")
            self.cleanups.append(proc.stop)
            proc.wait_ready()
            self.namesrv, log = proc.namesrv, proc.log_path
        self.logs.append(log)

    def start_broker(
        self,
        kind: str,
        tag: str,
        *,
        broker_id: int,
        role: str,
        ha_master: str | None = None,
        store: Path | None = None,
        port: int | None = None,
        extra: str = "",
    ) -> Broker:
        """A broker in ``workdir/tag`` (a restart: a new tag, the earlier broker's store and ports);
        ``extra``: more broker.conf lines."""
        workdir = self.workdir / tag
        workdir.mkdir(parents=True)
        port = port or free_broker_port()
        ha_port = port + 1  # what a Java broker listens on whatever its broker.conf says
        if kind == "java":
            jb = java.JavaBroker(
                workdir,
                self.namesrv,
                cluster=CLUSTER,
                name=BROKER_NAME,
                port=port,
                broker_id=broker_id,
                role=role,
                ha_master=ha_master,
                store=store,
                extra_conf=java.JAVA_BROKER_CONF + extra,
            )
            self.cleanups.append(jb.stop)
            self.logs.append(jb.log_path)
            jb.wait_ready()
            return Broker(kind, broker_id, role, port, ha_port, jb.store, jb.log_path, jb.stop, jb.kill)
        store_args: tuple[str, ...] = ()
        if store is not None:
            store_args = ("--store", str(store))
        proc = ServerProcess(
            workdir,
            role="broker",
            namesrv_addr=self.namesrv,
            conf=gate_conf(broker_id, role, ha_port, ha_master) + extra,
            broker_port=port,
            extra_args=store_args,
        )
        self.cleanups.append(proc.stop)
        self.logs.append(proc.log_path)
        proc.wait_ready()

        def kill() -> None:
            proc.proc.kill()
            proc.proc.wait()

        return Broker(
            kind, broker_id, role, port, ha_port, store or proc.store, proc.log_path, proc.stop, kill
        )

    def registered(self) -> dict[str, str]:
        """brokerId -> address of BROKER_NAME as the name server lists it now."""
        try:
            with WireClient(self.namesrv, timeout=3) as ns:
                info = ns.cluster_info()
        except (OSError, AssertionError, ValueError):
            return {}
        return dict((info.get("brokerAddrTable") or {}).get(BROKER_NAME, {}).get("brokerAddrs") or {})

    def wait_registered(self, want: dict[str, str], timeout: float = 40) -> None:
        got = wait_until(lambda: self.registered() == want, timeout=timeout, interval=0.2)
        assert got, f"the name server lists {self.registered()}, expected {want}\n{self.log_tails()}"

    def log_tails(self) -> str:
        return "\n".join(f"--- {path}\n{log_tail(path, 30)}" for path in self.logs)

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()


def has_topic(addr: str, topic: str) -> bool:
    try:
        with WireClient(addr, timeout=5) as c:
            resp = c.invoke(RequestCode.GET_ALL_TOPIC_CONFIG)
    except OSError:
        return False
    return resp.code == 0 and topic in loads(resp.body).get("topicConfigTable", {})


def create_topic_seen_by_slave(pair: Pair, master: Broker, slave: Broker, topic: str) -> None:
    """The topic made on the master; the slave has it once its metadata sync ran (SlaveSynchronize:
    3 s after the slave's start, then every 10 s)."""
    create_routed_topic(master.addr, pair.namesrv, topic, QUEUES)
    synced = wait_until(lambda: has_topic(slave.addr, topic), timeout=90, interval=0.5)
    assert synced, f"the slave never synced topic {topic} from the master\n{pair.log_tails()}"
