"""Stock Apache RocketMQ in the loop: the 4.9.8 name server, broker and mqadmin, and client programs
(compat_tests/java/) compiled against the 4.9.8 and 5.3.3 Java clients.

Everything is read from ``../shared/rocketmq-java`` beside the repository (``ROCKETMQ_HOME``
overrides) and never copied. Servers run in the foreground under the suite, which waits for their
"boot success" line and stops them by pid; logs and stores live in the test's temporary folder.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.drivers import Background, DriverError
from rmqgate.compat_tests.servers import free_broker_port, free_port, terminate, wait_logged

COMPAT_DIR = Path(__file__).resolve().parent
ROOT = COMPAT_DIR.parent
JAVA_SRC = COMPAT_DIR / "java"
STARTUP_TIMEOUT = 60.0

#: The header serializations a Java client can use (RemotingCommand's ROCKETMQ_SERIALIZE_TYPE).
SERIALIZATIONS = ("JSON", "ROCKETMQ")
#: Client generations: 4 = rocketmq-client 4.9.8, 5 = rocketmq-client 5.3.3 (remoting).
CLIENT_VERSIONS = (4, 5)
#: Parametrize a test over every client generation / every header serialization.
BY_CLIENT = pytest.mark.parametrize("version", CLIENT_VERSIONS, ids=lambda v: f"client{v}")
BY_HEADERS = pytest.mark.parametrize("serialization", SERIALIZATIONS)


def rocketmq_home() -> Path:
    """The stock distribution: ``$ROCKETMQ_HOME`` or ``../shared/rocketmq-java``."""
    env = os.environ.get("ROCKETMQ_HOME")
    return Path(env) if env else ROOT.parent / "shared" / "rocketmq-java"


def missing(*, compiler: bool = True) -> str | None:
    """Why stock Java RocketMQ cannot run here, or None when it can; ``compiler=False``: only the
    servers and tools are needed (a JRE, ``$JAVA`` as the launchers' bin/env.sh reads it), no javac."""
    home = rocketmq_home()
    if not (home / "bin" / "broker.sh").exists():
        return f"no stock RocketMQ distribution at {home} (set ROCKETMQ_HOME)"
    if shutil.which(os.environ.get("JAVA") or "java") is None:
        return "java is not installed (make setup installs a JDK; JAVA names another)"
    if compiler and shutil.which("javac") is None:
        return "javac is not installed (make setup installs a JDK)"
    return None


def java_env(log_dir: Path, **extra: str) -> dict[str, str]:
    """The launchers' environment, logging under ``log_dir``. Its ``client/`` folder is made here:
    4.9.8's log appender makes a missing folder only when its own mkdirs succeeds, so of two JVMs
    starting at once in a new ``log_dir`` the one that loses that race fails to open its log and
    prints a stack trace into the command's output."""
    (log_dir / "client").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, RMQ_LOG_DIR=str(log_dir), **extra)
    env.pop("ROCKETMQ_HOME", None)  # the launchers read conf/ from their own folder
    env.pop("ROCKETMQ_SERIALIZE_TYPE", None)
    return env


class JavaServer:
    """A stock launcher (``bin/namesrv.sh`` / ``bin/broker.sh``) in the foreground, output to a log."""

    launcher = ""
    heap = "256m"

    def __init__(
        self, workdir: Path, conf_name: str, conf: str, ports: list[int], *, home: Path | None = None
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.ports = ports
        self.conf_path = workdir / conf_name
        self.conf_path.write_text(conf)
        self.log_path = workdir / f"{self.launcher}.log"
        self._log = self.log_path.open("wb")
        env = java_env(workdir / "logs", HEAP=self.heap)
        if home is not None:  # a conf/ of the test's own (an ACL broker's plain_acl.yml)
            env["ROCKETMQ_HOME"] = str(home)
        cmd = [str(rocketmq_home() / "bin" / f"{self.launcher}.sh"), "-c", str(self.conf_path)]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir, env=env)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        wait_logged(self.proc, self.log_path, b"boot success", self.ports, timeout, self.launcher)

    def stop(self, timeout: float = 20.0) -> None:
        terminate(self.proc, timeout)
        self._log.close()

    def kill(self) -> None:
        """SIGKILL (the launcher execs the JVM): no shutdown hook, nothing flushed or persisted."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class JavaNameServer(JavaServer):
    launcher = "namesrv"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        super().__init__(workdir, "namesrv.properties", f"listenPort={self.port}\n", [self.port])

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


#: What the suite's Java broker runs with besides names, ports and paths: the same behaviour the
#: suite's rmqgate broker.conf asks for, and transaction checks quick enough for a test. A send
#: may wait 3 s (not 200 ms) in the broker's queue before it is refused "[TIMEOUT_CLEAN_QUEUE]broker
#: busy": on a loaded test machine the default failed sends that rmqgate took.
JAVA_BROKER_CONF = """\
brokerIP1=127.0.0.1
waitTimeMillsInSendQueue=3000
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
defaultTopicQueueNums=4
flushDiskType=ASYNC_FLUSH
transactionTimeOut=1000
transactionCheckInterval=1000
enablePropertyFilter=true
"""


class JavaBroker(JavaServer):
    """A stock 4.9.8 broker. It opens ``port`` (and ``port - 2``, its VIP channel, and the HA port).

    Master/slave: ``broker_id`` and ``role`` (brokerRole: ASYNC_MASTER, SYNC_MASTER or SLAVE) and, for
    a slave, ``ha_master`` (haMasterAddress, the master's HA ``host:port``). The HA port is always
    ``port + 1``: 4.9.8's BrokerStartup sets haListenPort to listenPort + 1 after reading broker.conf,
    so a haListenPort line there is shown by getBrokerConfig but never listened on. ``store`` is the storePathRootDir (default ``workdir/store``);
    another JavaBroker on the same workdir, store and port is a restart.
    """

    launcher = "broker"
    heap = "768m"

    def __init__(
        self,
        workdir: Path,
        namesrv: str,
        *,
        cluster: str = "JavaCluster",
        name: str = "java-broker-a",
        port: int | None = None,
        extra_conf: str = JAVA_BROKER_CONF,
        home: Path | None = None,
        broker_id: int = 0,
        role: str | None = None,
        ha_master: str | None = None,
        store: Path | None = None,
    ) -> None:
        self.port = port or free_broker_port()
        self.ha_port = self.port + 1
        self.name = name
        self.cluster = cluster
        self.store = store or workdir / "store"
        conf = (
            f"brokerClusterName={cluster}\nbrokerName={name}\nbrokerId={broker_id}\nnamesrvAddr={namesrv}\n"
            f"listenPort={self.port}\nhaListenPort={self.ha_port}\n"
            f"storePathRootDir={self.store}\nstorePathCommitLog={self.store / 'commitlog'}\n"
        )
        if role:
            conf += f"brokerRole={role}\n"
        if ha_master:
            conf += f"haMasterAddress={ha_master}\n"
        super().__init__(workdir, "broker.conf", conf + extra_conf, [self.port], home=home)

    @property
    def ha_addr(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@functools.cache
def compiled_clients(version: int, out_root: Path, only: tuple[str, ...] = ()) -> Path:
    """compat_tests/java/*.java compiled with ``bin/javac-client.sh`` against client ``version``;
    ``only``: just these programs (class names) and Harness, for a module that runs no other."""
    out = out_root / f"classes{version}"
    out.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p) for p in JAVA_SRC.glob("*.java"))
    if only:
        sources = [str(JAVA_SRC / f"{name}.java") for name in ("Harness", *only)]
    cmd = [str(rocketmq_home() / "bin" / "javac-client.sh"), str(version), "-d", str(out), *sources]
    done = subprocess.run(cmd, capture_output=True, text=True, env=java_env(out_root / "logs"))
    if done.returncode != 0:
        raise DriverError(f"javac against the {version}.x client failed:\n{done.stdout}\n{done.stderr}")
    return out


def java_client(
    version: int,
    classes: Path,
    main: str,
    args: dict[str, Any],
    *,
    serialization: str = "JSON",
    log_dir: Path,
    timeout: float = 120,
) -> Background:
    """Start one compiled program (``compat.<main>``) in the background; ``.result()`` reads its
    ``RESULT <json>`` line; ``args`` are its one JSON argument."""
    cmd = [
        str(rocketmq_home() / "bin" / "java-client.sh"),
        str(version),
        str(classes),
        f"compat.{main}",
        json.dumps(args),
    ]
    env = java_env(log_dir, ROCKETMQ_SERIALIZE_TYPE=serialization)
    what = f"java {main} (client {version}.x, {serialization})"
    return Background(cmd, env, classes, what, timeout)


#: JVM options for short tool runs: C1 only and the serial collector halve a call's CPU time; no
#: hsperfdata file (a reused pid's is locked by another JVM, and the warning lands in the output).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"


def mqadmin(
    log_dir: Path, *args: str, timeout: float = 60, cwd: Path | None = None, java_opts: str = ""
) -> subprocess.CompletedProcess[str]:
    """One stock ``mqadmin`` command; its output as text. ``cwd`` is where it writes files
    (consumerStatus writes one per consumer); ``java_opts`` go to the JVM (``JAVA_OPTS``)."""
    cmd = [str(rocketmq_home() / "bin" / "mqadmin.sh"), *args]
    env = java_env(log_dir, JAVA_OPTS=java_opts) if java_opts else java_env(log_dir)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


#: One row per mqadmin command compared on both clusters (compat_tests/test_mqadmin.py), for the
#: table the suite prints at the end: command, what each cluster answered, equal or not.
MQADMIN: list[dict[str, str]] = []


def mqadmin_table() -> list[str]:
    """The mqadmin comparison as a Markdown table: one row per command."""
    out = ["| command | rmqgate | Java 4.9.8 | equal? |", "|---|---|---|---|"]
    for r in MQADMIN:
        out.append(f"| {r['command']} | {r['rmqgate']} | {r['java']} | {r['equal']} |")
    return out


#: One row per program run: (program, client version, serialization, broker) -> outcome, for the
#: matrix the suite prints at the end (``pytest_terminal_summary`` in conftest.py).
MATRIX: list[dict[str, Any]] = []


def outcome(result: dict[str, Any] | Exception) -> dict[str, bool]:
    """{check name: held} of a program's result; an exception or crash is one failed check."""
    if isinstance(result, Exception):
        return {"program ran to the end": False}
    return {c["name"]: bool(c["ok"]) for c in result["checks"]}


def compare_outcomes(
    results: dict[str, dict[str, Any] | Exception],
    *,
    differences: dict[str, str] | None = None,
) -> list[str]:
    """What differs between the brokers check by check, and what failed on either; the checks
    named in ``differences`` (check -> why) are expected to hold on rmqgate and fail on Java."""
    differences = differences or {}
    problems: list[str] = []
    java_checks, gate_checks = outcome(results["java"]), outcome(results["rmqgate"])
    for name in sorted(set(java_checks) | set(gate_checks)):
        on_java, on_gate = java_checks.get(name), gate_checks.get(name)
        if name in differences:
            if not (on_gate and on_java is False):
                problems.append(
                    f"{name}: expected rmqgate ok, Java failed ({differences[name]}); "
                    f"got rmqgate={on_gate}, java={on_java}"
                )
        elif not (on_gate and on_java):
            problems.append(f"{name}: rmqgate={on_gate}, java={on_java}")
    for broker, result in results.items():
        if isinstance(result, Exception):
            problems.append(f"{broker}: {result}")
        elif not result["checks"]:
            problems.append(f"{broker}: the program made no check")
    return problems


def data(results: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` of each broker's result (the programs ran to the end: assert_same held)."""
    return {broker: result["data"].get(key) for broker, result in results.items()}


def same_property_map(gate: dict[str, str], java: dict[str, str], what: str, volatile: set[str]) -> None:
    """Two message property maps have the same keys, and the same values but for ``volatile`` ones."""
    assert sorted(gate) == sorted(java), f"{what} property keys: rmqgate {sorted(gate)}, java {sorted(java)}"
    differing = {k: (gate[k], java[k]) for k in java if k not in volatile and gate[k] != java[k]}
    assert not differing, f"{what} values (rmqgate, java): {differing}"


def detail(results: dict[str, dict[str, Any] | Exception]) -> str:
    lines = []
    for broker, result in results.items():
        if isinstance(result, Exception):
            lines.append(f"--- {broker}: {result}")
            continue
        lines.append(f"--- {broker}: {json.dumps(result.get('data'))[:1500]}")
        for c in result["checks"]:
            lines.append(
                f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {json.dumps(c.get('detail'))[:600]}"
            )
    return "\n".join(lines)


def record(program: str, version: int, serialization: str, results: dict[str, Any]) -> None:
    for broker, result in results.items():
        checks = outcome(result)
        MATRIX.append(
            {
                "program": program,
                "client": f"{version}.x",
                "serialization": serialization,
                "broker": broker,
                "passed": sum(checks.values()),
                "checks": len(checks),
            }
        )


def matrix_table() -> list[str]:
    """The Java program matrix as a Markdown table: one row per program x client x serialization."""
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in MATRIX:
        key = (r["program"], r["client"], r["serialization"])
        rows.setdefault(key, {})[r["broker"]] = f"{r['passed']}/{r['checks']}"
    out = ["| program | client | headers | rmqgate | Java 4.9.8 |", "|---|---|---|---|---|"]
    for (program, client, ser), cells in sorted(rows.items()):
        out.append(
            f"| {program} | {client} | {ser} | {cells.get('rmqgate', '-')} | {cells.get('java', '-')} |"
        )
    return out


class BrokerPair:
    """rmqgate and the stock Java broker side by side: one program run on both at once."""

    def __init__(self, clusters: dict[str, Any], classes: dict[int, Path], log_dir: Path) -> None:
        self.clusters = clusters  # {"rmqgate": Cluster, "java": Cluster}
        self.classes = classes
        self.log_dir = log_dir

    def create_topic(self, name: str, queues: int = 4, **kw: Any) -> None:
        """The topic on both brokers, routed by both name servers."""
        from rmqgate.compat_tests.wire_client import create_routed_topic

        for cluster in self.clusters.values():
            create_routed_topic(cluster.broker, cluster.namesrv, name, queues, **kw)

    def run(
        self,
        main: str,
        version: int,
        serialization: str,
        args: dict[str, Any],
        *,
        timeout: float = 120,
    ) -> dict[str, dict[str, Any] | Exception]:
        """``compat.<main>`` with ``args`` (plus ``namesrv``) against each broker, concurrently."""
        started = {
            broker: java_client(
                version,
                self.classes[version],
                main,
                {**args, "namesrv": cluster.namesrv, "broker": cluster.broker},
                serialization=serialization,
                log_dir=self.log_dir / broker,
                timeout=timeout,
            )
            for broker, cluster in self.clusters.items()
        }
        results: dict[str, dict[str, Any] | Exception] = {}
        for broker, proc in started.items():
            try:
                results[broker] = proc.result()
            except DriverError as e:
                results[broker] = e
        record(main, version, serialization, results)
        return results

    def assert_same(
        self,
        results: dict[str, dict[str, Any] | Exception],
        *,
        differences: dict[str, str] | None = None,
    ) -> None:
        problems = compare_outcomes(results, differences=differences)
        assert not problems, "\n".join(problems) + "\n" + detail(results)
