"""The replay's report: one ``Outcome`` per request sent, the ``ReplayResult`` a replay returns, and
``summarize``, the JSON-able report (counts and response codes per request code, mismatches against
the recorded responses, latency percentiles) of any list of outcomes, e.g. merged from Spark tasks."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rmqgate.wire.codes import request_name, response_name


@dataclass(slots=True)
class Outcome:
    conn_id: int
    code: int
    sent: float  # wall-clock seconds (comparable across processes when outcomes are merged)
    done: float | None = None
    response_code: int | None = None
    recorded_code: int | None = None
    error: str | None = None
    long_poll: bool = False
    kind: str = "request"  # or "check_answer"
    topic: str | None = None
    remark: str | None = None  # of the response, kept for mismatches

    @property
    def latency_ms(self) -> float | None:
        return None if self.done is None or self.response_code is None else (self.done - self.sent) * 1e3

    @property
    def mismatch(self) -> bool:
        return (
            self.response_code is not None
            and self.recorded_code is not None
            and self.response_code != self.recorded_code
        )


class ReplayResult(list):
    """The outcomes of a replay, plus ``facts`` about it."""

    def __init__(self, outcomes: Iterable[Outcome] = (), facts: dict | None = None) -> None:
        super().__init__(outcomes)
        self.facts = facts or {}


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def latency_summary(values: Iterable[float]) -> dict[str, float]:
    v = sorted(values)
    return {
        "count": len(v),
        "p50": _percentile(v, 0.5),
        "p90": _percentile(v, 0.9),
        "p99": _percentile(v, 0.99),
        "max": v[-1] if v else 0.0,
        "mean": sum(v) / len(v) if v else 0.0,
    }


def summarize(outcomes: Sequence[Outcome], facts: dict | None = None, max_details: int = 200) -> dict:
    """The replay report (JSON-able) for any list of outcomes (e.g. merged from several tasks)."""
    by_code: dict[str, dict] = {}
    latencies = []
    long_polls = []
    mismatches = []
    errors = Counter()
    responses = 0
    for o in outcomes:
        entry = by_code.setdefault(
            request_name(o.code), {"code": o.code, "count": 0, "responses": Counter(), "recorded": Counter(),
                                   "mismatches": 0, "errors": 0}
        )  # fmt: skip
        entry["count"] += 1
        if o.recorded_code is not None:
            entry["recorded"][response_name(o.recorded_code)] += 1
        if o.response_code is not None:
            responses += 1
            entry["responses"][response_name(o.response_code)] += 1
            (long_polls if o.long_poll else latencies).append(o.latency_ms)
        if o.error:
            entry["errors"] += 1
            errors[o.error] += 1
        if o.mismatch:
            entry["mismatches"] += 1
            if len(mismatches) < max_details:
                mismatches.append({
                    "conn": o.conn_id, "request": request_name(o.code), "topic": o.topic, "remark": o.remark,
                    "recorded": response_name(o.recorded_code), "got": response_name(o.response_code),
                })  # fmt: skip
    for entry in by_code.values():
        entry["responses"] = dict(entry["responses"])
        entry["recorded"] = dict(entry["recorded"])
    sent = [o.sent for o in outcomes]
    done = [o.done for o in outcomes if o.done is not None]
    duration = (max(done) - min(sent)) if sent and done else 0.0
    report = {
        "requests": len(outcomes),
        "responses": responses,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "mismatches": sum(e["mismatches"] for e in by_code.values()),
        "mismatch_details": mismatches,
        "by_code": dict(sorted(by_code.items(), key=lambda kv: -kv[1]["count"])),
        "latency_ms": latency_summary(latencies),
        "long_poll_latency_ms": latency_summary(long_polls),
        "duration_s": duration,
        "requests_per_s": len(outcomes) / duration if duration > 0 else 0.0,
    }
    if facts:
        report.update({k: v for k, v in facts.items() if k != "duration_s"})
        report["duration_s"] = facts.get("duration_s", duration)
        if report["duration_s"]:
            report["requests_per_s"] = len(outcomes) / report["duration_s"]
    return report
