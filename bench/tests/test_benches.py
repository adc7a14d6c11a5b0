"""Every benchmark still runs end to end and prints its figures next to its floor.

Tiny sizes: the figures printed here mean nothing and nothing is asserted about them (speed is read
off a full run by a person); what can fail is a script that no longer runs or no longer reports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent

#: script, tiny arguments, lines its report must contain
CASES = [
    (
        "acl.py",
        ["--seconds", "0.5", "--rounds", "1", "--connections", "2"],
        ["aclEnable=true, signed sends", "signed / unsigned per round:"],
    ),
    ("codec.py", [], ["target: codec at most"]),
    (
        "ha.py",
        ["--seconds", "0.5", "--rounds", "1", "--connections", "2"],
        ["HA bench:", "SYNC_MASTER + slave", "relative to the lone master"],
    ),
    (
        "filter_pull.py",
        ["2000", "--repeat", "1"],
        ["SQL92 a BETWEEN 3 AND 7", "time / tag-filter time per round"],
    ),
    ("pcap.py", ["--no-scapy", "--repeat", "1"], ["header decode = read_frames"]),
    ("store.py", ["2000", "--repeat", "1"], ["ASYNC / raw-write floor, same round:", "SYNC(64) / ASYNC"]),
    ("index_dispatch.py", ["2000", "--repeat", "1"], ["catch-up median: user", "paced 28000/s median: user"]),
    (
        "broker.py",
        ["--seconds", "0.5", "--rounds", "1", "--connections", "2"],
        ["ASYNC_FLUSH / floor per round:", "SYNC_FLUSH ="],
    ),
    (
        "broker.py",
        [
            "--cpu",
            "200",
            "--rounds",
            "2",
            "--connections",
            "2",
            "--serialize",
            "rocketmq",
            "--profile",
            "p.out",
        ],
        ["server CPU per sync 1024 B SEND_MESSAGE_V2 (rocketmq header", "profile of round 1 in p.out"],
    ),
    (
        "broker.py",
        ["--cpu", "200", "--rounds", "1", "--connections", "2", "--event-loop", "asyncio", "uvloop"],
        [
            "round 1 (asyncio):",
            "round 1 (uvloop):",
            "2 connections, asyncio): min",
            "2 connections, uvloop): min",
        ],
    ),
    (
        "broker.py",
        ["--cpu", "200", "--in-process", "--rounds", "2", "--serialize", "rocketmq"],
        ["in process, loop thread CPU per 1024 B SEND_MESSAGE_V2 (rocketmq header): min"],
    ),
    (
        "broker.py",
        ["--brokers", "1", "2", "--seconds", "2", "--warmup", "3", "--rounds", "1", "--threads", "2"],
        ["aggregate / (N x 1 broker)", "rmqgate --brokers 2", "Java 4.9.8, 1 broker"],
    ),
    (
        "features.py",
        ["--seconds", "0.5", "--connections", "1", "--delayed", "200", "--halves", "100"],
        ["floor  plain sends", "transactions (commit)", "check-backs", "delay delivery"],
    ),
    (
        "java_vs_rmqgate.py",
        ["--seconds", "1", "--warmup", "2", "--rounds", "1", "--threads", "2"],
        ["rmqgate / Java TPS per round, 2 threads:", "CPU us/msg"],
    ),
    (
        "metrics.py",
        ["--seconds", "0.5", "--rounds", "1", "--connections", "2", "--topics", "2"],
        ["scraped / idle per round:", "one scrape in process:", "CPU µs per send by round:"],
    ),
    (
        "replay.py",
        ["--requests", "100", "--rounds", "1", "--pipelined", "200"],
        ["sync recording", "pipelined"],
    ),
    (
        "spark_replay.py",
        ["--scale", "1", "--masters", "local[1]", "--repeat", "1"],
        ["floor: the same plans", "local[1]:"],
    ),
]
#: scripts that run the stock Java servers (compat_tests/java.py): deselected with -m "not java"
#: (as is broker.py's scale-out case, --brokers)
NEEDS_JAVA = {"java_vs_rmqgate.py"}


def _case_id(script: str, args: list[str]) -> str:
    for flag in ("--in-process", "--event-loop", "--cpu", "--brokers"):
        if flag in args:
            return script + "-" + flag[2:]
    return script


def test_every_benchmark_has_a_case() -> None:
    assert {p.name for p in BENCH.glob("[!_]*.py")} == {script for script, _, _ in CASES}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        pytest.param(*c, marks=pytest.mark.java) if c[0] in NEEDS_JAVA or "--brokers" in c[1] else c
        for c in CASES
    ],
    ids=[_case_id(c[0], c[1]) for c in CASES],
)
def test_benchmark_runs_and_reports(script: str, args: list[str], expect: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (
        f"{script} exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    for line in expect:
        assert line in done.stdout, f"{script} did not report {line!r}:\n{done.stdout[-3000:]}"
