"""``rmqgate replay INPUT --target NAMESRV``: replay a pcap or capture; report as JSON and HTML."""

from __future__ import annotations

import argparse
import asyncio
import base64
import html
import io
import json
import sys
import time
from collections.abc import Sequence

from rmqgate.tools.replay import ReplayOptions, replay_file
from rmqgate.tools.replay_report import Outcome
from rmqgate.wire.codes import request_name


def parse_speed(text: str) -> float | None:
    """``max`` (or inf, 0): as fast as the target answers; else a positive factor (``2`` or ``2x``)."""
    if text.lower() in ("max", "inf", "0"):
        return None
    try:
        value = float(text.rstrip("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"speed must be a positive number or 'max', not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("speed must be positive (or 'max')")
    return value


def parse_connections(value: str) -> int | None:
    if value in ("as-recorded", "recorded"):
        return None
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("connections must be >= 1 or 'as-recorded'")
    return n


def parse_map(items: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for item in items or ():
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {item!r}")
        out[old] = new
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="pcap/pcapng or rmqcap file")
    parser.add_argument("--target", required=True, help="name server of the target, HOST:PORT")
    parser.add_argument(
        "--speed", type=parse_speed, default=1.0, help="1.0 (recorded pace), N (N times), max"
    )
    parser.add_argument(
        "--connections",
        type=parse_connections,
        default=None,
        help="as-recorded (default) or N shared connections",
    )
    parser.add_argument("--topic-map", nargs="*", metavar="OLD=NEW", help="rename topics")
    parser.add_argument(
        "--broker-map", nargs="*", metavar="OLD=NEW", help="recorded broker name -> target name"
    )
    parser.add_argument("--report", help="write the report JSON here")
    parser.add_argument("--html", help="write an HTML report with latency plots here")
    parser.add_argument("--progress", action="store_true", help="show progress even when stderr is not a tty")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a response")
    parser.add_argument(
        "--no-create-topics",
        dest="create_topics",
        action="store_false",
        help="do not create on the target the topics the recording shows already existed",
    )


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = 0.0
        self.start = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.2 and done < total):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        print(f"\rreplay: {done}/{total} requests ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.enabled:
            print(file=sys.stderr)


def render_html(report: dict, outcomes: Sequence[Outcome]) -> str:
    """The report as a standalone HTML page with PNG latency plots embedded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = []
    answered = [o for o in outcomes if o.latency_ms is not None]
    if answered:
        t0 = min(o.sent for o in outcomes)
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for long_poll, color, label in ((False, "tab:blue", "requests"), (True, "tab:orange", "long polls")):
            pts = [(o.sent - t0, o.latency_ms) for o in answered if o.long_poll is long_poll]
            if pts:
                ax.scatter(*zip(*pts, strict=True), s=6, c=color, label=label)
        ax.set_xlabel("replay time (s)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("Latency over time")
        images.append(_png(fig, plt))
        fig, ax = plt.subplots(figsize=(9, 3.5))
        by_code: dict[str, list[float]] = {}
        for o in answered:
            if not o.long_poll:
                by_code.setdefault(request_name(o.code), []).append(o.latency_ms)  # type: ignore[arg-type]
        if by_code:
            names = sorted(by_code, key=lambda n: -len(by_code[n]))[:12]
            ax.boxplot([by_code[n] for n in names], showfliers=False)
            ax.set_xticks(range(1, len(names) + 1), names, rotation=30, ha="right", fontsize=7)
            ax.set_ylabel("latency (ms)")
            ax.set_title("Latency by request code (long polls excluded)")
            fig.tight_layout()
            images.append(_png(fig, plt))
    lat = report["latency_ms"]
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{e['code']}</td><td>{e['count']}</td>"
        f"<td>{html.escape(json.dumps(e['responses']))}</td><td>{html.escape(json.dumps(e['recorded']))}</td>"
        f"<td>{e['mismatches']}</td><td>{e['errors']}</td></tr>"
        for name, e in report["by_code"].items()
    )
    summary = (
        f"<p>{report['requests']} requests, {report['responses']} responses, {report['errors']} errors, "
        f"{report['mismatches']} mismatches in {report['duration_s']:.2f} s "
        f"({report['requests_per_s']:.1f} requests/s). Latency p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, "
        f"p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms.</p>"
    )
    imgs = "".join(f'<img alt="latency plot" src="data:image/png;base64,{b}">' for b in images)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>rmqgate replay report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style></head><body>"
        f"<h1>rmqgate replay: {html.escape(str(report.get('input', '')))}</h1>{summary}{imgs}"
        "<h2>By request code</h2><table><tr><th>request</th><th>code</th><th>count</th><th>responses</th>"
        f"<th>recorded</th><th>mismatches</th><th>errors</th></tr>{rows}</table>"
        f"<h2>Report JSON</h2><pre>{html.escape(json.dumps(report, indent=2))}</pre></body></html>"
    )


def _png(fig, plt) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def run(args: argparse.Namespace) -> int:
    try:
        options = ReplayOptions(
            speed=args.speed,
            connections=args.connections,
            topic_map=parse_map(args.topic_map),
            broker_map=parse_map(args.broker_map),
            request_timeout=args.timeout,
            create_topics=args.create_topics,
        )
    except argparse.ArgumentTypeError as exc:
        print(f"rmqgate replay: {exc}", file=sys.stderr)
        return 2
    progress = _Progress(args.progress or sys.stderr.isatty())
    try:
        report, outcomes = asyncio.run(replay_file(args.input, args.target, options, progress))
    except (OSError, ValueError, ConnectionError, TimeoutError) as exc:
        progress.finish()
        print(f"rmqgate replay: {exc}", file=sys.stderr)
        return 1
    progress.finish()
    text = json.dumps(report, indent=2)
    if args.report:
        with open(args.report, "w") as fp:
            fp.write(text + "\n")
    if args.html:
        with open(args.html, "w") as fp:
            fp.write(render_html(report, outcomes))
    lat = report["latency_ms"]
    print(
        f"{report['requests']} requests, {report['responses']} responses, {report['errors']} errors, "
        f"{report['mismatches']} mismatches, {report['duration_s']:.2f} s ({report['requests_per_s']:.1f}/s), "
        f"latency p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms"
    )
    return 0 if report["errors"] == 0 else 1
