"""Run real-client driver programs (compat_tests/clients/, compat_tests/node/) in subprocesses.

Each driver prints ``RESULT <json>`` as its last result line; a crash, a hang (timeout) or a missing
result is a test failure with the driver's output attached. ``Background`` starts one without
waiting for it; ``run_cpp`` and ``run_node`` wait. Clients installed outside the main venv
(same import name ``rocketmq`` for different packages) live in target dirs under ``.venv-clients/``
and are put on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COMPAT_DIR = Path(__file__).resolve().parent
ROOT = COMPAT_DIR.parent
CLIENTS_DIR = COMPAT_DIR / "clients"
NODE_DIR = COMPAT_DIR / "node"
CPP_DRIVER = CLIENTS_DIR / "cpp_driver.py"
CPP_FLOWS = CLIENTS_DIR / "cpp_flows.py"
TX_DRIVER = CLIENTS_DIR / "tx_driver.py"

#: Target dirs the Makefile installs (see compat_tests/clients/requirements-*.txt); env overrides.
CLIENT_TARGETS = {
    "rocketmq044": Path(os.environ.get("RMQ_CLIENT_ROCKETMQ044", ROOT / ".venv-clients" / "rocketmq044")),
    "rocketmq-client-python200": Path(
        os.environ.get("RMQ_CLIENT_OFFICIAL200", ROOT / ".venv-clients" / "rocketmq-client-python200")
    ),
}


#: Seconds a driver may run before it counts as hung. Drivers end as soon as their work is done, so
#: this only bounds a failure; it leaves room for a loaded 2-core machine, where starting a client
#: and its first rebalance can take many seconds.
DRIVER_TIMEOUT = 150.0


class DriverError(AssertionError):
    pass


def client_target(name: str) -> Path:
    path = CLIENT_TARGETS[name]
    if not (path / "rocketmq" / "librocketmq.so").exists():
        raise DriverError(
            f"client {name} is not installed at {path} (run `make setup`, which installs "
            f"compat_tests/clients/requirements-{name}.txt there)"
        )
    return path


def _tail(label: str, text: str, n: int) -> str:
    return f"\n--- {label} ---\n{text[-n:]}"


def parse_result(out: str, err: str, code: int | None, what: str) -> dict[str, Any]:
    """The driver's last ``RESULT <json>``; DriverError (with its output) if none or an exception."""
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise DriverError(
            f"{what} produced no result (exit {code})"
            + _tail("stdout", out, 4000)
            + _tail("stderr", err, 4000)
        )
    data = json.loads(lines[-1][len("RESULT ") :])
    if "exception" in data:
        raise DriverError(
            f"{what} raised {data['exception']}\n{data.get('traceback', '')}" + _tail("stderr", err, 2000)
        )
    return data


_LIVE: list[Background] = []


class Background:
    """A driver subprocess started now, its ``RESULT`` collected by ``result()`` within ``timeout``
    seconds of the start; several can overlap (a consumer joining or leaving mid-stream)."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        _LIVE.append(self)

    def result(self) -> dict[str, Any]:
        left = max(1.0, self.timeout - (time.monotonic() - self.started))
        try:
            out, err = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            self._forget()
            raise DriverError(
                f"{self.what} timed out after {self.timeout} s"
                + _tail("stdout", out, 3000)
                + _tail("stderr", err, 3000)
            ) from None
        self._forget()
        return parse_result(out, err, self.proc.returncode, self.what)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._forget()

    def _forget(self) -> None:
        if self in _LIVE:
            _LIVE.remove(self)


def kill_all() -> None:
    """Kill the drivers still running (a test that failed before collecting them)."""
    while _LIVE:
        _LIVE[-1].kill()


def cpp_env(home: Path, client: str | None = None) -> dict[str, str]:
    """The environment of a C++-core driver: rocketmq-python-cvs from the venv (client=None) or a
    target-dir client on PYTHONPATH; the core writes its logs under HOME/logs/rocketmq-cpp."""
    # older cores' own choice; 2.1.0 writes to /logs/rocketmq-client unless told
    logs = str(home / "logs" / "rocketmq-cpp")
    env = dict(os.environ, HOME=str(home), ROCKETMQ_CLIENT_LOG_DIR=logs, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if client is not None:
        env["PYTHONPATH"] = str(client_target(client))
    return env


def run_cpp(
    args: dict[str, Any], home: Path, *, client: str | None = None, timeout: float = DRIVER_TIMEOUT
) -> dict[str, Any]:
    """Run cpp_driver.py with rocketmq-python-cvs (client=None) or a target-dir client."""
    what = f"cpp driver {args.get('scenario')}/{args.get('mode', '')} ({client or 'rocketmq-python-cvs'})"
    cmd = [sys.executable, str(CPP_DRIVER), json.dumps(args)]
    return Background(cmd, cpp_env(home, client), home, what, timeout).result()


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        raise DriverError("node is not installed (ali-ons needs Node.js >= 14)")
    return node


def node_driver(
    script: str, args: dict[str, Any], home: Path, *, timeout: float = DRIVER_TIMEOUT
) -> Background:
    """An ali-ons driver (compat_tests/node/``script``) in the background."""
    if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        raise DriverError(f"ali-ons is not installed: run `npm ci` in {NODE_DIR} (make setup does)")
    cmd = [node_binary(), str(NODE_DIR / script), json.dumps(args)]
    what = f"node {script} {args.get('scenario', '')}".rstrip()
    return Background(cmd, dict(os.environ, HOME=str(home)), NODE_DIR, what, timeout)


def run_node(
    script: str, args: dict[str, Any], home: Path, *, timeout: float = DRIVER_TIMEOUT
) -> dict[str, Any]:
    return node_driver(script, args, home, timeout=timeout).result()
