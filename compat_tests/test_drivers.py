"""The driver harness itself: what a driver prints becomes a result or a failure that shows why."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rmqgate.compat_tests.drivers import CLIENTS_DIR, Background, DriverError, cpp_env


def _driver(tmp_path: Path, body: str, args: dict, timeout: float = 30) -> Background:
    """A driver script using clients/driver_io.py, run as the real drivers are (by path)."""
    script = tmp_path / "driver.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(CLIENTS_DIR)!r})\nfrom driver_io import run_driver\n{body}\n"
    )
    cmd = [sys.executable, str(script), json.dumps(args)]
    return Background(cmd, cpp_env(tmp_path), tmp_path, "test driver", timeout)


def test_result_carries_the_data_and_the_client_package(tmp_path: Path) -> None:
    res = _driver(
        tmp_path,
        "run_driver(lambda client, args: {'echo': args, 'has_producer': hasattr(client, 'Producer')})",
        {"n": 3},
    ).result()
    assert res["echo"] == {"n": 3} and res["has_producer"] is True
    assert res["package_file"] == importlib.util.find_spec("rocketmq.client").origin  # the venv's


def test_an_exception_in_the_driver_fails_with_its_traceback(tmp_path: Path) -> None:
    body = "def boom(client, args):\n    raise ValueError('no route ' + args['topic'])\nrun_driver(boom)"
    with pytest.raises(DriverError, match=r"(?s)test driver raised ValueError\('no route T1'\).*Traceback"):
        _driver(tmp_path, body, {"topic": "T1"}).result()


def test_a_driver_that_prints_no_result_fails_with_its_output(tmp_path: Path) -> None:
    body = "print('half way'); sys.stderr.write('core dumped\\n'); sys.exit(3)"
    with pytest.raises(DriverError, match=r"(?s)no result \(exit 3\).*half way.*--- stderr ---\ncore dumped"):
        _driver(tmp_path, body, {}).result()


def test_a_driver_that_hangs_is_killed_at_its_timeout(tmp_path: Path) -> None:
    bg = _driver(tmp_path, "import time; print('started', flush=True); time.sleep(60)", {}, timeout=1)
    with pytest.raises(DriverError, match=r"(?s)timed out after 1 s.*started"):
        bg.result()
    assert bg.proc.returncode is not None
