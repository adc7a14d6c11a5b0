"""Inputs to frame rows: pcaps and capture files decoded with the project's codec, one row per frame.

``frame_rows(name, data)`` turns the bytes of one input (as Spark's ``binaryFiles`` hands them over)
into plain dicts with the columns of ``FRAME_COLUMNS``; Spark writes them to Parquet once and the job
reuses that. Responses carry the code of the request they answer (``req_code``), matched by opaque on
the same connection, so later stages need no join.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import decode_frame

#: (name, Spark SQL type) of every column of the frames table, in order.
FRAME_COLUMNS: tuple[tuple[str, str], ...] = (
    ("source", "string"),  # input path or URI
    ("conn", "string"),  # connection key, unique across inputs: "<source>#<conn_id>"
    ("idx", "bigint"),  # frame order within its input
    ("ts", "double"),  # capture time, epoch seconds
    ("direction", "string"),  # "c2s" / "s2c"
    ("role", "string"),  # "namesrv" / "broker" / "" (unknown: decided from the codes later)
    ("client", "string"),  # client side address host:port
    ("server", "string"),  # server side address host:port
    ("code", "int"),
    ("req_code", "int"),  # for responses: the code of the request answered (-1 if unmatched)
    ("opaque", "int"),
    ("flag", "int"),
    ("is_request", "boolean"),
    ("oneway", "boolean"),
    ("serialize", "int"),
    ("topic", "string"),
    ("header_len", "int"),
    ("body_len", "int"),
    ("frame_len", "int"),
    ("raw", "binary"),
    ("error", "string"),
)
FRAME_DDL = ", ".join(f"{n} {t}" for n, t in FRAME_COLUMNS)

NAMESRV_PORT = 9876

_PCAP_MAGICS = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
)


@dataclass(slots=True)
class Frame:
    """What the readers below hand over for one frame (the tools.pcap CapturedFrame fields we use)."""

    ts: float
    src: str
    dst: str
    conn_id: str
    direction: str
    raw: bytes
    role: str = ""
    command: RemotingCommand | None = None  # already decoded by the reader
    error: str | None = None


def is_pcap(head: bytes) -> bool:
    return head[:4] in _PCAP_MAGICS


def topic_of(cmd: RemotingCommand) -> str | None:
    ext = cmd.ext_fields
    if not ext:
        return None
    if cmd.code in (
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        return ext.get("b") or ext.get("topic")
    return ext.get("topic")


def _from_pcap(source: str | bytes) -> Iterator[Frame]:
    from rmqgate.tools.pcap import read_frames

    for f in read_frames(source):
        yield Frame(f.ts, f.src, f.dst, f.conn_id, f.direction, f.raw, command=f.command, error=f.error)


def _from_capture(path: str) -> Iterator[Frame]:
    from rmqgate.tools import capture

    try:
        import zstandard  # noqa: F401
    except ImportError:
        raise RuntimeError(
            f"{path}: reading an .rmqcap needs zstandard, which this Python lacks: put the file where "
            "the driver reads it (the job decodes it there), or give executors a Python environment "
            "with zstandard (spark.archives, see the README)"
        ) from None

    peers: dict[int, tuple[str, str]] = {}
    for rec in capture.read_capture(path):
        if rec.kind != capture.Kind.FRAME:
            meta = rec.meta or {}
            client = str(meta.get("client") or meta.get("client_addr") or meta.get("src") or "")
            server = str(meta.get("server") or meta.get("server_addr") or meta.get("upstream") or "")
            if client or server:
                peers[rec.conn_id] = (client, server)
            continue
        client, server = peers.get(rec.conn_id, ("", ""))
        c2s = rec.direction == capture.Direction.C2S
        yield Frame(
            rec.ts,
            client if c2s else server,
            server if c2s else client,
            str(rec.conn_id),
            "c2s" if c2s else "s2c",
            rec.data,
            {capture.Role.NAMESRV: "namesrv", capture.Role.BROKER: "broker"}.get(rec.role, ""),
        )


def _port(addr: str) -> int:
    try:
        return int(addr.rpartition(":")[2])
    except ValueError:
        return 0


def read_input(path: str) -> Iterator[Frame]:
    """Frames of one local pcap/pcapng or capture file, in capture order."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    yield from _from_pcap(path) if is_pcap(head) else _from_capture(path)


def rows_from_frames(source: str, frames: Iterable[Frame]) -> Iterator[dict[str, Any]]:
    """One row per frame; responses get ``req_code`` from their request (same connection, opaque)."""
    pending: dict[tuple[str, str, int], int] = {}
    for idx, f in enumerate(frames):
        conn = f"{source}#{f.conn_id}"
        client, server = (f.src, f.dst) if f.direction == "c2s" else (f.dst, f.src)
        row: dict[str, Any] = {
            "source": source,
            "conn": conn,
            "idx": idx,
            "ts": f.ts,
            "direction": f.direction,
            "role": f.role or ("namesrv" if _port(server) == NAMESRV_PORT else ""),
            "client": client,
            "server": server,
            "code": -1,
            "req_code": -1,
            "opaque": 0,
            "flag": 0,
            "is_request": False,
            "oneway": False,
            "serialize": -1,
            "topic": None,
            "header_len": 0,
            "body_len": 0,
            "frame_len": len(f.raw),
            "raw": f.raw,
            "error": None,
        }
        cmd = f.command
        if cmd is None and f.error is None:
            try:
                cmd = decode_frame(f.raw)
            except CodecError as exc:
                f.error = f"{type(exc).__name__}: {exc}"
        if cmd is None:
            row["error"] = f.error or "undecodable frame"
            yield row
            continue
        is_request = not cmd.flag & RESPONSE_FLAG
        body_len = len(cmd.body) if cmd.body else 0
        row.update(
            code=int(cmd.code),
            opaque=int(cmd.opaque),
            flag=int(cmd.flag),
            is_request=is_request,
            oneway=bool(cmd.flag & ONEWAY_FLAG),
            serialize=int(cmd.serialize_type),
            topic=topic_of(cmd),
            header_len=len(f.raw) - 8 - body_len,
            body_len=body_len,
        )
        # a request sent from one side is answered by the other side
        sender = "c" if f.direction == "c2s" else "s"
        if is_request:
            if not row["oneway"]:
                pending[(conn, sender, cmd.opaque)] = int(cmd.code)
        else:
            asker = "s" if sender == "c" else "c"
            row["req_code"] = pending.pop((conn, asker, cmd.opaque), -1)
        yield row


def rows_from_bytes(source: str, data: bytes) -> Iterator[dict[str, Any]]:
    """Rows of one input given as bytes (Spark binaryFiles)."""
    if is_pcap(data[:4]):
        yield from rows_from_frames(source, _from_pcap(bytes(data)))
        return
    # the capture reader streams from a file: spill to one
    fd, tmp = tempfile.mkstemp(prefix="rmqgate-spark-", suffix=".rmqcap")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield from rows_from_frames(source, _from_capture(tmp))
    finally:
        os.unlink(tmp)


def rows_from_shipped(source: str, name: str) -> Iterator[dict[str, Any]]:
    """Rows of an input the driver distributed with ``SparkContext.addFile(…/name)`` (on an executor)."""
    from pyspark import SparkFiles

    yield from rows_from_frames(source, read_input(SparkFiles.get(name)))


def rows_from_path(path: str) -> list[dict[str, Any]]:
    return list(rows_from_frames(path, read_input(path)))
