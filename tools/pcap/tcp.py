"""Layer 2 of the pcap reader: link, IP and TCP headers decoded from each packet, and each
connection's two directions reassembled into byte streams (first arrival wins; holes become gaps)."""

from __future__ import annotations

import os
import socket
from bisect import bisect_right, insort
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter

from construct import Bytes, Int8ub, Int16ub, Int32ub, Struct

from rmqgate.tools.pcap.records import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    NULL_LINKTYPES,
    RAW_LINKTYPES,
    CaptureInfo,
    iter_records,
    open_buffer,
    struct_of,
)

# --------------------------------------------------------------------------------------------------
# Link, IP and TCP headers, declared once in construct; the reader uses ``struct`` formats derived from them.

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


_ETHERNET = struct_of(EthernetHeader)
_VLAN = struct_of(VlanTag)
_SLL = struct_of(SllHeader)
_SLL2 = struct_of(Sll2Header)
_IPV4 = struct_of(IPv4Header)
_IPV6 = struct_of(IPv6Header)
_IPV6_EXT = struct_of(IPv6Extension)
_TCP = struct_of(TcpHeader)

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
    buf = open_buffer(source)
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
        for ts, linktype, start, end, _orig in iter_records(buf, info):
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
            elif linktype in NULL_LINKTYPES:
                # 4-byte address family in the capturing host's byte order; the IP version nibble is
                # unambiguous where AF_INET6 values differ between systems.
                ip = start + 4
                version = buf[ip] >> 4 if ip < end else 0
            elif linktype in RAW_LINKTYPES:
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
