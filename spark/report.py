"""Aggregation of replay outcomes (Spark SQL) and the HTML/PNG report (matplotlib).

The report dict has ``rmqgate replay``'s keys (requests, responses, errors, by_code, latency_ms,
mismatches, duration_s) plus what a distributed run adds: throughput over time, latency by request
code, per-task rates, error samples and the Spark timings.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from rmqgate.spark.executor import ERROR_STATUSES
from rmqgate.wire.codes import request_name, response_name

PERCENTILES = (0.5, 0.9, 0.99)
#: percentile_approx accuracy: rank error at most 1/ACCURACY of the count, in bounded memory per group
#: (exact percentiles would collect every latency of a code on one executor).
ACCURACY = 10000


def _lat(p: list[float] | None, mx: float | None, n: int = 0, mean: float | None = None) -> dict[str, float]:
    vals = list(p) if p else [0.0, 0.0, 0.0]
    out: dict[str, float] = {"count": n}
    out.update({f"p{round(q * 100)}": round(v or 0.0, 3) for q, v in zip(PERCENTILES, vals, strict=True)})
    out["max"] = round(mx or 0.0, 3)
    out["mean"] = round(mean or 0.0, 3)
    return out


def aggregate(outcomes: Any) -> dict[str, Any]:
    """Aggregate an outcomes DataFrame (executor.OUTCOME_COLUMNS) into the report dict.

    Keys as ``rmqgate replay``'s summarize(): by_code is keyed by request name and counts response
    codes by name (``responses`` replayed, ``recorded`` in the capture). Five Spark queries.
    """
    from pyspark.sql import functions as F

    df = outcomes
    ok = F.col("status") == "ok"
    short = ok & ~F.col("long_poll")  # latency percentiles leave held pulls out, as rmqgate replay
    end_s = F.when(ok, F.col("sent_s") + F.col("latency_ms") / 1000.0).otherwise(F.col("sent_s"))
    qs = F.array(*[F.lit(q) for q in PERCENTILES])

    # 1. a small table: everything countable
    cells = (
        df.groupBy("code", "status", "resp_code", "expected", "mismatch")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("messages").alias("messages"),
            F.sum("req_bytes").alias("bytes_out"),
            F.sum("resp_bytes").alias("bytes_in"),
        )
        .collect()
    )
    # 2. latency overall (code null) and by code, and the time span, in one rollup
    long_ok = ok & F.col("long_poll")
    lat_rows = (
        df.rollup("code")
        .agg(
            F.percentile_approx(F.when(short, F.col("latency_ms")), qs, ACCURACY).alias("p"),
            F.max(F.when(short, F.col("latency_ms"))).alias("mx"),
            F.avg(F.when(short, F.col("latency_ms"))).alias("mean"),
            F.sum(short.cast("int")).alias("n"),
            F.percentile_approx(F.when(long_ok, F.col("latency_ms")), qs, ACCURACY).alias("lp"),
            F.max(F.when(long_ok, F.col("latency_ms"))).alias("lmx"),
            F.avg(F.when(long_ok, F.col("latency_ms"))).alias("lmean"),
            F.sum(long_ok.cast("int")).alias("ln"),
            F.min("sent_s").alias("first_s"),
            F.max(end_s).alias("last_s"),
            F.countDistinct("conn", "clone").alias("connections"),
            F.countDistinct("task").alias("tasks"),
        )
        .collect()
    )
    overall = next(r for r in lat_rows if r["code"] is None)
    first_s = overall["first_s"] or 0.0
    duration = max(0.0, (overall["last_s"] or 0.0) - first_s)

    requests = responses = errors = mismatches = 0
    status: dict[str, int] = {}
    by_code: dict[str, dict[str, Any]] = {}
    stored = bytes_out = bytes_in = 0
    mismatch_details: dict[tuple[str, str, str], int] = {}
    for c in cells:
        n = int(c["n"])
        name = request_name(c["code"])
        e = by_code.setdefault(
            name,
            {
                "code": int(c["code"]),
                "count": 0,
                "responses": {},
                "recorded": {},
                "mismatches": 0,
                "errors": 0,
            },
        )
        e["count"] += n
        requests += n
        status[c["status"]] = status.get(c["status"], 0) + n
        bytes_out += int(c["bytes_out"] or 0)
        bytes_in += int(c["bytes_in"] or 0)
        if c["expected"] >= 0:
            rec = response_name(c["expected"])
            e["recorded"][rec] = e["recorded"].get(rec, 0) + n
        if c["resp_code"] >= 0:
            got = response_name(c["resp_code"])
            e["responses"][got] = e["responses"].get(got, 0) + n
        if c["status"] == "ok":
            responses += n
            if c["resp_code"] == 0:
                stored += int(c["messages"] or 0)
        if c["status"] in ERROR_STATUSES:
            errors += n
            e["errors"] += n
        if c["mismatch"]:
            mismatches += n
            e["mismatches"] += n
            key = (name, response_name(c["expected"]), response_name(c["resp_code"]))
            mismatch_details[key] = mismatch_details.get(key, 0) + n
    for r in lat_rows:
        if r["code"] is not None:
            by_code[request_name(r["code"])]["latency_ms"] = _lat(
                r["p"], r["mx"], int(r["n"] or 0), r["mean"]
            )

    report: dict[str, Any] = {
        "requests": requests,
        "responses": responses,
        "errors": errors,
        "error_kinds": {},
        "mismatches": mismatches,
        "mismatch_details": [
            {"request": k[0], "recorded": k[1], "got": k[2], "count": v}
            for k, v in sorted(mismatch_details.items(), key=lambda kv: -kv[1])
        ],
        "by_code": dict(sorted(by_code.items(), key=lambda kv: -kv[1]["count"])),
        "latency_ms": _lat(overall["p"], overall["mx"], int(overall["n"] or 0), overall["mean"]),
        "long_poll_latency_ms": _lat(
            overall["lp"], overall["lmx"], int(overall["ln"] or 0), overall["lmean"]
        ),
        "duration_s": round(duration, 3),
        "requests_per_s": round(requests / duration, 1) if duration > 0 else 0.0,
        "status": status,
        "oneway": status.get("oneway", 0),
        "unanswered": status.get("unanswered", 0),
        "connections": int(overall["connections"] or 0),
        "tasks": int(overall["tasks"] or 0),
        "messages_stored": stored,
        "bytes_out": bytes_out,
        "bytes_in": bytes_in,
    }
    # 3. what went wrong, most frequent first
    if errors:
        report["error_kinds"] = {
            f"{r['status']}: {r['error']}": int(r["count"])
            for r in df.where(F.col("status").isin(*ERROR_STATUSES))
            .groupBy("status", "error")
            .count()
            .orderBy(F.desc("count"))
            .limit(20)
            .collect()
        }
    # 4. throughput over time: about 50 buckets over the replay, as requests sent per second
    bucket = max(0.05, round(duration / 50, 2)) if duration > 0 else 1.0
    report["throughput_bucket_s"] = bucket
    report["throughput"] = [
        {
            "t": round(int(r["b"]) * bucket, 3),
            "requests": int(r["count"]),
            "per_s": round(r["count"] / bucket, 1),
        }
        for r in df.groupBy(F.floor((F.col("sent_s") - F.lit(first_s)) / F.lit(bucket)).alias("b"))
        .count()
        .orderBy("b")
        .collect()
    ]
    # 5. per Spark task
    tasks = []
    for r in (
        df.groupBy("task")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("sent_s").alias("a"),
            F.max(end_s).alias("b"),
            F.countDistinct("conn", "clone").alias("c"),
            F.max("task_cpu_s").alias("cpu"),
            F.first("executor").alias("executor"),
        )
        .orderBy("task")
        .collect()
    ):
        span = max(0.0, r["b"] - r["a"])
        tasks.append(
            {
                "task": int(r["task"]),
                "executor": r["executor"],
                "requests": int(r["n"]),
                "connections": int(r["c"]),
                "start_s": round(r["a"] - first_s, 3),
                "active_s": round(span, 3),
                "requests_per_s": round(r["n"] / span, 1) if span > 0 else None,
                "cpu_s": round(r["cpu"] or 0.0, 3),
                "requests_per_cpu_s": round(r["n"] / r["cpu"], 1) if r["cpu"] else None,
            }
        )
    report["per_task"] = tasks
    cpu = sum(t["cpu_s"] for t in tasks)
    report["requests_per_cpu_s"] = round(requests / cpu, 1) if cpu > 0 else None
    rates = [t["requests_per_s"] for t in tasks if t["requests_per_s"]]
    report["per_task_requests_per_s"] = round(sum(rates) / len(rates), 1) if rates else None
    return report


# --- rendering ------------------------------------------------------------------------------------


def render_png(report: dict[str, Any], path: str | Path | None = None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    tp = report.get("throughput") or []
    axes[0].plot([p["t"] for p in tp], [p["per_s"] for p in tp], marker=".", lw=1)
    axes[0].set(title="Requests sent per second", xlabel="seconds from start", ylabel="requests/s")
    axes[0].grid(alpha=0.3)
    codes = [
        (k, v["latency_ms"])
        for k, v in report.get("by_code", {}).items()
        if v.get("latency_ms", {}).get("count")
    ]
    names = [c[0] for c in codes]
    x = range(len(codes))
    width = 0.27
    for i, key in enumerate(("p50", "p90", "p99")):
        axes[1].bar([xi + (i - 1) * width for xi in x], [c[1][key] for c in codes], width, label=key)
    axes[1].set_xticks(list(x), names, rotation=40, ha="right", fontsize=7)
    axes[1].set(title="Latency by request code", ylabel="ms")
    axes[1].legend()
    axes[1].grid(alpha=0.3, axis="y")
    tasks = report.get("per_task") or []
    axes[2].bar([str(t["task"]) for t in tasks], [t["requests_per_s"] or 0 for t in tasks])
    axes[2].set(title="Requests/s per Spark task", xlabel="task", ylabel="requests/s")
    axes[2].grid(alpha=0.3, axis="y")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    data = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def render_html(report: dict[str, Any], png: bytes) -> str:
    def row(cells: list[Any], tag: str = "td") -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells) + "</tr>"

    lat = report.get("latency_ms", {})
    summary = [
        ("requests", report.get("requests")),
        ("responses", report.get("responses")),
        ("errors", report.get("errors")),
        ("mismatches", report.get("mismatches")),
        ("duration_s", report.get("duration_s")),
        ("requests/s", report.get("requests_per_s")),
        (
            "latency p50/p90/p99/max ms",
            f"{lat.get('p50')} / {lat.get('p90')} / {lat.get('p99')} / {lat.get('max')}",
        ),
        ("connections", report.get("connections")),
        ("Spark", json.dumps(report.get("spark", {}))),
    ]
    codes = [
        row(
            [
                f"{k} ({v['code']})",
                v["count"],
                json.dumps(v["responses"]),
                json.dumps(v["recorded"]),
                v["errors"],
                v["mismatches"],
                v.get("latency_ms", {}).get("p50"),
                v.get("latency_ms", {}).get("p99"),
            ]
        )
        for k, v in report.get("by_code", {}).items()
    ]
    img = base64.b64encode(png).decode()
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>rmqgate spark-replay report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}</style></head><body>"
        "<h1>rmqgate spark-replay</h1><table>"
        + "".join(row([k, v]) for k, v in summary)
        + "</table><h2>By request code</h2><table>"
        + row(["request", "count", "responses", "recorded", "errors", "mismatches", "p50 ms", "p99 ms"], "th")
        + "".join(codes)
        + f"</table><img alt='plots' src='data:image/png;base64,{img}'></body></html>"
    )


def write_outputs(report: dict[str, Any], json_path: str | None, html_path: str | None) -> None:
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    if html_path:
        png_path = Path(html_path).with_suffix(".png")
        png = render_png(report, png_path)
        Path(html_path).write_text(render_html(report, png))
