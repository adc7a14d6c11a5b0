"""Layer 3 of the pcap reader: each reassembled direction split into RocketMQ remoting frames and
decoded, resynchronising on a frame start after a gap or a stream joined in the middle."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from rmqgate.tools.pcap.records import CaptureInfo, StrictError
from rmqgate.tools.pcap.tcp import HalfStream, ReaderStats, StreamChunk, StreamGap, iter_tcp_streams
from rmqgate.wire.command import RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError, FrameError
from rmqgate.wire.frame import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, decode_frame
from rmqgate.wire.layout import FRAME_PREFIX, HEADER_LENGTH_MASK

# --------------------------------------------------------------------------------------------------
# Layer 3: RocketMQ frames.


@dataclass(slots=True)
class CapturedFrame:
    ts: float  # capture time of the segment that completed the frame
    src: str  # "host:port"
    dst: str
    conn_id: str  # "client_host:port-server_host:port" (+ "#n" for a reused 4-tuple)
    direction: str  # "c2s" (from the side that opened the connection) or "s2c"
    raw: bytes  # the whole frame, 4-byte length included
    command: RemotingCommand | None  # None when the header does not decode
    error: str | None
    ts_first: float = 0.0  # capture time of the segment that carried the frame's first byte
    offset: int = 0  # position of the frame in its direction's byte stream


@dataclass(slots=True)
class Truncated:
    """A frame that never completed: the stream ended (or lost bytes) with ``data`` buffered."""

    ts: float
    src: str
    dst: str
    conn_id: str
    direction: str
    offset: int
    data: bytes
    expected: int | None  # the frame's full length, when its length field was seen
    reason: str
    command: RemotingCommand | None = None  # decoded from the header when the header is complete

    def describe(self) -> str:
        want = f" of {self.expected}" if self.expected is not None else ""
        return (
            f"truncated frame {self.src} -> {self.dst} ({self.conn_id} {self.direction}) at stream "
            f"offset {self.offset}: {len(self.data)} bytes{want} ({self.reason})"
        )


@dataclass(slots=True)
class Gap:
    """Bytes of a stream the capture did not contain."""

    ts: float
    src: str
    dst: str
    conn_id: str
    direction: str
    offset: int
    length: int
    reason: str

    def describe(self) -> str:
        return (
            f"{self.length} bytes missing {self.src} -> {self.dst} ({self.conn_id} {self.direction}) "
            f"at stream offset {self.offset} ({self.reason})"
        )


FrameEvent = CapturedFrame | Truncated | Gap

_JSON_OR_BINARY_START = re.compile(rb"(?=.{4}(?:\x00.{3}\{|\x01.{5}[\x00-\x0c]))", re.S)
_MIN_HEADER = (2, 21)  # "{}"; ROCKETMQ fixed fields plus two empty length prefixes


#: While resynchronising: bytes held waiting for a candidate frame start's header to complete, and
#: the tail kept between chunks (the start pattern spans up to 11 bytes).
_RESYNC_HOLD = 256 * 1024
_RESYNC_TAIL = 10


def find_frame_start(data: bytes, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> int | None:
    """The first offset in ``data`` that plausibly starts a frame (heuristic, for resynchronising)."""
    return _scan_frame_start(data, max_frame_length)[0]


def _scan_frame_start(data: bytes, max_frame_length: int) -> tuple[int | None, bool]:
    """``(offset, header_decoded)`` of the first plausible frame start: a sane envelope whose header,
    when ``data`` holds all of it, decodes."""
    size = len(data)
    for m in _JSON_OR_BINARY_START.finditer(data):
        p = m.start()
        if p + 8 > size:
            break
        length, word = FRAME_PREFIX.unpack_from(data, p)
        header_length = word & HEADER_LENGTH_MASK
        if length + 4 > max_frame_length or header_length < _MIN_HEADER[word >> 24]:
            continue
        if header_length > length - 4:
            continue
        if p + 8 + header_length <= size:
            try:
                # decode just the header (a frame with the body cut off)
                decode_frame(FRAME_PREFIX.pack(header_length + 4, word) + data[p + 8 : p + 8 + header_length])
            except CodecError:
                continue
            return p, True
        return p, False
    return None, False


def _decode_head(data: bytes) -> RemotingCommand | None:
    """The header of a frame whose body was cut off, if the header itself is complete."""
    if len(data) < 8:
        return None
    _, word = FRAME_PREFIX.unpack_from(data, 0)
    header_length = word & HEADER_LENGTH_MASK
    if len(data) < 8 + header_length:
        return None
    try:
        return decode_frame(FRAME_PREFIX.pack(header_length + 4, word) + data[8 : 8 + header_length])
    except CodecError:
        return None


class _Splitter:
    __slots__ = ("carry", "decoder", "first_ts", "offset", "skip_to", "synced")

    def __init__(self, synced: bool, offset: int, max_frame_length: int) -> None:
        self.decoder = FrameDecoder(max_frame_length)
        self.synced = synced
        self.offset = offset  # stream offset of the first byte buffered in the decoder
        self.first_ts = 0.0
        self.skip_to: int | None = None  # the tail of a frame cut by a gap: the next frame starts here
        self.carry = b""  # unsynchronised bytes kept for the next scan


class FrameReader:
    """Iterator over the ``CapturedFrame``s of a capture; see ``read_frames``.

    After (or during) iteration: ``truncated`` and ``gaps`` list what could not be decoded,
    ``stats`` and ``info`` count what was read.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | bytes,
        *,
        strict: bool = False,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
    ) -> None:
        self.source = source
        self.strict = strict
        self.max_frame_length = max_frame_length
        self.stats = ReaderStats()
        self.info = CaptureInfo()
        self.truncated: list[Truncated] = []
        self.gaps: list[Gap] = []
        self._frames = (e for e in self.events() if type(e) is CapturedFrame)

    def __iter__(self) -> FrameReader:
        return self

    def __next__(self) -> CapturedFrame:
        return next(self._frames)  # type: ignore[return-value]

    def events(self) -> Iterator[FrameEvent]:
        """Frames, truncated frames and gaps in capture order (strict mode raises on the latter)."""
        stats = self.stats
        max_len = self.max_frame_length
        for event in iter_tcp_streams(self.source, stats=stats, info=self.info):
            half = event.stream
            sp: _Splitter | None = half.state  # type: ignore[assignment]
            if type(event) is StreamChunk:
                if sp is None:
                    sp = half.state = _Splitter(not half.mid_stream, event.offset, max_len)
                yield from self._chunk(half, sp, event)
            elif type(event) is StreamGap:
                if sp is None:  # lost before any byte arrived: what follows starts mid-frame
                    sp = half.state = _Splitter(False, event.offset + event.length, max_len)
                if sp.carry:
                    stats.resync_skipped_bytes += len(sp.carry)
                    sp.carry = b""
                if sp.synced and sp.skip_to is None:
                    frame_end = None
                    if sp.decoder.buffered >= 4:
                        frame_end = sp.offset + FRAME_PREFIX.unpack_from(sp.decoder.pending(), 0)[0] + 4
                    yield from self._lose_buffer(half, sp, event.ts, f"{event.length} bytes not captured")
                    if frame_end is not None and event.offset + event.length <= frame_end:
                        # the hole lies inside a frame whose length we know: resume exactly after it
                        sp.skip_to = frame_end
                    else:
                        sp.synced = False
                elif sp.skip_to is not None and event.offset + event.length > sp.skip_to:
                    sp.skip_to = None
                    sp.synced = False
                gap = Gap(event.ts, half.src, half.dst, half.conn_id, half.direction, event.offset,
                          event.length, event.reason)  # fmt: skip
                self.gaps.append(gap)
                yield gap
                if self.strict:
                    raise StrictError(gap.describe())
            elif sp is not None:  # StreamEnd
                stats.resync_skipped_bytes += len(sp.carry)
                yield from self._lose_buffer(half, sp, event.ts, event.reason)
                half.state = None

    def _lose_buffer(self, half: HalfStream, sp: _Splitter, ts: float, reason: str) -> Iterator[Truncated]:
        decoder = sp.decoder
        if not decoder.buffered:
            return
        data = decoder.pending()
        expected = FRAME_PREFIX.unpack_from(data, 0)[0] + 4 if len(data) >= 4 else None
        record = Truncated(ts, half.src, half.dst, half.conn_id, half.direction, sp.offset, data, expected,
                           reason, _decode_head(data))  # fmt: skip
        sp.decoder = FrameDecoder(self.max_frame_length)
        sp.offset += len(data)
        self.stats.truncated_frames += 1
        self.truncated.append(record)
        yield record
        if self.strict:
            raise StrictError(record.describe())

    def _chunk(self, half: HalfStream, sp: _Splitter, event: StreamChunk) -> Iterator[CapturedFrame]:
        data = event.data
        ts = event.ts
        if sp.skip_to is not None:
            skip = sp.skip_to - event.offset
            if skip >= len(data):
                return
            data = data[skip:]
            sp.offset = sp.skip_to
            sp.skip_to = None
        if not sp.synced:
            buf = sp.carry + data if sp.carry else data
            start, decoded = _scan_frame_start(buf, self.max_frame_length)
            if start is None:
                keep = min(len(buf), _RESYNC_TAIL)
                self.stats.resync_skipped_bytes += len(buf) - keep
                sp.carry = buf[len(buf) - keep :]
                return
            self.stats.resync_skipped_bytes += start
            if not decoded and len(buf) - start < _RESYNC_HOLD:
                sp.carry = buf[start:]  # wait for the rest of the candidate's header
                return
            sp.offset = event.offset + len(data) - len(buf) + start
            data = buf[start:]
            sp.carry = b""
            sp.synced = True
        decoder = sp.decoder
        had = decoder.buffered
        if not had:
            sp.first_ts = ts
        error = None
        try:
            raws = decoder.feed_raw(data)
        except FrameError as exc:
            raws = getattr(exc, "frames", [])
            error = exc
        first_ts = sp.first_ts
        for raw in raws:
            yield self._frame(half, ts, first_ts, sp.offset, raw)
            sp.offset += len(raw)
            first_ts = ts
        if decoder.buffered and (raws or not had):
            sp.first_ts = ts
        if error is not None:
            # The envelope is unusable: report the rest of the stream position and resynchronise.
            bad = decoder.pending()
            self.stats.frame_errors += 1
            frame = CapturedFrame(ts, half.src, half.dst, half.conn_id, half.direction, bad, None,
                                  f"{type(error).__name__}: {error}", first_ts, sp.offset)  # fmt: skip
            sp.decoder = FrameDecoder(self.max_frame_length)
            sp.offset += len(bad)
            sp.synced = False
            yield frame
            if self.strict:
                raise StrictError(f"{half.src} -> {half.dst} at stream offset {frame.offset}: {frame.error}")

    def _frame(self, half: HalfStream, ts: float, first_ts: float, offset: int, raw: bytes) -> CapturedFrame:
        conn = half.conn
        try:
            cmd = decode_frame(raw, self.max_frame_length)
            error = None
        except CodecError as exc:
            cmd = None
            error = f"{type(exc).__name__}: {exc}"
            self.stats.frame_errors += 1
        if conn.client is None:
            if cmd is not None:
                # A request comes from the client, a response from the server.
                conn.client = half.dst if cmd.flag & RESPONSE_FLAG else half.src
            else:
                conn.client = half.src
        self.stats.frames += 1
        frame = CapturedFrame(ts, half.src, half.dst, conn.conn_id, half.direction, raw, cmd, error, first_ts,
                              offset)  # fmt: skip
        if error is not None and self.strict:
            raise StrictError(f"{half.src} -> {half.dst} at stream offset {offset}: {error}")
        return frame


def read_frames(
    path: str | os.PathLike[str] | bytes,
    *,
    strict: bool = False,
    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
) -> FrameReader:
    """The RocketMQ frames of a capture, in the capture order of each frame's last segment.

    The returned ``FrameReader`` iterates ``CapturedFrame``s; afterwards its ``truncated`` list holds
    frames cut off by the end of the capture (or a FIN/RST/lost bytes) and ``gaps`` the bytes the
    capture missed. With ``strict=True`` a truncated frame, a gap or an undecodable frame raises
    ``StrictError`` (after every frame before it has been yielded).
    """
    return FrameReader(path, strict=strict, max_frame_length=max_frame_length)
