"""``rmqgate pcap``: decode RocketMQ traffic in libpcap/pcapng captures (one line per frame).

Actions register in ``ACTIONS``; ``decode`` prints frames, further actions plug in
the same way (``convert``, ``dissector``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from rmqgate.tools.pcap import CapturedFrame, PcapError, Truncated, read_frames
from rmqgate.wire.codes import LanguageCode, SerializeType, request_name, response_name
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand

_EXT_VALUE_MAX = 48
_EXT_TOTAL_MAX = 240
_REMARK_MAX = 120


def _add_decode(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "decode",
        help="print one line per RocketMQ frame",
        description="Reassemble the TCP streams of a capture and print one line per RocketMQ frame. "
        "Truncated frames and bytes missing from the capture are reported on stderr.",
    )
    p.add_argument("file", help="libpcap or pcapng capture")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if a frame is truncated, bytes are missing or a frame does not decode",
    )
    p.set_defaults(_pcap_action=_decode)


#: action name -> function adding its sub-parser (which sets ``_pcap_action``)
ACTIONS: dict[str, Callable[[argparse._SubParsersAction], None]] = {"decode": _add_decode}

from rmqgate.tools.capture_cli import add_pcap_convert  # noqa: E402 - its owner module

ACTIONS["convert"] = add_pcap_convert


def _add_dissector(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dissector",
        help="write a Wireshark Lua dissector for RocketMQ",
        description="Print a Wireshark Lua dissector generated from rmqgate's wire declarations; "
        "save it as ~/.local/lib/wireshark/plugins/rocketmq.lua or pass it to tshark -X lua_script:FILE.",
    )
    p.set_defaults(_pcap_action=_dissector)


def _dissector(args: argparse.Namespace) -> int:
    from rmqgate.tools.dissector import generate

    sys.stdout.write(generate())
    return 0


ACTIONS["dissector"] = _add_dissector


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pcap_action", metavar="ACTION")
    for add in ACTIONS.values():
        add(sub)
    parser.set_defaults(_pcap_parser=parser)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "_pcap_action", None)
    if action is None:
        args._pcap_parser.print_help(sys.stderr)
        return 2
    return int(action(args))


def _code_name(cmd: RemotingCommand) -> str:
    return response_name(cmd.code) if cmd.flag & RESPONSE_FLAG else request_name(cmd.code)


def _kind(flag: int) -> str:
    if flag & RESPONSE_FLAG:
        return "RESPONSE"
    return "ONEWAY" if flag & ONEWAY_FLAG else "REQUEST"


def _language(value: int) -> str | int:
    try:
        return LanguageCode(value).name
    except ValueError:
        return value


def _serialize(value: int) -> str:
    return SerializeType(value).name


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def frame_json(frame: CapturedFrame) -> dict[str, object]:
    """The ``--json`` object of one frame (every key present; header fields null when undecodable)."""
    cmd = frame.command
    out: dict[str, object] = {
        "ts": frame.ts,
        "src": frame.src,
        "dst": frame.dst,
        "conn": frame.conn_id,
        "direction": frame.direction,
        "frame_len": len(frame.raw),
    }
    if cmd is None:
        out.update(
            serialize=None,
            code=None,
            code_name=None,
            opaque=None,
            flag=None,
            language=None,
            version=None,
            remark=None,
            ext_fields=None,
            body_len=None,
            request=None,
            oneway=None,
            error=frame.error,
        )
        return out
    out.update(
        serialize=_serialize(cmd.serialize_type),
        code=cmd.code,
        code_name=_code_name(cmd),
        opaque=cmd.opaque,
        flag=cmd.flag,
        language=_language(cmd.language),
        version=cmd.version,
        remark=cmd.remark,
        ext_fields=cmd.ext_fields or {},
        body_len=len(cmd.body) if cmd.body else 0,
        request=not cmd.flag & RESPONSE_FLAG,
        oneway=bool(cmd.flag & ONEWAY_FLAG),
        error=None,
    )
    return out


def _time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def frame_text(frame: CapturedFrame) -> str:
    """The plain one-line summary of a frame."""
    head = f"{_time(frame.ts)} {frame.src} -> {frame.dst}"
    cmd = frame.command
    if cmd is None:
        return f"{head} UNDECODABLE len={len(frame.raw)} {frame.error}"
    parts = [
        head,
        _kind(cmd.flag),
        f"{_code_name(cmd)}({cmd.code})",
        f"opaque={cmd.opaque}",
        _serialize(cmd.serialize_type),
    ]
    if cmd.remark:
        parts.append(f"remark={json.dumps(_short(cmd.remark, _REMARK_MAX), ensure_ascii=False)}")
    if cmd.ext_fields:
        ext = ", ".join(f"{k}={_short(v, _EXT_VALUE_MAX)}" for k, v in cmd.ext_fields.items())
        parts.append("{" + _short(ext, _EXT_TOTAL_MAX) + "}")
    parts.append(f"body={len(cmd.body) if cmd.body else 0}")
    return " ".join(parts)


def _describe_truncated(record: Truncated) -> str:
    text = record.describe()
    if record.command is not None:
        text += f" [{_kind(record.command.flag)} {_code_name(record.command)} opaque={record.command.opaque}]"
    return text


def _decode(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    reader = read_frames(args.file)
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    render = (lambda f: encode(frame_json(f))) if args.json else frame_text
    write = out.write
    errors = 0
    try:
        for frame in reader:
            if frame.error is not None:
                errors += 1
            write(render(frame) + "\n")
    except PcapError as exc:
        err.write(f"rmqgate pcap decode: {args.file}: {exc}\n")
        return 2
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            return 0
        err.write(f"rmqgate pcap decode: {exc}\n")
        return 2
    for gap in reader.gaps:
        err.write(f"rmqgate pcap decode: {gap.describe()}\n")
    for record in reader.truncated:
        err.write(f"rmqgate pcap decode: {_describe_truncated(record)}\n")
    if reader.info.file_truncated:
        err.write(f"rmqgate pcap decode: {args.file}: the file ends inside a packet record\n")
    unsupported = reader.info.unsupported_linktypes
    for linktype in unsupported:
        err.write(
            f"rmqgate pcap decode: {args.file}: link type {linktype} is not supported (Ethernet, Linux "
            "cooked v1/v2, raw IP and BSD loopback are); its packets were skipped\n"
        )
    if errors:
        err.write(f"rmqgate pcap decode: {errors} frame(s) did not decode\n")
    incomplete = bool(reader.truncated or reader.gaps or errors or reader.info.file_truncated or unsupported)
    return 1 if args.strict and incomplete else 0
