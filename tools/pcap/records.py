"""Layer 1 of the pcap reader: libpcap and pcapng files (either byte order, any timestamp
resolution) read record by record from an mmap, each packet with its link type."""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from construct import Bytes, Construct, FormatField, Renamed, Struct

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
RAW_LINKTYPES = frozenset({LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6})
NULL_LINKTYPES = frozenset({LINKTYPE_NULL, LINKTYPE_LOOP})
SUPPORTED_LINKTYPES = frozenset(
    {LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2} | RAW_LINKTYPES | NULL_LINKTYPES
)


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


def open_buffer(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> bytes | mmap.mmap:
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    with open(source, "rb") as fh:
        try:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # empty file, pipe
            return fh.read()


def iter_records(buf: bytes | mmap.mmap, info: CaptureInfo) -> Iterator[tuple[float, int, int, int, int]]:
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
    buf = open_buffer(source)
    info = info if info is not None else CaptureInfo()
    for ts, linktype, start, end, orig in iter_records(buf, info):
        yield Packet(ts, linktype, buf[start:end], orig)
