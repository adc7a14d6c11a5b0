"""Adversity suite set-up: modules here are collected only when ``make adversity`` asks for them.

The target sets ``RMQGATE_ADVERSITY=1``; without it the normal ``pytest`` run (and CI) leaves every
module of this folder uncollected rather than skipped. Figures each scenario measures go to stdout and
to ``$ADVERSITY_OUT`` (default ``build/adversity/``) as JSON and markdown, via ``report``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from rmqgate.compat_tests import java

ENABLED = os.environ.get("RMQGATE_ADVERSITY") == "1"

if not ENABLED:
    collect_ignore_glob = ["test_*.py", "*_test.py"]

ROOT = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    out = Path(os.environ.get("ADVERSITY_OUT") or ROOT / "build" / "adversity")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_report(name: str, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Print a figure table and keep it as ``<name>.json`` and ``<name>.md`` in the results folder."""
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = "| " + " | ".join(str(c).ljust(w) for c, w in zip(columns, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in rows]
    table = "\n".join([f"### {title}", "", line, rule, *body, ""])
    print("\n" + table, flush=True)
    out = results_dir()
    (out / f"{name}.md").write_text(table)
    (out / f"{name}.json").write_text(
        json.dumps({"title": title, "columns": list(columns), "rows": [list(r) for r in rows]}, indent=1)
    )
    return table


@pytest.fixture
def report() -> Callable[[str, str, Sequence[str], Sequence[Sequence[object]]], str]:
    """``report(name, title, columns, rows)``: print the figure table and save it under the results folder."""
    return write_report


@pytest.fixture(scope="session")
def steady_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """compat_tests/java/*.java compiled against the 4.9.8 client (SteadyLoad.java is the one used here)."""
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # selected on purpose: a missing JDK is a failure, not a pass
    return java.compiled_clients(4, tmp_path_factory.mktemp("java-classes"))
