"""``rmqgate capture``: statistics, conversion and a frame listing for capture files (and pcaps).

``stats FILE`` prints the request mix by code and by topic, sizes, connections, duration and rates;
``convert FILE.pcap -o FILE.rmqcap`` writes a capture; ``dump FILE`` lists the frames.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rmqgate.tools.capture import DIRECTION_NAMES, ROLE_NAMES, Kind
from rmqgate.tools.traffic import convert_pcap, iter_records
from rmqgate.wire.codes import request_name, response_name
from rmqgate.wire.command import RESPONSE_FLAG
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import decode_frame

#: extFields naming the topic of a request (SEND_MESSAGE_V2 and friends use ``b``).
_TOPIC_KEYS = ("topic", "b")
_V2_SEND_CODES = frozenset({310, 320, 325})


def request_topic(code: int, ext: dict[str, str] | None) -> str | None:
    if not ext:
        return None
    if code in _V2_SEND_CODES:
        return ext.get("b")
    return ext.get("topic")


@dataclass
class CodeStats:
    count: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    responses: Counter = field(default_factory=Counter)


@dataclass
class TopicStats:
    requests: int = 0
    bytes: int = 0
    codes: Counter = field(default_factory=Counter)


def compute_stats(path: str | os.PathLike[str]) -> dict:
    """Aggregate a capture (or pcap) into a JSON-able dict."""
    by_code: dict[int, CodeStats] = defaultdict(CodeStats)
    by_topic: dict[str, TopicStats] = defaultdict(TopicStats)
    conns: dict[int, dict] = {}
    pending: dict[tuple[int, int, int], int] = {}  # (conn, request direction, opaque) -> code
    frames = Counter()
    bytes_by_dir = Counter()
    undecodable = 0
    server_requests = Counter()
    first = last = None
    for rec in iter_records(path):
        if first is None:
            first = rec.ts
        last = rec.ts if last is None else max(last, rec.ts)
        if rec.kind == Kind.CONN_OPEN:
            conns[rec.conn_id] = {"role": ROLE_NAMES.get(rec.role, "?"), **rec.meta}
            continue
        if rec.kind != Kind.FRAME:
            continue
        conns.setdefault(rec.conn_id, {"role": ROLE_NAMES.get(rec.role, "?")})
        dname = DIRECTION_NAMES.get(rec.direction, "?")
        frames[dname] += 1
        bytes_by_dir[dname] += len(rec.data)
        try:
            cmd = decode_frame(rec.data)
        except CodecError:
            undecodable += 1
            continue
        if cmd.flag & RESPONSE_FLAG:
            code = pending.pop((rec.conn_id, rec.direction ^ 1, cmd.opaque), None)
            if code is not None and rec.direction == 1:
                st = by_code[code]
                st.responses[response_name(cmd.code)] += 1
                st.response_bytes += len(rec.data)
            continue
        pending[(rec.conn_id, rec.direction, cmd.opaque)] = cmd.code
        if rec.direction == 1:
            server_requests[request_name(cmd.code)] += 1
            continue
        st = by_code[cmd.code]
        st.count += 1
        st.request_bytes += len(rec.data)
        topic = request_topic(cmd.code, cmd.ext_fields)
        if topic is not None:
            ts = by_topic[topic]
            ts.requests += 1
            ts.bytes += len(rec.data)
            ts.codes[request_name(cmd.code)] += 1
    duration = (last - first) if first is not None else 0.0
    requests = sum(s.count for s in by_code.values())
    rate = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    roles = Counter(c["role"] for c in conns.values())
    return {
        "file": str(path),
        "start": first,
        "duration_s": duration,
        "connections": len(conns),
        "connections_by_role": dict(roles),
        "frames": dict(frames),
        "bytes": dict(bytes_by_dir),
        "undecodable_frames": undecodable,
        "requests": requests,
        "requests_per_s": rate(requests),
        "server_requests": dict(server_requests),
        "by_code": {
            request_name(code): {
                "code": code,
                "count": s.count,
                "share": s.count / requests if requests else 0.0,
                "per_s": rate(s.count),
                "avg_request_bytes": s.request_bytes / s.count if s.count else 0,
                "avg_response_bytes": (s.response_bytes / sum(s.responses.values())) if s.responses else 0,
                "responses": dict(s.responses),
            }
            for code, s in sorted(by_code.items(), key=lambda kv: -kv[1].count)
        },
        "by_topic": {
            topic: {
                "requests": t.requests,
                "bytes": t.bytes,
                "per_s": rate(t.requests),
                "codes": dict(t.codes),
            }
            for topic, t in sorted(by_topic.items(), key=lambda kv: -kv[1].requests)
        },
    }


def _table(headers: list[str], rows: list[list[object]], out=None) -> None:
    out = out or sys.stdout
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ),
            file=out,
        )
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def print_stats(stats: dict, out=None) -> None:
    out = out or sys.stdout
    start = stats["start"]
    when = datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds") if start else "-"
    print(f"file         {stats['file']}", file=out)
    print(f"start        {when}", file=out)
    print(f"duration     {stats['duration_s']:.3f} s", file=out)
    roles = ", ".join(f"{n} {r}" for r, n in sorted(stats["connections_by_role"].items()))
    print(f"connections  {stats['connections']} ({roles})", file=out)
    fr, by = stats["frames"], stats["bytes"]
    print(
        f"frames       {fr.get('c2s', 0)} c2s / {fr.get('s2c', 0)} s2c; "
        f"bytes {by.get('c2s', 0)} c2s / {by.get('s2c', 0)} s2c",
        file=out,
    )
    print(f"requests     {stats['requests']} ({stats['requests_per_s']:.1f}/s)", file=out)
    if stats["undecodable_frames"]:
        print(f"undecodable  {stats['undecodable_frames']} frames", file=out)
    if stats["server_requests"]:
        srv = ", ".join(f"{k} x{v}" for k, v in stats["server_requests"].items())
        print(f"server-initiated  {srv}", file=out)
    print(file=out)
    rows = []
    for name, s in stats["by_code"].items():
        resp = " ".join(f"{k}:{v}" for k, v in sorted(s["responses"].items(), key=lambda kv: -kv[1]))
        rows.append([
            name, s["code"], s["count"], f"{100 * s['share']:.1f}%", f"{s['per_s']:.2f}",
            round(s["avg_request_bytes"]), round(s["avg_response_bytes"]), resp or "-",
        ])  # fmt: skip
    _table(["request", "code", "count", "share", "per_s", "avg_req_B", "avg_resp_B", "responses"], rows, out)
    if stats["by_topic"]:
        print(file=out)
        rows = [
            [topic, t["requests"], f"{t['per_s']:.2f}", t["bytes"],
             " ".join(f"{k}:{v}" for k, v in sorted(t["codes"].items(), key=lambda kv: -kv[1]))]
            for topic, t in stats["by_topic"].items()
        ]  # fmt: skip
        _table(["topic", "requests", "per_s", "bytes", "codes"], rows, out)


def dump(path: str, out=None) -> None:
    out = out or sys.stdout
    for rec in iter_records(path):
        if rec.kind != Kind.FRAME:
            what = "open" if rec.kind == Kind.CONN_OPEN else "close"
            print(
                f"{rec.ts:.6f} #{rec.conn_id} {what} {ROLE_NAMES.get(rec.role, '?')} {rec.meta or ''}",
                file=out,
            )
            continue
        try:
            cmd = repr(decode_frame(rec.data))
        except CodecError as exc:
            cmd = f"<undecodable: {exc}>"
        print(f"{rec.ts:.6f} #{rec.conn_id} {DIRECTION_NAMES.get(rec.direction)} {cmd}", file=out)


def add_pcap_convert(sub: argparse._SubParsersAction) -> None:
    """The ``rmqgate pcap convert FILE.pcap -o FILE.rmqcap`` action (registered by pcap_cli)."""
    p = sub.add_parser("convert", help="convert a pcap to an rmqgate capture file (.rmqcap)")
    p.add_argument("file", help="libpcap or pcapng capture")
    p.add_argument("-o", "--output", required=True, help="capture file to write")
    p.set_defaults(_pcap_action=_pcap_convert)


def _pcap_convert(args: argparse.Namespace) -> int:
    try:
        n = convert_pcap(args.file, args.output)
    except (OSError, ValueError) as exc:
        print(f"rmqgate pcap convert: {exc}", file=sys.stderr)
        return 1
    print(f"{n} frames written to {args.output}", file=sys.stderr)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="capture_command", metavar="ACTION", required=True)
    p = sub.add_parser("stats", help="request mix, sizes, connections, duration and rates")
    p.add_argument("file", help="capture (.rmqcap) or pcap file")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p = sub.add_parser("convert", help="convert a pcap to a capture file")
    p.add_argument("file", help="pcap or pcapng file")
    p.add_argument("-o", "--output", required=True, help="capture file to write")
    p = sub.add_parser("dump", help="list the frames of a capture or pcap")
    p.add_argument("file")


def run(args: argparse.Namespace) -> int:
    try:
        if args.capture_command == "stats":
            stats = compute_stats(args.file)
            if args.json:
                json.dump(stats, sys.stdout, indent=2)
                print()
            else:
                print_stats(stats)
        elif args.capture_command == "convert":
            n = convert_pcap(args.file, args.output)
            print(f"{n} frames written to {args.output}", file=sys.stderr)
        else:
            dump(args.file)
    except (OSError, ValueError) as exc:
        print(f"rmqgate capture: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    return 0
