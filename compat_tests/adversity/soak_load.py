"""The soak scenario's load: corpus captures replayed over and over, several at once, with
``rmqgate replay``'s engine (tools/replay.py) at ``--speed max``, for a given time.

Run in its own process so the sampling test and the load do not share an interpreter:

    python -m rmqgate.compat_tests.adversity.soak_load --target HOST:PORT --seconds 1800 --out L.jsonl

Every ``--interval`` seconds one JSON line goes to ``--out``: the requests whose replay finished in
that interval, their latency percentiles (long polls left out, as the replay report does), errors
and response codes that differ from the recording's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path

from rmqgate.tools.replay import ReplayOptions, discover_brokers, prepare_target, replay_connections
from rmqgate.tools.replay_plan import Plan, load_plan
from rmqgate.tools.replay_report import Outcome, latency_summary

CORPUS = Path(os.environ.get("RMQGATE_CORPUS", Path(__file__).resolve().parents[3] / "shared" / "corpus"))
#: Left out: i_LargeBody* (4 MiB bodies would make the soak a disk-fill test).
CAPTURES = sorted(p for p in CORPUS.glob("pcap*/*.pcap") if not p.name.startswith("i_"))


def interval_line(elapsed: float, outcomes: list[Outcome], replays: int) -> dict[str, object]:
    """One interval's figures from the outcomes of the replays that finished in it."""
    latencies = [o.latency_ms for o in outcomes if o.latency_ms is not None and not o.long_poll]
    lat = latency_summary(latencies)  # type: ignore[arg-type]
    errors = Counter(o.error for o in outcomes if o.error)
    return {
        "t": round(elapsed, 1),
        "replays": replays,
        "requests": len(outcomes),
        "answered": sum(1 for o in outcomes if o.response_code is not None),
        "p50_ms": round(lat["p50"], 3),
        "p99_ms": round(lat["p99"], 3),
        "max_ms": round(lat["max"], 3),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "mismatches": sum(1 for o in outcomes if o.mismatch),
    }


async def soak(target: str, seconds: float, interval: float, workers: int, out: Path) -> None:
    plans: list[Plan] = [load_plan(p) for p in CAPTURES]
    if not plans:
        raise SystemExit(f"no captures under {CORPUS}")
    for plan in plans:
        await prepare_target(plan.preexisting_topics, target)
    brokers = await discover_brokers(target)
    options = ReplayOptions(speed=None, request_timeout=10.0)
    done: list[Outcome] = []
    replays = 0
    start = time.monotonic()
    deadline = start + seconds

    async def worker(first: int) -> None:
        nonlocal replays
        k = first
        while time.monotonic() < deadline:
            plan = plans[k % len(plans)]
            k += workers
            result = await replay_connections(
                plan.replayable, target, options, plan_start=plan.start, brokers=brokers
            )
            done.extend(result)
            replays += 1

    async def reporter() -> None:
        nonlocal done, replays
        with out.open("a") as f:
            while True:
                await asyncio.sleep(interval)
                batch, done = done, []
                count, replays = replays, 0
                f.write(json.dumps(interval_line(time.monotonic() - start, batch, count)) + "\n")
                f.flush()

    report = asyncio.create_task(reporter())
    await asyncio.gather(*(worker(i) for i in range(workers)))
    report.cancel()
    with out.open("a") as f:  # the tail since the last full interval
        f.write(json.dumps(interval_line(time.monotonic() - start, done, replays) | {"tail": True}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="name server HOST:PORT")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=4, help="replays running at once")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, one per interval")
    args = parser.parse_args()
    asyncio.run(soak(args.target, args.seconds, args.interval, args.workers, args.out))


if __name__ == "__main__":
    main()
