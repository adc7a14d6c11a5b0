"""Run real-client driver programs (compat_tests/clients/, compat_tests/node/) in subprocesses.

Each driver prints ``RESULT <json>`` as its last result line; a crash, a hang (timeout) or a missing
result is a test failure with the driver's output attached. Clients installed outside the main venv
(same import name ``rocketmq`` for different packages) live in target dirs under ``.venv-clients/``
and are put on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

COMPAT_DIR = Path(__file__).resolve().parent
ROOT = COMPAT_DIR.parent
CLIENTS_DIR = COMPAT_DIR / "clients"
NODE_DIR = COMPAT_DIR / "node"
CPP_DRIVER = CLIENTS_DIR / "cpp_driver.py"

#: Target dirs the Makefile installs (see compat_tests/clients/requirements-*.txt); env overrides.
CLIENT_TARGETS = {
    "rocketmq044": Path(os.environ.get("RMQ_CLIENT_ROCKETMQ044", ROOT / ".venv-clients" / "rocketmq044")),
    "rocketmq-client-python200": Path(
        os.environ.get("RMQ_CLIENT_OFFICIAL200", ROOT / ".venv-clients" / "rocketmq-client-python200")
    ),
}


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


def _parse(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise DriverError(
            f"{what} produced no result (exit {proc.returncode})\n--- stdout ---\n{proc.stdout[-4000:]}"
            f"\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    data = json.loads(lines[-1][len("RESULT ") :])
    data["_stderr"] = proc.stderr[-4000:]
    if "exception" in data:
        raise DriverError(
            f"{what} raised {data['exception']}\n{data.get('traceback', '')}\n{proc.stderr[-2000:]}"
        )
    return data


def _run(cmd: list[str], env: dict[str, str], timeout: float, what: str, cwd: Path) -> dict[str, Any]:
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise DriverError(
            f"{what} timed out after {timeout} s\n--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}"
        ) from None
    return _parse(proc, what)


def run_cpp(
    args: dict[str, Any], home: Path, *, client: str | None = None, timeout: float = 90
) -> dict[str, Any]:
    """Run cpp_driver.py with rocketmq-python-cvs (client=None) or a target-dir client."""
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if client is not None:
        env["PYTHONPATH"] = str(client_target(client))
    what = f"cpp driver {args.get('scenario')}/{args.get('mode', '')} ({client or 'rocketmq-python-cvs'})"
    return _run([sys.executable, str(CPP_DRIVER), json.dumps(args)], env, timeout, what, home)


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        raise DriverError("node is not installed (ali-ons needs Node.js >= 14)")
    return node


def run_node(script: str, args: dict[str, Any], home: Path, *, timeout: float = 90) -> dict[str, Any]:
    if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        raise DriverError(f"ali-ons is not installed: run `npm ci` in {NODE_DIR} (make setup does)")
    env = dict(os.environ, HOME=str(home))
    cmd = [node_binary(), str(NODE_DIR / script), json.dumps(args)]
    return _run(cmd, env, timeout, f"node {script} {args.get('scenario', '')}", NODE_DIR)
