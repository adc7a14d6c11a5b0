"""A Spark standalone cluster on this machine: one master and N workers, each its own JVM.

Started with the ``spark-class`` that the pyspark pip package ships (``pyspark/bin``), bound to
127.0.0.1 on free ports. Used by the tests and ``bench/spark_replay.py`` to run the job as it runs on a
real cluster: executors are separate JVMs in their own working directories, and their Python is
whatever ``python`` names, e.g. a bare venv without rmqgate. ``stop()`` ends every process it started
(master, workers and the executors they launched) even after a failure.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from rmqgate.spark.job import QUIET_LOG4J, check_java


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_bare_python(where: Path) -> str:
    """A venv without pip or site-packages of the same Python as this one (workers need the driver's
    minor version); what an executor has of ours is only what the job ships."""
    import sys

    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
    return str(where / "bin" / "python")


class StandaloneCluster:
    """``with StandaloneCluster(workers=2, work=DIR) as c: c.master_url``"""

    def __init__(
        self,
        work: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "512m",
        daemon_memory: str = "256m",
        start_timeout: float = 90.0,
    ) -> None:
        self.work = Path(work)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.start_timeout = start_timeout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = 0
        self.webui_port = 0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("PYSPARK_PYTHON", None)  # the driver decides executors' Python, not the daemons
        env.pop("PYTHONPATH", None)  # executors' Python sees only what Spark and the job give it
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}",
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.work / f"{name}.log").open("wb")
        try:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.work,
                start_new_session=True,  # its own process group: stop() ends executors with it
            )
        finally:
            log.close()
        self.procs.append(proc)

    def start(self) -> StandaloneCluster:
        """Start the master and the workers and wait until every worker is ALIVE; on failure nothing
        started is left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StandaloneCluster:
        check_java()
        self.work.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port = _free_port(), _free_port()
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port)]
        self._spawn("master", [*master, "--webui-port", str(self.webui_port)])
        for i in range(self.n_workers):
            wdir = self.work / f"worker{i}"
            wdir.mkdir(exist_ok=True)
            worker = ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1"]
            worker += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(wdir)]
            self._spawn(f"worker{i}", [*worker, "--webui-port", "0"])
        self._wait_workers()
        return self

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as resp:
            return json.loads(resp.read())

    def _wait_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        alive = 0
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {p.returncode}: {self.logs()}")
            try:
                alive = sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
            except (OSError, ValueError):  # not listening yet, or its UI still starting
                alive = 0
            if alive >= self.n_workers:
                return
            time.sleep(0.3)
        raise RuntimeError(
            f"{alive} of {self.n_workers} workers registered in {self.start_timeout} s: {self.logs()}"
        )

    def logs(self, tail: int = 2000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in self.work.glob("*.log")
        )

    def stop(self) -> None:
        """SIGTERM each daemon's process group (workers' executors included), then SIGKILL what is left."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            for p in reversed(self.procs):
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + wait
            for p in self.procs:
                try:
                    p.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        # executors were started by a worker in the worker's process group: none may outlive it
        deadline = time.monotonic() + 10.0
        for p in self.procs:
            while True:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
