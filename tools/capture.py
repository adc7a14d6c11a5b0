"""The ``.rmqcap`` capture format: remoting frames with time, connection, direction and peer role.

A file is an uncompressed ``FileHeader`` followed by independently flushed zstandard frames, each
holding whole ``Record``s. A reader decompresses incrementally and stops cleanly at a torn last
zstd frame (a crashed recorder loses at most its unflushed tail); a writer appends new zstd frames,
first truncating a torn tail. Connection-level records (open with JSON metadata, close) sit in the
same stream as the frames, so a capture is self-describing. zstandard (a C extension) is imported
where a file is read or written: the replay engine imports this module for its enums only, and Spark
executors run it on a Python that has just the pure-Python dependencies.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

from construct import Bytes, Const, Int8ub, Int16ub, Int32ub, Int64sb, Struct, this

from rmqgate.wire.layout import fixed_struct

MAGIC = b"RMQCAP"
FORMAT_VERSION = 1

#: The fixed fields of the file header, after the magic.
HeaderFields = Struct(
    "version" / Int16ub,
    "start_time_us" / Int64sb,
    "source_length" / Int16ub,
)

#: The file header (uncompressed, so ``file``/``head`` can identify a capture).
FileHeader = Struct(
    "magic" / Const(MAGIC),
    "fields" / HeaderFields,
    "source" / Bytes(this.fields.source_length),
)

#: One record of the decompressed stream. ``data`` is a raw frame (length prefix included) for
#: FRAME records and UTF-8 JSON metadata for CONN_OPEN/CONN_CLOSE.
Record = Struct(
    "kind" / Int8ub,
    "direction" / Int8ub,
    "role" / Int8ub,
    "reserved" / Int8ub,
    "ts_us" / Int64sb,
    "conn_id" / Int32ub,
    "length" / Int32ub,
    "data" / Bytes(this.length),
)

RECORD_FIXED = fixed_struct(Record)  # everything before ``data``
_pack_fixed = RECORD_FIXED.pack
_unpack_fixed = RECORD_FIXED.unpack_from
_FIXED_SIZE = RECORD_FIXED.size
_HEADER_FIXED = fixed_struct(HeaderFields)


class Kind(IntEnum):
    FRAME = 1
    CONN_OPEN = 2
    CONN_CLOSE = 3


class Direction(IntEnum):
    C2S = 0  # client to server
    S2C = 1


class Role(IntEnum):
    """Who the server side of a connection is."""

    UNKNOWN = 0
    NAMESRV = 1
    BROKER = 2


DIRECTION_NAMES = {Direction.C2S: "c2s", Direction.S2C: "s2c"}
ROLE_NAMES = {Role.UNKNOWN: "unknown", Role.NAMESRV: "namesrv", Role.BROKER: "broker"}


@dataclass(slots=True)
class CaptureHeader:
    version: int
    start_time: float  # seconds since the epoch
    source: str


@dataclass(slots=True)
class CaptureRecord:
    kind: int
    ts: float  # seconds since the epoch
    conn_id: int
    direction: int
    role: int
    data: bytes
    meta: dict = field(default_factory=dict)  # decoded JSON of CONN_OPEN/CONN_CLOSE

    @property
    def direction_name(self) -> str:
        return DIRECTION_NAMES.get(self.direction, str(self.direction))


def encode_header(source: str, start_time: float | None = None) -> bytes:
    start = time.time() if start_time is None else start_time
    raw = source.encode()
    fields = {"version": FORMAT_VERSION, "start_time_us": round(start * 1e6), "source_length": len(raw)}
    return FileHeader.build({"fields": fields, "source": raw})


def _read_header(fp: BinaryIO) -> tuple[CaptureHeader, int]:
    head = fp.read(len(MAGIC) + _HEADER_FIXED.size)
    if len(head) < len(MAGIC) + _HEADER_FIXED.size or head[: len(MAGIC)] != MAGIC:
        raise ValueError("not an rmqgate capture (bad magic)")
    version, start_us, source_len = _HEADER_FIXED.unpack_from(head, len(MAGIC))
    if version != FORMAT_VERSION:
        raise ValueError(f"capture format version {version} is not supported (expected {FORMAT_VERSION})")
    source = fp.read(source_len)
    if len(source) != source_len:
        raise ValueError("capture header is truncated")
    return CaptureHeader(version, start_us / 1e6, source.decode()), len(head) + source_len


def is_capture(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fp:
        return fp.read(len(MAGIC)) == MAGIC


def encode_record(kind: int, ts: float, conn_id: int, direction: int, role: int, data: bytes) -> bytes:
    return _pack_fixed(kind, direction, role, 0, round(ts * 1e6), conn_id, len(data)) + data


class CaptureWriter:
    """Appends records; each ``flush`` writes one self-contained zstd frame and flushes the file.

    ``flush_bytes`` bounds how much a crash may lose; callers that need a time bound (the proxy)
    call ``flush`` on a timer and on connection close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        source: str = "",
        *,
        append: bool = False,
        start_time: float | None = None,
        level: int = 3,
        flush_bytes: int = 1 << 20,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self._level = level
        import zstandard

        self._cctx = zstandard.ZstdCompressor(level=level)
        self._buf = bytearray()
        self._inflight = 0  # batches taken by ``take`` and not yet written back
        self._flush_bytes = flush_bytes
        self._fsync = fsync
        self.records = 0
        if append and self.path.exists() and self.path.stat().st_size > 0:
            self.header, good_end = scan_valid_end(self.path)
            self._fp = open(self.path, "r+b")  # noqa: SIM115 - lives as long as the writer
            self._fp.truncate(good_end)
            self._fp.seek(good_end)
        else:
            self._fp = open(self.path, "wb")  # noqa: SIM115
            head = encode_header(source, start_time)
            self._fp.write(head)
            self._fp.flush()
            self.header = _read_header(io.BytesIO(head))[0]

    def write(self, kind: int, ts: float, conn_id: int, direction: int, role: int, data: bytes) -> None:
        buf = self._buf
        buf += _pack_fixed(kind, direction, role, 0, round(ts * 1e6), conn_id, len(data))
        buf += data
        self.records += 1
        if len(buf) >= self._flush_bytes and not self._inflight:
            self.flush()

    def frame(self, ts: float, conn_id: int, direction: int, role: int, raw: bytes) -> None:
        self.write(Kind.FRAME, ts, conn_id, direction, role, raw)

    def conn_open(self, ts: float, conn_id: int, role: int, **meta: object) -> None:
        self.write(Kind.CONN_OPEN, ts, conn_id, Direction.C2S, role, json.dumps(meta).encode())

    def conn_close(self, ts: float, conn_id: int, role: int, **meta: object) -> None:
        self.write(Kind.CONN_CLOSE, ts, conn_id, Direction.C2S, role, json.dumps(meta).encode())

    @property
    def pending(self) -> int:
        return len(self._buf)

    def take(self) -> bytes:
        """Detach the pending records for ``compress`` elsewhere (a thread); ``put`` the result.

        Until then automatic size-triggered flushes are held back, so zstd frames stay in order.
        """
        data = bytes(self._buf)
        self._buf.clear()
        self._inflight += 1
        return data

    def compress(self, data: bytes) -> bytes:
        """One zstd frame of ``data`` (thread-safe: its own compressor)."""
        import zstandard

        return zstandard.ZstdCompressor(level=self._level).compress(data)

    def put(self, frame: bytes) -> None:
        self._inflight -= 1
        if frame:
            self._fp.write(frame)
        self._fp.flush()
        if self._fsync:
            os.fsync(self._fp.fileno())

    def flush(self) -> None:
        if self._buf:
            self._fp.write(self._cctx.compress(bytes(self._buf)))
            self._buf.clear()
        self._fp.flush()
        if self._fsync:
            os.fsync(self._fp.fileno())

    def close(self) -> None:
        if not self._fp.closed:
            self.flush()
            self._fp.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scan_valid_end(path: str | os.PathLike[str]) -> tuple[CaptureHeader, int]:
    """The header and the file offset just after the last complete zstd frame."""
    with open(path, "rb") as fp:
        header, pos = _read_header(fp)
        data = fp.read()
    good = 0
    view = memoryview(data)
    while good < len(data):
        frame_len = _frame_length(view, good)
        if frame_len is None:
            break
        good += frame_len
    return header, pos + good


def _frame_length(data: memoryview, pos: int) -> int | None:
    """Length of the complete zstd frame at ``pos`` or None if it is torn."""
    import zstandard

    dobj = zstandard.ZstdDecompressor().decompressobj()
    try:
        dobj.decompress(data[pos:])
    except zstandard.ZstdError:
        return None
    if not dobj.eof:
        return None
    return len(data) - pos - len(dobj.unused_data)


class CaptureReader:
    """Streams records out of a capture without loading it whole.

    ``follow=True`` keeps reading as a recorder appends (``poll`` seconds between looks at the
    file, stopping after ``idle_timeout`` seconds without growth). A torn last zstd frame ends the
    iteration after the records that were complete; ``torn`` says whether that happened.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        chunk_size: int = 1 << 16,
        follow: bool = False,
        poll: float = 0.05,
        idle_timeout: float = 2.0,
    ) -> None:
        self.path = Path(path)
        self._fp = open(self.path, "rb")  # noqa: SIM115 - closed by close()/iteration end
        self.header, _ = _read_header(self._fp)
        self._chunk = chunk_size
        self._follow = follow
        self._poll = poll
        self._idle_timeout = idle_timeout
        self.torn = False

    def close(self) -> None:
        self._fp.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[CaptureRecord]:
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        dobj = dctx.decompressobj()
        in_frame = False  # fed bytes of a zstd frame that has not ended yet
        buf = bytearray()
        idle_since: float | None = None
        while True:
            chunk = self._fp.read(self._chunk)
            if not chunk:
                if self._follow:
                    now = time.monotonic()
                    if idle_since is None:
                        idle_since = now
                    if now - idle_since < self._idle_timeout:
                        time.sleep(self._poll)
                        continue
                self.torn = in_frame
                break
            idle_since = None
            while chunk:
                try:
                    out = dobj.decompress(chunk)
                except zstandard.ZstdError:
                    self.torn = True
                    return
                in_frame = True
                if out:
                    buf += out
                    yield from _parse_records(buf)
                if dobj.eof:
                    chunk = dobj.unused_data
                    dobj = dctx.decompressobj()
                    in_frame = False
                else:
                    chunk = b""
        # records cut by a torn frame are dropped with it


def _parse_records(buf: bytearray) -> Iterator[CaptureRecord]:
    pos = 0
    end = len(buf)
    try:
        while end - pos >= _FIXED_SIZE:
            kind, direction, role, _, ts_us, conn_id, length = _unpack_fixed(buf, pos)
            stop = pos + _FIXED_SIZE + length
            if stop > end:
                break
            data = bytes(buf[pos + _FIXED_SIZE : stop])
            pos = stop
            rec = CaptureRecord(kind, ts_us / 1e6, conn_id, direction, role, data)
            if kind != Kind.FRAME and data:
                try:
                    rec.meta = json.loads(data)
                except ValueError:
                    pass
            yield rec
    finally:
        del buf[:pos]


def read_capture(path: str | os.PathLike[str], **kwargs: object) -> Iterator[CaptureRecord]:
    reader = CaptureReader(path, **kwargs)  # type: ignore[arg-type]
    try:
        yield from reader
    finally:
        reader.close()


__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CaptureHeader",
    "CaptureReader",
    "CaptureRecord",
    "CaptureWriter",
    "Direction",
    "FileHeader",
    "Kind",
    "Record",
    "Role",
    "encode_record",
    "is_capture",
    "read_capture",
    "scan_valid_end",
]
