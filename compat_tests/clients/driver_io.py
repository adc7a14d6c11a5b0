"""What the client drivers in this folder share: one JSON argument in, one ``RESULT <json>`` line out.

A driver runs as a script (this folder is then first on ``sys.path``) under whichever ``rocketmq``
package PYTHONPATH selects, and ends with ``os._exit``: the C++ cores may crash in their shutdown.
An exception becomes ``{"exception", "traceback"}``, which compat_tests/drivers.py raises as a failure.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn


def text(value: Any) -> str | None:
    """A client's bytes or str field as str (None stays None)."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _result(data: dict[str, Any]) -> NoReturn:
    sys.stdout.write("RESULT " + json.dumps(data) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_driver(run: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> NoReturn:
    """``run(rocketmq.client, args)`` with the JSON argument; print its result (with the client
    package's file, which tells which package PYTHONPATH chose) and end the process."""
    try:
        args = json.loads(sys.argv[1])
        import rocketmq.client

        data = run(rocketmq.client, args)
        data["package_file"] = rocketmq.client.__file__
        _result(data)
    except Exception as exc:
        _result({"exception": repr(exc), "traceback": traceback.format_exc()})
