"""Spark replay scaling: requests/s with local[1], local[2] and a standalone cluster of 1 and 2 workers
on the same capture, in one run.

The target is ``rmqgate.spark.responder`` (a bare asyncio server answering every request at once in
its own process), so what is measured is the replayer. Printed: each master's replay rate (requests
over the replay's active time), the local[2]/local[1] ratio, the per-task rate, and Spark's fixed
cost (session start-up, ingest + plan, and the replay action's overhead beyond the active replay)
separately. The floor next to it is the same plans replayed by one plain Python process (no Spark).

``standalone[N]`` is a Spark standalone master and N workers (1 core, 512 MiB each; separate JVMs on
127.0.0.1, started for that run and not counted) whose executors run a bare venv without rmqgate or
any dependency: the job ships its code (spark/ship.py). ``--ship archive`` instead gives executors a
packed environment with ``spark.archives`` (rmqgate and all its dependencies, C extensions included),
to compare what each costs at job start.

    .venv/bin/python bench/spark_replay.py [--input PCAP] [--scale N] [--masters local[1],standalone[2]]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("RMQGATE_CORPUS", ROOT.parent / "shared" / "corpus"))


def floor_rate(path: str, scale: int, target: str) -> tuple[int, float]:
    """The same plans replayed in this process without Spark: (requests, seconds active)."""
    from rmqgate.spark.executor import OUTCOME_COLUMNS, ReplayUnit, run_task
    from rmqgate.spark.frames import rows_from_path
    from rmqgate.spark.job import probe_target
    from rmqgate.spark.plan import planned_connection
    from rmqgate.tools.replay import ReplayOptions

    rows = rows_from_path(path)
    t0 = min(r["ts"] for r in rows)
    by_conn: dict[str, list] = collections.defaultdict(list)
    for r in rows:
        by_conn[r["conn"]].append(r)
    opts = ReplayOptions(speed=None, request_timeout=10.0, unanswered_timeout=0.2)
    units = []
    for k, rs in by_conn.items():
        for c in range(scale):
            pc = planned_connection(rs, t0, c, len(units))
            if pc is not None:
                units.append(ReplayUnit(k, c, "", pc, [0] * len(pc.requests)))
    out = run_task(units, probe_target(target), target, time.time(), opts)
    col = {name: i for i, (name, _) in enumerate(OUTCOME_COLUMNS)}
    sent, lat = col["sent_s"], col["latency_ms"]
    ends = [o[sent] + (o[lat] / 1000.0 if o[lat] > 0 else 0.0) for o in out]
    return len(out), max(ends) - min(o[sent] for o in out)  # the job's duration_s, measured alike


def packed_env(where: Path) -> Path:
    """A venv of this Python with rmqgate and every dependency copied in, as a .tar.gz for spark.archives
    (the venv's interpreter links to this machine's Python: the nodes need that Python installed)."""
    import tarfile

    import construct
    import lmdb
    import zstandard

    from rmqgate.spark.ship import _sources
    from rmqgate.spark.standalone import make_bare_python

    env = where / "env"
    python = Path(make_bare_python(env))
    site = next((env / "lib").glob("python3*/site-packages"))
    for mod in (construct, zstandard, lmdb):
        src = Path(mod.__file__).parent if mod.__file__.endswith("__init__.py") else Path(mod.__file__)
        dst = site / src.name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    for arc, path in _sources():
        if arc.split("/")[0] == "rmqgate":
            (site / arc).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, site / arc)
    assert python.exists()
    out = where / "env.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(env, arcname=".")
    return out


def one_master(
    master: str, inputs: list[str], scale: int, target: str, cache: str, conf: list[tuple[str, str]]
) -> dict:
    """One job in this (fresh) process, so the session start-up includes launching the JVM."""
    from rmqgate.spark.job import JobOptions, make_session, run_job

    t = time.perf_counter()
    spark = make_session(master, conf=conf)
    startup = time.perf_counter() - t
    try:
        opts = JobOptions(
            inputs=inputs,
            target=target,
            scale=scale,
            speed=None,
            grace=0.2,
            timeout=10.0,
            frames_cache=cache,
            progress=False,
            startup_s=startup,
            start_delay=3.0,  # every task's Python worker is up and its plans decoded before time zero
        )
        return run_job(spark, opts)
    finally:
        spark.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", default=str(CORPUS / "pcap" / "a_SyncSendPushConsume.pcap"))
    ap.add_argument("--scale", type=int, default=200, help="clones per recorded connection (load size)")
    ap.add_argument("--masters", default="local[1],local[2],standalone[1],standalone[2]")
    ap.add_argument(
        "--ship",
        choices=("zip", "archive"),
        default="zip",
        help="what standalone executors get: the job's code zip or a packed environment (spark.archives)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="runs per master, alternating; the best one counts")
    ap.add_argument("--one", metavar="MASTER", help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--conf", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.one:
        conf = [tuple(c.split("=", 1)) for c in args.conf]
        report = one_master(args.one, [args.input], args.scale, args.target, args.cache, conf)
        print(json.dumps(report))
        return 0

    from rmqgate.spark.responder import start_in_subprocess

    proc, port = start_in_subprocess()
    target = f"127.0.0.1:{port}"
    results = {}
    ms = args.masters.split(",")
    cache = tempfile.mkdtemp(prefix="rmqgate-bench-frames-")
    work = Path(tempfile.mkdtemp(prefix="rmqgate-bench-standalone-"))
    executor_conf = ["spark.executor.memory=512m", "spark.scheduler.minRegisteredResourcesRatio=1"]
    executor_conf += ["spark.locality.wait=0"]
    if any(m.startswith("standalone") for m in ms):
        from rmqgate.spark.standalone import make_bare_python

        if args.ship == "archive":
            t = time.perf_counter()
            archive = packed_env(work)
            print(
                f"packed environment {archive.stat().st_size / 1024:,.0f} KiB, built in "
                f"{time.perf_counter() - t:.1f} s"
            )
            executor_conf += [f"spark.archives={archive}#env", "spark.pyspark.python=./env/bin/python"]
            executor_conf += ["spark.rmqgate.shipCode=false"]
        else:
            executor_conf += [f"spark.pyspark.python={make_bare_python(work / 'bare')}"]
    try:
        n, secs = floor_rate(args.input, args.scale, target)
        floor = n / secs
        print(f"capture {Path(args.input).name} x scale {args.scale}, speed max, target: minimal responder")
        print(
            f"floor: the same plans in one Python process, no Spark: {n} requests in {secs:.2f} s = {floor:,.0f} req/s"
        )
        for master in [m for _ in range(args.repeat) for m in ms]:  # alternate: load drifts alike
            cmd = [
                sys.executable,
                __file__,
                "--one",
                master,
                "--input",
                args.input,
                "--scale",
                str(args.scale),
            ]
            cmd += ["--target", target, "--cache", cache]
            cluster = None
            if master.startswith("standalone["):
                from rmqgate.spark.standalone import StandaloneCluster

                workers = int(master[len("standalone[") : -1])
                t = time.perf_counter()
                cluster = StandaloneCluster(work / f"{master}-{time.time_ns()}", workers=workers).start()
                print(f"{master:>13}: cluster up in {time.perf_counter() - t:.1f} s (not counted below)")
                cmd[cmd.index("--one") + 1] = cluster.master_url
                cmd += [f"--conf={c}" for c in executor_conf]
            try:
                env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
                done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
            finally:
                if cluster is not None:
                    cluster.stop()
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            report = json.loads(done.stdout.strip().splitlines()[-1])
            best = results.get(master)
            if best is None or report["requests_per_s"] > best["requests_per_s"]:
                results[master] = report
            sp = report["spark"]
            overhead = max(0.0, sp["replay_wall_s"] - report["duration_s"])
            fixed = sp["startup_s"] + sp["ingest_s"] + sp["plan_s"] + overhead
            print(
                f"{master:>13}: {report['requests']} requests in {report['duration_s']:.2f} s active = "
                f"{report['requests_per_s']:,.0f} req/s ({report['tasks']} task(s), per task "
                f"{report['per_task_requests_per_s']:,.0f} req/s wall, {report['requests_per_cpu_s']:,.0f} req per "
                f"CPU-s; errors {report['errors']}); "
                f"latency p50 {report['latency_ms']['p50']} ms p99 {report['latency_ms']['p99']} ms"
            )
            print(
                f"{'':>13}  Spark fixed cost {fixed:.1f} s = session start-up {sp['startup_s']:.1f} s + ingest "
                f"{sp['ingest_s']:.1f} s + plan {sp['plan_s']:.1f} s + replay-action overhead {overhead:.1f} s"
                f" (+ aggregation {sp['aggregate_s']:.1f} s after the replay; whole job {sp['job_s']:.1f} s)"
            )
            if sp.get("shipped"):
                print(
                    f"{'':>13}  shipped to executors: {sp['shipped']['bytes'] / 1024:,.0f} KiB zip, built and "
                    f"added in {sp['shipped']['seconds']:.2f} s"
                )
    finally:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"best of {args.repeat} per master: "
        + ", ".join(f"{m} {results[m]['requests_per_s']:,.0f} req/s" for m in ms)
    )
    for one, two in (("local[1]", "local[2]"), ("standalone[1]", "standalone[2]")):
        if one in results and two in results:
            ratio = results[two]["requests_per_s"] / results[one]["requests_per_s"]
            print(
                f"ratio {two}/{one}: {ratio:.2f}x on {os.cpu_count()} cores (the responder shares them; "
                f"load average {os.getloadavg()[0]:.1f})"
            )
    first = results[ms[0]]
    per_task = first["per_task_requests_per_s"]  # one task with a core to itself
    per_cpu = min(r["requests_per_cpu_s"] for r in results.values())
    print(
        f"per-task rate: {per_task:,.0f} req/s wall with {ms[0]} (floor {floor:,.0f}); "
        f"{per_cpu:,.0f} requests per CPU-second of a task (the lowest of the masters' best runs)"
    )
    print(
        f"-> a target rate R needs about ceil(R / {per_cpu:,.0f}) executor cores for the replay tasks "
        "(plus the target's own capacity; tasks are CPU-bound at --speed max)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
