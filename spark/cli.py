"""``rmqgate spark-replay``: replay captures at scale on Spark (local mode by default).

Same options and report keys as ``rmqgate replay`` plus Spark's (--master, --scale, --partitions,
--conf). ``spark-submit spark/replay_job.py`` takes the same arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rmqgate.spark.job import JobError, JobOptions, make_session, probe_target, run_job
from rmqgate.tools.replay_cli import parse_map, parse_speed


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="pcap / capture files or frames .parquet (any Hadoop URI)"
    )
    p.add_argument(
        "--target", required=True, metavar="NAMESRV_HOST:PORT", help="name server of the cluster to load"
    )
    p.add_argument(
        "--speed", type=parse_speed, default=1.0, metavar="1.0|N|max", help="time scale (max: no pacing)"
    )
    p.add_argument(
        "--topic-map", nargs="*", action="extend", default=[], metavar="OLD=NEW", help="rename topics"
    )
    p.add_argument(
        "--broker-map",
        nargs="*",
        action="extend",
        default=[],
        metavar="OLD=NEW",
        help="recorded broker -> target",
    )
    p.add_argument(
        "--connections",
        default="as-recorded",
        help="as-recorded only: each task opens the recorded connections (use --scale to multiply them)",
    )
    p.add_argument("--report", metavar="FILE.json", help="write the report as JSON")
    p.add_argument("--html", metavar="FILE.html", help="write an HTML report (plots also as FILE.png)")
    p.add_argument(
        "--progress", action="store_true", help="accepted for rmqgate replay compatibility (always on)"
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a recorded response (10)")
    p.add_argument(
        "--grace",
        type=float,
        default=1.0,
        help="seconds requests the capture never saw answered stay open (1)",
    )
    g = p.add_argument_group("Spark")
    g.add_argument(
        "--master", default=None, help="Spark master (default local[2]; spark-submit's when under it)"
    )
    g.add_argument(
        "--scale", type=int, default=1, metavar="N", help="clone each connection N times (distinct ids)"
    )
    g.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="replay tasks (default: the task slots the executors have)",
    )
    g.add_argument(
        "--conf", type=_pair, action="append", default=[], metavar="KEY=VALUE", help="Spark setting"
    )
    g.add_argument(
        "--frames-cache", metavar="DIR", help="where decoded Parquet frames are kept (default: tmp)"
    )
    g.add_argument("--outcomes", metavar="DIR", help="write per-request outcomes as Parquet here")
    g.add_argument("--start-delay", type=float, default=1.0, help="seconds between scheduling and time zero")
    g.add_argument("--verbose-spark", action="store_true", help="keep Spark's own log (default: errors only)")
    g.add_argument("--quiet", action="store_true", help="no progress lines, no summary JSON on stdout")


def options_from_args(args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        inputs=list(args.inputs),
        target=args.target,
        scale=args.scale,
        speed=args.speed,
        partitions=args.partitions,
        timeout=args.timeout,
        grace=args.grace,
        start_delay=args.start_delay,
        topic_map=parse_map(args.topic_map),
        broker_map=parse_map(args.broker_map),
        frames_cache=args.frames_cache,
        outcomes=args.outcomes,
        report=args.report,
        html=args.html,
        progress=not args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    from rmqgate.spark.job import under_spark_submit

    try:
        if args.connections not in ("as-recorded", "recorded"):
            raise JobError("--connections: the Spark job replays as-recorded connections; use --scale N")
        opts = options_from_args(args)
        opts.masters = probe_target(opts.target)  # fail fast, before Spark starts
        master = args.master or (None if under_spark_submit() else "local[2]")
        t = time.perf_counter()
        spark = make_session(master, conf=args.conf, quiet=not args.verbose_spark)
        opts.startup_s = time.perf_counter() - t
        try:
            report = run_job(spark, opts)
        finally:
            spark.stop()
    except (JobError, argparse.ArgumentTypeError) as exc:
        print(f"rmqgate spark-replay: {exc}", file=sys.stderr)
        return 2
    if not args.quiet and not args.report:
        json.dump(
            {k: v for k, v in report.items() if k not in ("per_task", "throughput")}, sys.stdout, indent=2
        )
        print()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmqgate spark-replay", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
