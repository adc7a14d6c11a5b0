"""Read RocketMQ traffic out of libpcap/pcapng captures: packets, TCP streams, remoting frames.

Three layers, each usable alone: ``iter_packets`` (capture records with their link type),
``iter_tcp_streams`` (per-direction reassembled byte streams with gaps and ends) and
``read_frames`` (RocketMQ frames split and decoded with ``rmqgate.wire.frame``).

Reassembly policy: a byte's value is the one carried by the *first* segment that delivered it
(first-arrival wins, like a receiver that keeps what it already queued); later retransmissions and
overlaps are trimmed against it. Bytes the capture never saw become a ``Gap`` once the peer has
acknowledged data beyond the hole, the out-of-order buffer exceeds ``PENDING_LIMIT``, the
connection is reset, or the capture ends. After a gap, and on streams whose start was not captured,
the frame splitter resynchronises on the first position that looks like a frame start.
Not handled: IP fragments (ignored and counted), TCP urgent data, checksum validation.
"""

from __future__ import annotations

import mmap
import os
import re
import socket
import struct
from bisect import bisect_right, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter

from construct import Bytes, Construct, FormatField, Int8ub, Int16ub, Int32ub, Renamed, Struct

from rmqgate.wire.command import RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError, FrameError
from rmqgate.wire.frame import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, decode_frame
from rmqgate.wire.layout import FRAME_PREFIX, HEADER_LENGTH_MASK

# --------------------------------------------------------------------------------------------------
# Layouts, declared once in construct; the readers use ``struct`` formats derived from them.


def _u(order: str, fmt: str) -> FormatField:
    return FormatField(order, fmt)


def _pcap_file_header(o: str) -> Struct:
    return Struct(
        "magic" / _u(o, "L"),
        "version_major" / _u(o, "H"),
        "version_minor" / _u(o, "H"),
        "thiszone" / _u(o, "l"),
        "sigfigs" / _u(o, "L"),
        "snaplen" / _u(o, "L"),
        "linktype" / _u(o, "L"),
    )


def _pcap_record_header(o: str) -> Struct:
    return Struct(
        "ts_sec" / _u(o, "L"), "ts_frac" / _u(o, "L"), "incl_len" / _u(o, "L"), "orig_len" / _u(o, "L")
    )


def _pcapng_block_header(o: str) -> Struct:
    return Struct("block_type" / _u(o, "L"), "block_total_length" / _u(o, "L"))


def _pcapng_section_header(o: str) -> Struct:  # SHB body after the block header
    return Struct(
        "byte_order_magic" / _u(o, "L"),
        "version_major" / _u(o, "H"),
        "version_minor" / _u(o, "H"),
        "section_length" / _u(o, "q"),
    )


def _pcapng_interface(o: str) -> Struct:  # IDB body
    return Struct("linktype" / _u(o, "H"), "reserved" / _u(o, "H"), "snaplen" / _u(o, "L"))


def _pcapng_enhanced_packet(o: str) -> Struct:  # EPB body
    return Struct(
        "interface_id" / _u(o, "L"),
        "ts_high" / _u(o, "L"),
        "ts_low" / _u(o, "L"),
        "captured_len" / _u(o, "L"),
        "original_len" / _u(o, "L"),
    )


def _pcapng_obsolete_packet(o: str) -> Struct:  # PB body (block type 2)
    return Struct(
        "interface_id" / _u(o, "H"),
        "drops_count" / _u(o, "H"),
        "ts_high" / _u(o, "L"),
        "ts_low" / _u(o, "L"),
        "captured_len" / _u(o, "L"),
        "original_len" / _u(o, "L"),
    )


def _pcapng_simple_packet(o: str) -> Struct:  # SPB body
    return Struct("original_len" / _u(o, "L"))


def _pcapng_option(o: str) -> Struct:
    return Struct("code" / _u(o, "H"), "length" / _u(o, "H"))


EthernetHeader = Struct("dst" / Bytes(6), "src" / Bytes(6), "ethertype" / Int16ub)
VlanTag = Struct("tci" / Int16ub, "ethertype" / Int16ub)
#: Linux cooked capture v1 (LINKTYPE_LINUX_SLL) and v2 (LINKTYPE_LINUX_SLL2).
SllHeader = Struct(
    "packet_type" / Int16ub,
    "arphrd_type" / Int16ub,
    "address_length" / Int16ub,
    "address" / Bytes(8),
    "protocol" / Int16ub,
)
Sll2Header = Struct(
    "protocol" / Int16ub,
    "reserved" / Int16ub,
    "interface_index" / Int32ub,
    "arphrd_type" / Int16ub,
    "packet_type" / Int8ub,
    "address_length" / Int8ub,
    "address" / Bytes(8),
)
IPv4Header = Struct(
    "version_ihl" / Int8ub,
    "tos" / Int8ub,
    "total_length" / Int16ub,
    "identification" / Int16ub,
    "flags_fragment_offset" / Int16ub,
    "ttl" / Int8ub,
    "protocol" / Int8ub,
    "checksum" / Int16ub,
    "src" / Bytes(4),
    "dst" / Bytes(4),
)
IPv6Header = Struct(
    "version_class_flow" / Int32ub,
    "payload_length" / Int16ub,
    "next_header" / Int8ub,
    "hop_limit" / Int8ub,
    "src" / Bytes(16),
    "dst" / Bytes(16),
)
#: The generic IPv6 extension header prefix (hop-by-hop, routing, destination options).
IPv6Extension = Struct("next_header" / Int8ub, "length_8octets" / Int8ub)
TcpHeader = Struct(
    "src_port" / Int16ub,
    "dst_port" / Int16ub,
    "seq" / Int32ub,
    "ack" / Int32ub,
    "offset_flags" / Int16ub,
    "window" / Int16ub,
    "checksum" / Int16ub,
    "urgent" / Int16ub,
)


def struct_of(con: Construct) -> struct.Struct:
    """A ``struct.Struct`` for a construct ``Struct`` made only of fixed-width fields and ``Bytes(n)``."""
    fmt = []
    orders = set()
    for sub in con.subcons:
        inner = sub.subcon if isinstance(sub, Renamed) else sub
        if isinstance(inner, FormatField):
            orders.add(inner.fmtstr[0])
            fmt.append(inner.fmtstr[1:])
        elif isinstance(inner, Bytes) and isinstance(inner.length, int):
            fmt.append(f"{inner.length}s")
        else:
            raise ValueError(f"field {sub.name!r} is not fixed-width")
    if len(orders) > 1:
        raise ValueError("mixed byte orders in one declaration")
    return struct.Struct((orders.pop() if orders else ">") + "".join(fmt))


def _both_orders(make: Callable[[str], Struct]) -> dict[str, struct.Struct]:
    return {o: struct_of(make(o)) for o in "<>"}


_PCAP_FILE = _both_orders(_pcap_file_header)
_PCAP_RECORD = _both_orders(_pcap_record_header)
_NG_BLOCK = _both_orders(_pcapng_block_header)
_NG_SHB = _both_orders(_pcapng_section_header)
_NG_IDB = _both_orders(_pcapng_interface)
_NG_EPB = _both_orders(_pcapng_enhanced_packet)
_NG_PB = _both_orders(_pcapng_obsolete_packet)
_NG_SPB = _both_orders(_pcapng_simple_packet)
_NG_OPTION = _both_orders(_pcapng_option)
_ETHERNET = struct_of(EthernetHeader)
_VLAN = struct_of(VlanTag)
_SLL = struct_of(SllHeader)
_SLL2 = struct_of(Sll2Header)
_IPV4 = struct_of(IPv4Header)
_IPV6 = struct_of(IPv6Header)
_IPV6_EXT = struct_of(IPv6Extension)
_TCP = struct_of(TcpHeader)

PCAP_MAGIC_MICRO = 0xA1B2C3D4
PCAP_MAGIC_NANO = 0xA1B23C4D
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D
_NG_IDB_TYPE, _NG_PB_TYPE, _NG_SPB_TYPE, _NG_EPB_TYPE = 1, 2, 3, 6
_OPT_IF_TSRESOL, _OPT_IF_TSOFFSET = 9, 14

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
_RAW_LINKTYPES = frozenset({LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6})
_NULL_LINKTYPES = frozenset({LINKTYPE_NULL, LINKTYPE_LOOP})
SUPPORTED_LINKTYPES = frozenset(
    {LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2} | _RAW_LINKTYPES | _NULL_LINKTYPES
)
_ETH_IPV4, _ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TYPES = frozenset({0x8100, 0x88A8, 0x9100})
_PROTO_TCP = 6
_IPV6_EXTENSIONS = frozenset({0, 43, 60})  # hop-by-hop, routing, destination options
_IPV6_FRAGMENT = 44

TCP_FIN, TCP_SYN, TCP_RST, TCP_ACK = 0x01, 0x02, 0x04, 0x10

#: Server ports of a stock deployment: name server, broker, broker VIP channel.
WELL_KNOWN_PORTS = frozenset({9876, 10911, 10909})
#: Out-of-order bytes buffered per direction before the hole in front of them is declared lost.
PENDING_LIMIT = 64 * 1024 * 1024

_START = itemgetter(0)
_SEQ_MASK = 0xFFFFFFFF
_HALF_SEQ = 0x80000000


class PcapError(ValueError):
    """The capture file cannot be read (bad magic, unsupported format)."""


class StrictError(PcapError):
    """``strict=True``: the capture is incomplete (truncated frame, lost bytes, undecodable frame)."""


# --------------------------------------------------------------------------------------------------
# Layer 1: capture records.


@dataclass(slots=True)
class Packet:
    ts: float
    linktype: int
    data: bytes  # captured bytes from the link-layer header on
    original_length: int


@dataclass(slots=True)
class CaptureInfo:
    """What the record reader saw (filled while iterating)."""

    format: str = ""  # "pcap" or "pcapng"
    records: int = 0
    bytes: int = 0  # file size
    file_truncated: bool = False  # the file ends inside a record or block
    linktypes: set[int] = field(default_factory=set)

    @property
    def unsupported_linktypes(self) -> list[int]:
        """Link types seen whose packets were skipped (no TCP/IP is looked for in them)."""
        return sorted(self.linktypes - SUPPORTED_LINKTYPES)


def _open_buffer(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> bytes | mmap.mmap:
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    with open(source, "rb") as fh:
        try:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # empty file, pipe
            return fh.read()


def _iter_records(buf: bytes | mmap.mmap, info: CaptureInfo) -> Iterator[tuple[float, int, int, int, int]]:
    """Yield ``(ts, linktype, start, end, original_length)`` for every packet record in ``buf``."""
    size = len(buf)
    info.bytes = size
    if size < 4:
        raise PcapError(f"not a capture file: {size} bytes")
    magic_le = struct.unpack_from("<I", buf, 0)[0]
    if magic_le == PCAPNG_SHB:
        info.format = "pcapng"
        yield from _iter_pcapng(buf, info)
        return
    for order in "<>":
        magic = struct.unpack_from(order + "I", buf, 0)[0]
        if magic in (PCAP_MAGIC_MICRO, PCAP_MAGIC_NANO):
            break
    else:
        raise PcapError(f"not a pcap/pcapng file (magic {buf[:4].hex()})")
    info.format = "pcap"
    header = _PCAP_FILE[order]
    if size < header.size:
        raise PcapError("pcap file header truncated")
    _, _, _, _, _, _, linktype_field = header.unpack_from(buf, 0)
    linktype = linktype_field & 0x0FFFFFFF  # upper bits: FCS length flags
    info.linktypes.add(linktype)
    scale = 1e-9 if magic == PCAP_MAGIC_NANO else 1e-6
    record = _PCAP_RECORD[order]
    unpack = record.unpack_from
    rsize = record.size
    pos = header.size
    records = 0
    while pos + rsize <= size:
        sec, frac, incl, orig = unpack(buf, pos)
        start = pos + rsize
        pos = start + incl
        if pos > size:
            info.file_truncated = True
            break
        records += 1
        yield sec + frac * scale, linktype, start, pos, orig
    else:
        if pos != size:
            info.file_truncated = True
    info.records = records


def _tsresol(value: int) -> float:
    return 2.0 ** -(value & 0x7F) if value & 0x80 else 10.0**-value


def _iter_pcapng(buf: bytes | mmap.mmap, info: CaptureInfo) -> Iterator[tuple[float, int, int, int, int]]:
    size = len(buf)
    pos = 0
    order = "<"
    interfaces: list[tuple[int, float, int, int]] = []  # linktype, ts unit, ts offset, snaplen
    records = 0
    while pos + 12 <= size:
        block_type = struct.unpack_from(order + "I", buf, pos)[0]
        if block_type == PCAPNG_SHB:
            bom = struct.unpack_from("<I", buf, pos + 8)[0]
            if bom == PCAPNG_BYTE_ORDER_MAGIC:
                order = "<"
            elif bom == 0x4D3C2B1A:
                order = ">"
            else:
                raise PcapError(f"pcapng section at {pos} has a bad byte-order magic {bom:#x}")
            interfaces = []
        _, total = _NG_BLOCK[order].unpack_from(buf, pos)
        if total < 12 or total % 4:
            raise PcapError(f"pcapng block at {pos} has a bad length {total}")
        end = pos + total
        if end > size:
            info.file_truncated = True
            break
        body = pos + 8
        if block_type in (_NG_EPB_TYPE, _NG_PB_TYPE):
            if block_type == _NG_EPB_TYPE:
                iface, hi, lo, caplen, orig = _NG_EPB[order].unpack_from(buf, body)
                data = body + _NG_EPB[order].size
            else:
                iface, _, hi, lo, caplen, orig = _NG_PB[order].unpack_from(buf, body)
                data = body + _NG_PB[order].size
            if iface >= len(interfaces):
                raise PcapError(f"pcapng packet at {pos} names undeclared interface {iface}")
            linktype, unit, offset, _ = interfaces[iface]
            if data + caplen > end - 4:
                raise PcapError(f"pcapng packet at {pos} overruns its block")
            records += 1
            yield ((hi << 32) | lo) * unit + offset, linktype, data, data + caplen, orig
        elif block_type == _NG_SPB_TYPE:
            if not interfaces:
                raise PcapError(f"pcapng simple packet at {pos} before any interface")
            linktype, _, _, snaplen = interfaces[0]
            (orig,) = _NG_SPB[order].unpack_from(buf, body)
            data = body + _NG_SPB[order].size
            caplen = min(orig, end - 4 - data, snaplen or orig)
            records += 1
            yield 0.0, linktype, data, data + caplen, orig  # SPBs carry no timestamp
        elif block_type == _NG_IDB_TYPE:
            linktype, _, snaplen = _NG_IDB[order].unpack_from(buf, body)
            unit, offset = 1e-6, 0
            opt = body + _NG_IDB[order].size
            option = _NG_OPTION[order]
            while opt + 4 <= end - 4:
                code, length = option.unpack_from(buf, opt)
                if code == 0:
                    break
                value = opt + 4
                if code == _OPT_IF_TSRESOL and length >= 1:
                    unit = _tsresol(buf[value])
                elif code == _OPT_IF_TSOFFSET and length >= 8:
                    offset = struct.unpack_from(order + "q", buf, value)[0]
                opt = value + ((length + 3) & ~3)
            info.linktypes.add(linktype)
            interfaces.append((linktype, unit, offset, snaplen))
        pos = end
    if pos < size and not info.file_truncated:
        info.file_truncated = True
    info.records = records


def iter_packets(source: str | os.PathLike[str] | bytes, info: CaptureInfo | None = None) -> Iterator[Packet]:
    """Every packet record of a pcap or pcapng capture (path or the file's bytes)."""
    buf = _open_buffer(source)
    info = info if info is not None else CaptureInfo()
    for ts, linktype, start, end, orig in _iter_records(buf, info):
        yield Packet(ts, linktype, buf[start:end], orig)


# --------------------------------------------------------------------------------------------------
# Layer 2: TCP segments and per-direction reassembly.


@dataclass(slots=True)
class ReaderStats:
    packets: int = 0
    tcp_segments: int = 0
    payload_bytes: int = 0  # TCP payload captured, retransmissions included
    non_tcp: int = 0  # not IPv4/IPv6 TCP, or an unsupported link type
    ip_fragments: int = 0  # not reassembled
    snapped: int = 0  # packets whose payload the snap length cut short
    retransmitted_bytes: int = 0  # payload already delivered or buffered (dropped, first arrival wins)
    out_of_order_segments: int = 0
    connections: int = 0
    gap_bytes: int = 0  # bytes the capture never saw
    resync_skipped_bytes: int = 0  # bytes dropped while looking for a frame start
    frames: int = 0
    frame_errors: int = 0
    truncated_frames: int = 0


_ntop_cache: dict[bytes, str] = {}


def _host(ip: bytes) -> str:
    text = _ntop_cache.get(ip)
    if text is None:
        text = (
            socket.inet_ntop(socket.AF_INET, ip)
            if len(ip) == 4
            else f"[{socket.inet_ntop(socket.AF_INET6, ip)}]"
        )
        _ntop_cache[ip] = text
    return text


class Connection:
    """One TCP connection (a 4-tuple from SYN, or from the first segment seen, to close)."""

    __slots__ = ("_id", "client", "closed", "generation", "halves", "reset")

    def __init__(self, generation: int) -> None:
        self.client: str | None = None  # "host:port" of the side that opened the connection
        self.generation = generation
        self.halves: dict[str, HalfStream] = {}
        self.closed = False
        self.reset = False
        self._id: str | None = None

    @property
    def conn_id(self) -> str:
        if self._id is None:
            if self.client is None:
                # Nothing better: whoever sent the first byte opened the conversation.
                self.client = next(iter(self.halves))
            (server,) = (ep for ep in self.halves if ep != self.client)
            suffix = f"#{self.generation}" if self.generation > 1 else ""
            self._id = f"{self.client}-{server}{suffix}"
        return self._id


class HalfStream:
    """One direction of a connection: sequence tracking, out-of-order buffer, FIN state."""

    __slots__ = (
        "base",
        "conn",
        "delivered",
        "done",
        "dst",
        "fin_off",
        "mid_stream",
        "next_off",
        "pending",
        "pending_bytes",
        "src",
        "state",
    )

    def __init__(self, conn: Connection, src: str, dst: str) -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.base: int | None = None  # sequence number of stream offset 0
        self.mid_stream = False  # the capture missed this direction's SYN
        self.next_off = 0
        self.delivered = 0
        self.pending: list[tuple[int, bytes]] = []  # sorted, non-overlapping, all beyond next_off
        self.pending_bytes = 0
        self.fin_off: int | None = None
        self.done = False
        self.state: object = None  # for the layer above (the frame splitter)

    @property
    def conn_id(self) -> str:
        return self.conn.conn_id

    @property
    def direction(self) -> str:
        self.conn.conn_id  # noqa: B018 - fixes the client side if still unknown
        return "c2s" if self.src == self.conn.client else "s2c"


@dataclass(slots=True)
class StreamChunk:
    """In-order bytes of one direction, starting at stream ``offset``."""

    ts: float
    stream: HalfStream
    offset: int
    data: bytes


@dataclass(slots=True)
class StreamGap:
    """``length`` bytes at stream ``offset`` that the capture never saw."""

    ts: float
    stream: HalfStream
    offset: int
    length: int
    reason: str


@dataclass(slots=True)
class StreamEnd:
    """No more bytes in this direction: ``reason`` is "FIN", "RST" or "capture ended"."""

    ts: float
    stream: HalfStream
    offset: int
    reason: str


StreamEvent = StreamChunk | StreamGap | StreamEnd


def _unwrap(rel: int, ref: int) -> int:
    """The stream offset congruent to ``rel`` mod 2**32 nearest to ``ref`` (sequence wraparound)."""
    return ref + ((rel - ref + _HALF_SEQ) & _SEQ_MASK) - _HALF_SEQ


class TcpReassembler:
    """Turns TCP segments into per-direction ``StreamEvent``s (appended to ``out``)."""

    def __init__(self, stats: ReaderStats | None = None, pending_limit: int = PENDING_LIMIT) -> None:
        self.stats = stats if stats is not None else ReaderStats()
        self.pending_limit = pending_limit
        self.out: list[StreamEvent] = []
        # (src ip, src port, dst ip, dst port) -> (connection, this direction, the other direction)
        self._flows: dict[tuple[bytes, int, bytes, int], tuple[Connection, HalfStream, HalfStream]] = {}
        self._generations: dict[frozenset[tuple[bytes, int]], int] = {}

    # -- connections

    def _open(self, src: bytes, sport: int, dst: bytes, dport: int, flags: int) -> tuple:
        pair = frozenset(((src, sport), (dst, dport)))
        generation = self._generations.get(pair, 0) + 1
        self._generations[pair] = generation
        conn = Connection(generation)
        a = f"{_host(src)}:{sport}"
        b = f"{_host(dst)}:{dport}"
        fwd = HalfStream(conn, a, b)
        rev = HalfStream(conn, b, a)
        conn.halves[a] = fwd
        conn.halves[b] = rev
        if flags & TCP_SYN:
            conn.client = b if flags & TCP_ACK else a
        elif dport in WELL_KNOWN_PORTS and sport not in WELL_KNOWN_PORTS:
            conn.client = a
        elif sport in WELL_KNOWN_PORTS and dport not in WELL_KNOWN_PORTS:
            conn.client = b
        entry = (conn, fwd, rev)
        self._flows[(src, sport, dst, dport)] = entry
        self._flows[(dst, dport, src, sport)] = (conn, rev, fwd)
        self.stats.connections += 1
        return entry

    def _finish_connection(self, conn: Connection, ts: float, reason: str) -> None:
        for half in conn.halves.values():
            self._flush_half(half, ts, reason)
        conn.closed = True

    def _flush_half(self, half: HalfStream, ts: float, reason: str) -> None:
        while half.pending:
            self._skip_hole(half, ts, reason)
        if not half.done:
            half.done = True
            self.out.append(StreamEnd(ts, half, half.next_off, reason))

    # -- bytes

    def _deliver(self, half: HalfStream, ts: float, data: bytes) -> None:
        if half.fin_off is not None and half.next_off + len(data) > half.fin_off:
            data = data[: half.fin_off - half.next_off]
            if not data:
                return
        self.out.append(StreamChunk(ts, half, half.next_off, data))
        half.next_off += len(data)
        half.delivered += len(data)

    def _drain(self, half: HalfStream, ts: float) -> None:
        pending = half.pending
        while pending and pending[0][0] <= half.next_off:
            off, data = pending.pop(0)
            half.pending_bytes -= len(data)
            end = off + len(data)
            if end > half.next_off:
                self._deliver(half, ts, data[half.next_off - off :])

    def _skip_hole(self, half: HalfStream, ts: float, reason: str) -> None:
        """Declare the bytes before the first buffered segment lost and deliver what follows."""
        off = half.pending[0][0]
        length = off - half.next_off
        self.stats.gap_bytes += length
        self.out.append(StreamGap(ts, half, half.next_off, length, reason))
        half.next_off = off
        self._drain(half, ts)

    def _buffer(self, half: HalfStream, off: int, data: bytes) -> None:
        """Keep the parts of an out-of-order segment not already buffered (first arrival wins)."""
        end = off + len(data)
        cur = off
        pieces = []
        pending = half.pending
        for i in range(max(0, bisect_right(pending, off, key=_START) - 1), len(pending)):
            p_off, p_data = pending[i]
            p_end = p_off + len(p_data)
            if p_end <= cur:
                continue
            if p_off >= end:
                break
            if p_off > cur:
                pieces.append((cur, data[cur - off : p_off - off]))
            cur = max(cur, p_end)
        if cur < end:
            pieces.append((cur, data[cur - off :]))
        kept = sum(len(d) for _, d in pieces)
        self.stats.retransmitted_bytes += len(data) - kept
        for piece in pieces:
            insort(pending, piece, key=_START)
        half.pending_bytes += kept

    def segment(
        self,
        ts: float,
        src: bytes,
        sport: int,
        dst: bytes,
        dport: int,
        seq: int,
        ack: int,
        flags: int,
        payload: bytes,
        missing: int = 0,
    ) -> None:
        """One TCP segment; ``missing`` counts payload bytes the snap length cut off its end."""
        entry = self._flows.get((src, sport, dst, dport))
        if entry is not None:
            conn, half, other = entry
            if flags & TCP_SYN and not flags & TCP_ACK and not conn.closed:
                if half.base == (seq + 1) & _SEQ_MASK:
                    return  # retransmitted SYN
                if half.base is not None or other.base is not None:
                    # a new connection on the same 4-tuple
                    self._finish_connection(conn, ts, "connection reused")
                    conn, half, other = self._open(src, sport, dst, dport, flags)
            if conn.closed:
                if not flags & TCP_SYN or flags & TCP_ACK:
                    return  # late segment of a finished connection
                conn, half, other = self._open(src, sport, dst, dport, flags)
        elif payload or flags & (TCP_SYN | TCP_FIN):
            conn, half, other = self._open(src, sport, dst, dport, flags)
        else:
            return  # a bare ACK/RST of a connection we know nothing about
        if flags & TCP_RST:
            conn.reset = True
            self._finish_connection(conn, ts, "RST")
            return
        if flags & TCP_SYN:
            if half.base is None:
                half.base = (seq + 1) & _SEQ_MASK
            if flags & TCP_ACK and other.base is None:
                other.base = ack  # the capture missed the SYN; the SYN-ACK says where the client starts
            seq = (seq + 1) & _SEQ_MASK
        elif half.base is None:
            if not payload and not flags & TCP_FIN:
                return
            half.base = seq
            half.mid_stream = True
        off = _unwrap((seq - half.base) & _SEQ_MASK, half.next_off)
        size = len(payload)
        if flags & TCP_FIN and half.fin_off is None:
            half.fin_off = off + size + missing
        if size:
            end = off + size
            if end <= half.next_off:
                self.stats.retransmitted_bytes += size
            elif off <= half.next_off:
                if off < half.next_off:
                    self.stats.retransmitted_bytes += half.next_off - off
                    payload = payload[half.next_off - off :]
                if half.pending and half.next_off + len(payload) > half.pending[0][0]:
                    # overlaps buffered data, which arrived first and wins
                    cut = half.pending[0][0] - half.next_off
                    self._buffer(half, half.pending[0][0], payload[cut:])
                    payload = payload[:cut]
                self._deliver(half, ts, payload)
                if half.pending:
                    self._drain(half, ts)
            else:
                self.stats.out_of_order_segments += 1
                self._buffer(half, off, payload)
                if half.pending_bytes > self.pending_limit:
                    self._skip_hole(half, ts, "out-of-order buffer limit")
        if missing and half.next_off == off + size:
            # the snap length cut this segment: its tail is lost for good
            stop = off + size + missing
            if half.pending:
                stop = min(stop, half.pending[0][0])
            self.stats.gap_bytes += stop - half.next_off
            self.out.append(
                StreamGap(ts, half, half.next_off, stop - half.next_off, "cut by the snap length")
            )
            half.next_off = stop
            if half.pending:
                self._drain(half, ts)
        if flags & TCP_ACK and other.pending and other.base is not None:
            acked = _unwrap((ack - other.base) & _SEQ_MASK, other.next_off)
            # The peer acknowledged data past a hole we have buffered data behind: the hole's
            # segments reached the peer but not the capture.
            while other.pending and acked > other.pending[0][0]:
                self._skip_hole(other, ts, "not captured")
        if half.fin_off is not None and not half.done and half.next_off >= half.fin_off:
            half.done = True
            self.out.append(StreamEnd(ts, half, half.next_off, "FIN"))
            if other.done:
                conn.closed = True

    def finish(self, ts: float) -> None:
        """End of capture: deliver what follows any remaining hole and end every open direction."""
        seen = set()
        for conn, _, _ in self._flows.values():
            if id(conn) in seen or conn.closed:
                continue
            seen.add(id(conn))
            for half in conn.halves.values():
                self._flush_half(half, ts, "capture ended")


def _iter_segments(
    source: str | os.PathLike[str] | bytes, info: CaptureInfo, stats: ReaderStats
) -> Iterator[tuple[float, bytes, int, bytes, int, int, int, int, bytes, int]]:
    """Decode link, IP and TCP headers: ``(ts, src, sport, dst, dport, seq, ack, flags, payload, missing)``."""
    buf = _open_buffer(source)
    eth_unpack = _ETHERNET.unpack_from
    vlan_unpack = _VLAN.unpack_from
    sll_unpack = _SLL.unpack_from
    sll2_unpack = _SLL2.unpack_from
    ipv4_unpack = _IPV4.unpack_from
    ipv6_unpack = _IPV6.unpack_from
    ext_unpack = _IPV6_EXT.unpack_from
    tcp_unpack = _TCP.unpack_from
    eth_size, sll_size, sll2_size = _ETHERNET.size, _SLL.size, _SLL2.size
    ipv4_size, ipv6_size, tcp_size = _IPV4.size, _IPV6.size, _TCP.size
    packets = non_tcp = 0
    try:
        for ts, linktype, start, end, _orig in _iter_records(buf, info):
            packets += 1
            caplen = end - start
            # -- link layer: find the IP header
            if linktype == LINKTYPE_ETHERNET:
                if caplen < eth_size:
                    non_tcp += 1
                    continue
                ethertype = eth_unpack(buf, start)[2]
                ip = start + eth_size
                while ethertype in _VLAN_TYPES and ip + 4 <= end:
                    ethertype = vlan_unpack(buf, ip)[1]
                    ip += 4
                version = 4 if ethertype == _ETH_IPV4 else 6 if ethertype == _ETH_IPV6 else 0
            elif linktype == LINKTYPE_LINUX_SLL:
                if caplen < sll_size:
                    non_tcp += 1
                    continue
                ethertype = sll_unpack(buf, start)[4]
                ip = start + sll_size
                version = 4 if ethertype == _ETH_IPV4 else 6 if ethertype == _ETH_IPV6 else 0
            elif linktype == LINKTYPE_LINUX_SLL2:
                if caplen < sll2_size:
                    non_tcp += 1
                    continue
                ethertype = sll2_unpack(buf, start)[0]
                ip = start + sll2_size
                version = 4 if ethertype == _ETH_IPV4 else 6 if ethertype == _ETH_IPV6 else 0
            elif linktype in _NULL_LINKTYPES:
                # 4-byte address family in the capturing host's byte order; the IP version nibble is
                # unambiguous where AF_INET6 values differ between systems.
                ip = start + 4
                version = buf[ip] >> 4 if ip < end else 0
            elif linktype in _RAW_LINKTYPES:
                ip = start
                version = buf[ip] >> 4 if ip < end else 0
            else:
                version = 0
            # -- IP
            if version == 4:
                if ip + ipv4_size > end:
                    non_tcp += 1
                    continue
                vihl, _, total, _, frag, _, proto, _, src, dst = ipv4_unpack(buf, ip)
                if proto != _PROTO_TCP:
                    non_tcp += 1
                    continue
                if frag & 0x3FFF:  # more-fragments or a fragment offset
                    stats.ip_fragments += 1
                    continue
                tcp = ip + (vihl & 0x0F) * 4
                ip_end = ip + total if total else end  # total 0: TSO-offloaded capture
            elif version == 6:
                if ip + ipv6_size > end:
                    non_tcp += 1
                    continue
                _, plen, nxt, _, src, dst = ipv6_unpack(buf, ip)
                tcp = ip + ipv6_size
                ip_end = tcp + plen if plen else end  # 0: jumbogram or TSO
                while nxt in _IPV6_EXTENSIONS and tcp + 2 <= end:
                    nxt, hlen = ext_unpack(buf, tcp)
                    tcp += (hlen + 1) * 8
                if nxt == _IPV6_FRAGMENT:
                    stats.ip_fragments += 1
                    continue
                if nxt != _PROTO_TCP:
                    non_tcp += 1
                    continue
            else:
                non_tcp += 1
                continue
            # -- TCP
            if tcp + tcp_size > end:
                non_tcp += 1
                continue
            sport, dport, seq, ack, off_flags, _, _, _ = tcp_unpack(buf, tcp)
            if off_flags < 0x5000:  # data offset below the 20-byte minimum header
                non_tcp += 1
                continue
            data = tcp + (off_flags >> 12) * 4
            missing = 0
            if ip_end > end:
                missing = ip_end - max(end, data)
                ip_end = end
                stats.snapped += 1
            payload = buf[data:ip_end] if ip_end > data else b""
            yield ts, src, sport, dst, dport, seq, ack, off_flags & 0x1FF, payload, missing
    finally:
        stats.packets += packets
        stats.non_tcp += non_tcp


def iter_tcp_streams(
    source: str | os.PathLike[str] | bytes,
    *,
    stats: ReaderStats | None = None,
    info: CaptureInfo | None = None,
) -> Iterator[StreamEvent]:
    """Reassembled TCP byte streams of a capture, as ``StreamChunk``/``StreamGap``/``StreamEnd``.

    Events come in capture order; each carries its ``HalfStream`` (``src``, ``dst``, ``conn_id``,
    ``direction``). Every direction that carried anything ends with exactly one ``StreamEnd``.
    """
    stats = stats if stats is not None else ReaderStats()
    info = info if info is not None else CaptureInfo()
    reasm = TcpReassembler(stats)
    out = reasm.out
    segment = reasm.segment
    ts = 0.0
    for seg in _iter_segments(source, info, stats):
        ts = seg[0]
        stats.tcp_segments += 1
        stats.payload_bytes += len(seg[8])
        segment(*seg)
        if out:
            yield from out
            out.clear()
    reasm.finish(ts)
    yield from out
    out.clear()


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


__all__ = [
    "CaptureInfo",
    "CapturedFrame",
    "Connection",
    "FrameReader",
    "Gap",
    "HalfStream",
    "Packet",
    "PcapError",
    "ReaderStats",
    "StreamChunk",
    "StreamEnd",
    "StreamGap",
    "StrictError",
    "TcpReassembler",
    "Truncated",
    "find_frame_start",
    "iter_packets",
    "iter_tcp_streams",
    "read_frames",
    "struct_of",
]
