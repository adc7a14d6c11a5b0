"""A million hostile frames against a live `rmqgate serve` while a stock 4.9.8 producer and consumer run.

Two sender processes (compat_tests/adversity/hostile.py) fire structure-aware mutations of every
request family and random bytes over many connections at the name server and the broker. Promises:
the server stays up and answers, logs no traceback and no ERROR, answers every request a batch owes
or closes its connection (each read has a deadline: nothing hangs), and the Java clients' sends all
succeed and are all consumed, at a rate that does not collapse. ``ADVERSITY_FRAMES`` sets the count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqgate.compat_tests.adversity.hostile import templates
from rmqgate.compat_tests.adversity.probes import (
    log_excerpt,
    log_problems,
    rss_kib,
    sends_per_second,
    steady_load,
)
from rmqgate.compat_tests.servers import ServerProcess
from rmqgate.compat_tests.wire_client import WireClient, create_routed_topic
from rmqgate.wire.codes import RequestCode

pytestmark = [pytest.mark.slow, pytest.mark.java, pytest.mark.timeout(3600)]

FRAMES = int(os.environ.get("ADVERSITY_FRAMES", "1000000"))
#: Hostile frames/s of all senders together (0: flat out). Flat out saturates the broker's one event loop
#: on two shared cores, and the Java producer's synchronous sends then wait behind the whole hostile
#: mix (admin writes among it commit to LMDB in 1-3 ms each): the rate keeps headroom to measure with.
RATE = float(os.environ.get("ADVERSITY_RATE", "2000"))
SENDERS = 2
QUIET_S = 15.0
#: The Java producer's rate under hostile load, as a share of its quiet rate, below which it counts as
#: starved. Both share two cores with the senders, so some drop is the CPU's, not unfairness.
STARVED = 0.25


def answers(addr: str) -> bool:
    with WireClient(addr, timeout=10) as c:
        resp = c.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    return resp.is_response


def start_sender(server: ServerProcess, frames: int, seed: int) -> subprocess.Popen[str]:
    args = ["--namesrv", server.namesrv, "--broker", server.broker, "--seed", str(seed)]
    args += ["--frames", str(frames), "--rate", str(RATE / SENDERS)]
    return subprocess.Popen(
        [sys.executable, "-m", "rmqgate.compat_tests.adversity.hostile", *args, "--connections", "32"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_hostile_frames_beside_java_clients(tmp_path: Path, steady_classes: Path, report) -> None:
    (tmp_path / "rmqgate").mkdir()
    server = ServerProcess(tmp_path / "rmqgate")
    try:
        server.wait_ready()
        topic = create_routed_topic(server.broker, server.namesrv, "SteadyT", 4)
        with steady_load(steady_classes, server.namesrv, topic, tmp_path / "steady") as load:
            rss_quiet = rss_kib(server.proc.pid)
            quiet = (time.time(), time.time() + QUIET_S)
            time.sleep(QUIET_S)
            began = time.time()
            senders = [start_sender(server, FRAMES // SENDERS, 1 + i * 7919) for i in range(SENDERS)]
            tallies = []
            for proc in senders:
                out, err = proc.communicate(timeout=3000)
                line = next((x for x in out.splitlines() if x.startswith("HOSTILE ")), None)
                assert proc.returncode == 0 and line, f"hostile sender failed:\n{out[-2000:]}\n{err[-3000:]}"
                tallies.append(json.loads(line[len("HOSTILE ") :]))
            hostile = (began, time.time())
            alive_after = server.proc.poll() is None and answers(server.namesrv) and answers(server.broker)
            rss_peak = rss_kib(server.proc.pid, "VmHWM")
        result = load.result
    finally:
        server.stop()

    sums = {k: sum(t[k] for t in tallies) for k in ("frames", "batches", "answered", "closed_by_server")}
    hangs = [h for t in tallies for h in t["hangs"]]
    unexpected = [u for t in tallies for u in t["unexpected_close"]]
    connect_errors = sum(t["connect_errors"] for t in tallies)
    families = {code for t in tallies for code in t["families"]}
    data = result.get("data", {})
    quiet_rate = sends_per_second(data.get("sends", []), *quiet)
    loaded_rate = sends_per_second(data.get("sends", []), *hostile)
    elapsed = hostile[1] - hostile[0]
    report(
        "hostile_frames",
        f"Hostile frames: {sums['frames']} frames at {RATE:.0f}/s asked, {SENDERS} senders x 32 connections "
        "(shared 2-core box)",
        ["figure", "value"],
        [
            ["frames sent", sums["frames"]],
            ["request codes among them (random bytes aside)", len(families - {"-1"})],
            ["connections (batches)", sums["batches"]],
            ["hostile frames/s", round(sums["frames"] / elapsed)],
            ["requests answered", sums["answered"]],
            ["connections closed by the server", sums["closed_by_server"]],
            ["hangs (a read past its deadline)", sum(t["hang_count"] for t in tallies)],
            ["closed while answers were owed", sum(t["unexpected_close_count"] for t in tallies)],
            ["connect errors", connect_errors],
            ["Java sends/s, quiet", round(quiet_rate, 1)],
            ["Java sends/s, under hostile load", round(loaded_rate, 1)],
            ["Java messages sent / consumed", f"{data.get('sent')} / {data.get('consumed')}"],
            ["Java send failures", data.get("failures")],
            ["server RSS MiB: quiet / peak", f"{rss_quiet // 1024} / {rss_peak // 1024}"],
            ["server log: tracebacks / ERROR lines", "{} / {}".format(*log_problems(server.log_path))],
        ],
    )
    assert alive_after, "the server stopped answering after the hostile load"
    assert log_problems(server.log_path) == (0, 0), log_excerpt(server.log_path)
    assert not hangs, hangs[:5]
    assert not unexpected, unexpected[:5]
    assert connect_errors == 0
    assert sums["frames"] == FRAMES // SENDERS * SENDERS
    if FRAMES >= 20_000:  # enough for every family to come up
        assert {str(t.code) for t in templates()} <= families, "a request family was never sent"
    assert "exception" not in result, result.get("traceback")
    assert all(c["ok"] for c in result["checks"]), result["checks"]
    assert data["sent"] > 0 and data["consumed"] >= data["sent"]
    assert loaded_rate >= STARVED * quiet_rate, (quiet_rate, loaded_rate)
