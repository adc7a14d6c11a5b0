"""The broker-process supervisor (server/cluster.py): names, ports, stores and broker.conf of each
broker; ``--brokers``/``brokerProcesses`` including ``auto``; and ``rmqgate serve --brokers 2`` as a
real process tree: a broker killed with SIGKILL comes back on its port with its store recovered, and
SIGTERM to the parent stops every broker cleanly (unregistered, abort files removed).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rmqgate.compat_tests.servers import free_broker_port, free_port
from rmqgate.compat_tests.wire_client import WireClient, cluster_masters, wait_until
from rmqgate.server.cluster import (
    BROKER_PORT_STEP,
    PROCESSES_KEY,
    BrokerSlot,
    ClusterSupervisor,
    plan_brokers,
    write_broker_conf,
)
from rmqgate.server.config import BrokerConfig, ConfigError, load_broker_conf, parse_properties_text
from rmqgate.server.main import add_arguments, broker_processes, build_config
from rmqgate.server.testing import async_test, wait_for
from rmqgate.wire.message import iter_messages


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_plan_names_ports_stores_and_paths(tmp_path: Path) -> None:
    config = BrokerConfig(brokerName="b", listenPort=20000, storePathRootDir=str(tmp_path))
    config.storePathCommitLog = str(tmp_path / "cl")
    config.metricsPort = 9100
    config.namesrvAddr = "127.0.0.1:9876"
    slots = plan_brokers(config, 3)
    assert [s.name for s in slots] == ["b-0", "b-1", "b-2"]
    assert [s.port for s in slots] == [20000, 20000 + BROKER_PORT_STEP, 20000 + 2 * BROKER_PORT_STEP]
    assert BROKER_PORT_STEP >= 3  # listenPort + 1 (HA) and listenPort - 2 (VIP) stay the broker's own
    assert [s.store for s in slots] == [str(tmp_path / f"broker-{i}") for i in range(3)]
    assert slots[2].overrides == {
        "brokerName": "b-2",
        "listenPort": str(20000 + 2 * BROKER_PORT_STEP),
        "storePathRootDir": str(tmp_path / "broker-2"),
        PROCESSES_KEY: "0",
        "namesrvAddr": "127.0.0.1:9876",
        "storePathCommitLog": str(tmp_path / "cl" / "broker-2"),
        "metricsPort": "9102",
    }
    assert [s.port for s in plan_brokers(BrokerConfig(listenPort=0), 2)] == [0, 0]  # each picks its own
    config.set("haListenPort", "30001")  # set outright: spaced like listenPort
    assert [s.overrides["haListenPort"] for s in plan_brokers(config, 2)] == [
        "30001",
        str(30001 + BROKER_PORT_STEP),
    ]


def test_child_conf_keeps_persisted_keys_but_parent_conf_wins(tmp_path: Path) -> None:
    parent = tmp_path / "broker.conf"
    parent.write_text(
        "brokerClusterName = C\nbrokerName = x\ndefaultTopicQueueNums = 2\nbrokerProcesses = 2\n"
    )
    config = load_broker_conf(str(parent))
    config.storePathRootDir = str(tmp_path / "store")
    slot = plan_brokers(config, 2)[1]
    os.makedirs(slot.store)
    Path(slot.conf_path).write_text("defaultTopicQueueNums=7\nfilterSupportRetry=true\n")  # an earlier run's
    write_broker_conf(slot, str(parent))
    props = parse_properties_text(Path(slot.conf_path).read_text())
    assert props["brokerClusterName"] == "C"
    assert props["brokerName"] == "x-1"
    assert props["defaultTopicQueueNums"] == "2"
    assert props["filterSupportRetry"] == "true"
    assert props[PROCESSES_KEY] == "0"  # the child runs its broker in-process
    child = load_broker_conf(slot.conf_path)
    assert (child.brokerName, child.listenPort, child.storePathRootDir) == ("x-1", 10915, slot.store)


def test_brokers_flag_conf_key_and_auto(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerProcesses=auto\n")

    def count(*argv: str) -> int:
        args = parsed("--store", store, *argv)
        return broker_processes(args, build_config(args))

    assert count() == 0  # one broker in-process, as before
    assert count("--brokers", "3") == 3
    assert count("--brokers", "auto") == os.cpu_count()
    assert count("--conf", str(conf)) == os.cpu_count()
    assert count("--conf", str(conf), "--brokers", "2") == 2  # the flag wins
    for bad in (("--brokers", "many"), ("--brokers", "-1"), ("--brokers", "2", "--role", "namesrv")):
        with pytest.raises(ConfigError):
            count(*bad)


class ScriptSupervisor(ClusterSupervisor):
    """Runs a Python one-liner in place of each broker."""

    def __init__(self, slots: list[BrokerSlot], script: str, **kw: float) -> None:
        super().__init__(slots, parent_conf=None, **kw)  # type: ignore[arg-type]
        self.script = script

    def command(self, slot: BrokerSlot) -> list[str]:
        return [sys.executable, "-c", self.script]


READY = "print('rmqgate ready: broker 127.0.0.1:1', flush=True); "


@async_test
async def test_a_broker_that_keeps_exiting_is_restarted_with_doubling_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slots = plan_brokers(BrokerConfig(listenPort=0, storePathRootDir=str(tmp_path)), 1)
    sup = ScriptSupervisor(
        slots, READY + "import time; time.sleep(0.05)", backoff_first=0.02, backoff_max=0.08, stable_run=3600
    )
    with caplog.at_level(logging.WARNING, "rmqgate.server.cluster"):
        assert await sup.start() == ["127.0.0.1:1"]
        await wait_for(lambda: slots[0].restarts >= 5, 30)
        await sup.stop()
    delays = [
        r.getMessage().rsplit("restarting in ", 1)[1]
        for r in caplog.records
        if "restarting" in r.getMessage()
    ]
    assert delays[:5] == ["0.02 s", "0.04 s", "0.08 s", "0.08 s", "0.08 s"]  # doubling up to the cap
    assert slots[0].proc is not None and slots[0].proc.returncode is not None


@async_test
async def test_stop_kills_a_broker_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    slots = plan_brokers(BrokerConfig(listenPort=0, storePathRootDir=str(tmp_path)), 2)
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + READY + "time.sleep(60)"
    sup = ScriptSupervisor(slots, script, stop_grace=0.5)
    await sup.start()
    await sup.stop()
    assert [s.proc.returncode for s in slots if s.proc] == [-9, -9]
    assert [s.restarts for s in slots] == [0, 0]


@async_test
async def test_a_broker_that_fails_to_start_fails_the_cluster_start(tmp_path: Path) -> None:
    slots = plan_brokers(BrokerConfig(listenPort=0, storePathRootDir=str(tmp_path)), 2)
    sup = ScriptSupervisor(slots, "import sys; sys.exit(3)")
    with pytest.raises(OSError, match="brokers not ready"):
        await sup.start()
    codes = [s.proc.returncode for s in slots if s.proc is not None]
    assert len(codes) == 2 and 3 in codes and None not in codes  # the other one was stopped with it


def broker_pids(parent: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(parent)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.mark.slow
def test_serve_brokers_restart_on_kill_and_clean_stop(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName = SupCluster\nbrokerName = sup\ndefaultTopicQueueNums = 2\n")
    ns_port, broker_port = free_port(), free_broker_port(2)
    argv = [
        sys.executable, "-m", "rmqgate.tools.cli", "serve", "--listen", "127.0.0.1", "--store", str(tmp_path / "s"),
        "--namesrv-port", str(ns_port), "--broker-port", str(broker_port), "--conf", str(conf), "--brokers", "2",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        words = line.split()
        assert words[:2] == ["rmqgate", "ready:"], line
        namesrv = f"127.0.0.1:{ns_port}"
        addrs = [f"127.0.0.1:{broker_port}", f"127.0.0.1:{broker_port + BROKER_PORT_STEP}"]
        assert words[2:] == ["namesrv", namesrv, "broker", addrs[0], "broker", addrs[1]]
        want = {"sup-0": addrs[0], "sup-1": addrs[1]}
        assert wait_until(lambda: cluster_masters(namesrv, "SupCluster") == want, timeout=30)
        with WireClient(addrs[0]) as b:
            assert b.create_topic("SupT", 2).code == 0
            for i in range(3):
                assert b.send_message("SupT", b"m%d" % i, queue_id=1).code == 0
        pids = broker_pids(proc.pid)
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        # the broker comes back on its port (a new process), registers again and recovered its store

        def restarted() -> bool:
            now = broker_pids(proc.pid)
            return len(now) == 2 and pids[0] not in now and cluster_masters(namesrv, "SupCluster") == want

        assert wait_until(restarted, timeout=60, interval=0.2)
        assert (tmp_path / "s" / "broker-0" / "abort").exists()
        with WireClient(addrs[0]) as b:
            got = b.pull("G-sup", "SupT", 1, 0, sys_flag=4, subscription="*")
            assert got.code == 0, got.remark
            assert [bytes(m.body) for m in iter_messages(got.body)] == [b"m0", b"m1", b"m2"]
            assert b.send_message("SupT", b"m3", queue_id=1).ext_fields["queueOffset"] == "3"
        assert proc.poll() is None
        children = broker_pids(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        for pid in children:
            assert (
                not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
            )
        for i in range(2):
            assert not (tmp_path / "s" / f"broker-{i}" / "abort").exists()  # flushed and closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def start_serve(*argv: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``rmqgate serve`` with ``argv``; the process and the words of its ready line after "ready:"."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "rmqgate.tools.cli", "serve", "--listen", "127.0.0.1", *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("rmqgate ready:"):
        proc.kill()
        proc.wait()
        raise AssertionError(f"no ready line: {line!r}")
    return proc, line.split()[2:]


def stop_serve(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout:
        proc.stdout.close()


@pytest.mark.slow
def test_brokers_of_a_host_against_a_shared_namesrv_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    """``--role broker --brokers 2 --namesrv-addr``: the brokers of one host register with a name
    server elsewhere. SIGKILL to their supervisor takes them down too, cleanly (none is left orphaned);
    started again they serve the same stores, and SIGINT stops them cleanly."""
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName = HostCluster\nbrokerName = host-a\n")
    ns, ns_words = start_serve("--role", "namesrv", "--namesrv-port", "0", "--store", str(tmp_path / "ns"))
    namesrv = ns_words[1]
    port = free_broker_port(2)
    argv = ("--role", "broker", "--brokers", "2", "--namesrv-addr", namesrv, "--broker-port", str(port),
            "--conf", str(conf), "--store", str(tmp_path / "s"))  # fmt: skip
    want = {"host-a-0": f"127.0.0.1:{port}", "host-a-1": f"127.0.0.1:{port + BROKER_PORT_STEP}"}
    try:
        sup, words = start_serve(*argv)
        try:
            assert words == ["broker", want["host-a-0"], "broker", want["host-a-1"]]
            assert wait_until(lambda: cluster_masters(namesrv, "HostCluster") == want, timeout=30)
            children = broker_pids(sup.pid)
            assert len(children) == 2
            sup.kill()
            sup.wait()
            assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in children), timeout=60)
            assert wait_until(lambda: cluster_masters(namesrv, "HostCluster") == {}, timeout=30)
        finally:
            stop_serve(sup)
        # the brokers were sent SIGTERM when their supervisor died: they stopped cleanly
        assert not any((tmp_path / "s" / f"broker-{i}" / "abort").exists() for i in range(2))
        sup, words = start_serve(*argv)
        try:
            assert wait_until(lambda: cluster_masters(namesrv, "HostCluster") == want, timeout=30)
            sup.send_signal(signal.SIGINT)
            assert sup.wait(60) == 0
            assert not any((tmp_path / "s" / f"broker-{i}" / "abort").exists() for i in range(2))
            assert wait_until(lambda: cluster_masters(namesrv, "HostCluster") == {}, timeout=30)
        finally:
            stop_serve(sup)
    finally:
        ns.terminate()
        ns.wait(30)
        stop_serve(ns)
