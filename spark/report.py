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


def _lat(p: list[float] | None, mx: float | None) -> dict[str, float | None]:
    vals = list(p) if p else [None, None, None]
    out = {
        f"p{round(q * 100)}": (round(v, 3) if v is not None else None)
        for q, v in zip(PERCENTILES, vals, strict=True)
    }
    out["max"] = round(mx, 3) if mx is not None else None
    return out


def aggregate(outcomes: Any) -> dict[str, Any]:
    """Aggregate an outcomes DataFrame (executor.OUTCOME_COLUMNS) into the report dict."""
    from pyspark.sql import functions as F

    df = outcomes
    ok = F.col("status") == "ok"
    is_error = F.col("status").isin(*ERROR_STATUSES)
    pct = F.percentile(F.col("latency_ms"), F.array(*[F.lit(q) for q in PERCENTILES]))
    totals = df.agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(ok.cast("int")).alias("responses"),
        F.sum(is_error.cast("int")).alias("errors"),
        F.sum(F.col("mismatch").cast("int")).alias("mismatches"),
        F.sum((F.col("status") == "oneway").cast("int")).alias("oneway"),
        F.sum((F.col("status") == "unanswered").cast("int")).alias("unanswered"),
        F.min("sent_s").alias("first_s"),
        F.max(F.when(ok, F.col("sent_s") + F.col("latency_ms") / 1000.0).otherwise(F.col("sent_s"))).alias(
            "last_s"
        ),
        F.countDistinct("conn", "clone").alias("connections"),
        F.countDistinct("task").alias("tasks"),
        F.sum(F.when(ok & (F.col("resp_code") == 0), F.col("messages")).otherwise(0)).alias(
            "messages_stored"
        ),
        F.sum("req_bytes").alias("bytes_out"),
        F.sum("resp_bytes").alias("bytes_in"),
    ).first()
    lat = df.where(ok).agg(pct.alias("p"), F.max("latency_ms").alias("mx")).first()
    requests = int(totals["requests"] or 0)
    first_s = totals["first_s"] or 0.0
    duration = max(0.0, (totals["last_s"] or 0.0) - first_s)
    report: dict[str, Any] = {
        "requests": requests,
        "responses": int(totals["responses"] or 0),
        "errors": int(totals["errors"] or 0),
        "mismatches": int(totals["mismatches"] or 0),
        "oneway": int(totals["oneway"] or 0),
        "unanswered": int(totals["unanswered"] or 0),
        "connections": int(totals["connections"] or 0),
        "tasks": int(totals["tasks"] or 0),
        "messages_stored": int(totals["messages_stored"] or 0),
        "bytes_out": int(totals["bytes_out"] or 0),
        "bytes_in": int(totals["bytes_in"] or 0),
        "duration_s": round(duration, 3),
        "requests_per_s": round(requests / duration, 1) if duration > 0 else None,
        "latency_ms": _lat(lat["p"], lat["mx"]),
    }

    by_code: dict[str, dict[str, Any]] = {}
    for r in (
        df.groupBy("code")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.col("mismatch").cast("int")).alias("mm"),
            F.sum(is_error.cast("int")).alias("err"),
            F.max(F.when(ok, F.col("latency_ms"))).alias("mx"),
            F.percentile(F.when(ok, F.col("latency_ms")), F.array(*[F.lit(q) for q in PERCENTILES])).alias(
                "p"
            ),
        )
        .collect()
    ):
        by_code[str(r["code"])] = {
            "name": request_name(r["code"]),
            "count": int(r["n"]),
            "responses": {},
            "errors": int(r["err"] or 0),
            "mismatches": int(r["mm"] or 0),
            "latency_ms": _lat(r["p"] if r["mx"] is not None else None, r["mx"]),
        }
    for r in df.where(F.col("resp_code") >= 0).groupBy("code", "resp_code").count().collect():
        by_code[str(r["code"])]["responses"][str(r["resp_code"])] = int(r["count"])
    report["by_code"] = dict(sorted(by_code.items(), key=lambda kv: int(kv[0])))

    report["status"] = {r["status"]: int(r["count"]) for r in df.groupBy("status").count().collect()}
    mism = (
        df.where(F.col("mismatch"))
        .groupBy("code", "expected", "resp_code")
        .count()
        .orderBy(F.desc("count"))
        .limit(20)
        .collect()
    )
    report["mismatch_detail"] = [
        {
            "code": request_name(r["code"]),
            "recorded": response_name(r["expected"]),
            "replayed": response_name(r["resp_code"]),
            "count": int(r["count"]),
        }
        for r in mism
    ]
    report["error_samples"] = [
        {
            "status": r["status"],
            "code": request_name(r["code"]),
            "error": r["error"],
            "count": int(r["count"]),
        }
        for r in df.where(is_error)
        .groupBy("status", "code", "error")
        .count()
        .orderBy(F.desc("count"))
        .limit(10)
        .collect()
    ]
    report["throughput"] = [
        {"t": int(r["t"]), "requests": int(r["count"])}
        for r in df.groupBy(F.floor(F.col("sent_s") - F.lit(first_s)).alias("t"))
        .count()
        .orderBy("t")
        .collect()
    ]
    tasks = []
    for r in (
        df.groupBy("task")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("sent_s").alias("a"),
            F.max(
                F.when(ok, F.col("sent_s") + F.col("latency_ms") / 1000.0).otherwise(F.col("sent_s"))
            ).alias("b"),
            F.countDistinct("conn", "clone").alias("c"),
        )
        .orderBy("task")
        .collect()
    ):
        span = max(0.0, r["b"] - r["a"])
        tasks.append(
            {
                "task": int(r["task"]),
                "requests": int(r["n"]),
                "connections": int(r["c"]),
                "start_s": round(r["a"] - first_s, 3),
                "active_s": round(span, 3),
                "requests_per_s": round(r["n"] / span, 1) if span > 0 else None,
            }
        )
    report["per_task"] = tasks
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
    axes[0].plot([p["t"] for p in tp], [p["requests"] for p in tp], marker="o", lw=1)
    axes[0].set(title="Requests sent per second", xlabel="seconds from start", ylabel="requests/s")
    axes[0].grid(alpha=0.3)
    codes = [
        (v["name"], v["latency_ms"])
        for v in report.get("by_code", {}).values()
        if v["latency_ms"]["p50"] is not None
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
                f"{v['name']} ({k})",
                v["count"],
                json.dumps(v["responses"]),
                v["errors"],
                v["mismatches"],
                v["latency_ms"]["p50"],
                v["latency_ms"]["p99"],
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
        + row(["request", "count", "response codes", "errors", "mismatches", "p50 ms", "p99 ms"], "th")
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
