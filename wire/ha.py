"""The HA replication stream of RocketMQ 4.x (HAService / HAConnection), declared once in construct.

Master to slave: frames of an 8-byte CommitLog offset and a 4-byte body size, then the body (the
CommitLog bytes from that offset; an empty body is a heartbeat). Slave to master: 8-byte reports of
the slave's max CommitLog offset, nothing else. Both big-endian. Sans-I/O: the decoders take bytes
as they arrive and hand back what is complete.
"""

from __future__ import annotations

from construct import Bytes, Int32sb, Int64sb, Struct, this

from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.layout import fixed_struct

#: One master -> slave transfer (HAConnection.WriteSocketService): offset, size, then size bytes.
TransferFrame = Struct(
    "phy_offset" / Int64sb,
    "body_size" / Int32sb,
    "body" / Bytes(this.body_size),
)

#: One slave -> master report (HAClient.reportSlaveMaxOffset): the slave's max CommitLog offset.
SlaveReport = Struct("max_offset" / Int64sb)

TRANSFER_HEADER = fixed_struct(TransferFrame)  # phy_offset, body_size
SLAVE_REPORT = fixed_struct(SlaveReport)
TRANSFER_HEADER_SIZE = TRANSFER_HEADER.size

_pack_header = TRANSFER_HEADER.pack
_pack_report = SLAVE_REPORT.pack


def encode_transfer_header(phy_offset: int, body_size: int) -> bytes:
    """The 12 bytes in front of a transfer's body (``body_size`` 0: a heartbeat)."""
    return _pack_header(phy_offset, body_size)


def encode_slave_report(max_offset: int) -> bytes:
    return _pack_report(max_offset)


class TransferDecoder:
    """The slave's side: bytes from the master in, ``(phy_offset, body)`` frames out, in order.
    A negative body size or one over ``max_body`` raises ``MessageFormatError`` (the caller closes)."""

    def __init__(self, max_body: int = 64 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._max_body = max_body

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, bytes]] = []
        pos = 0
        end = len(buf)
        while end - pos >= TRANSFER_HEADER_SIZE:
            offset, size = TRANSFER_HEADER.unpack_from(buf, pos)
            if size < 0 or size > self._max_body:
                raise MessageFormatError(f"HA transfer body size {size} at offset {offset}")
            if end - pos - TRANSFER_HEADER_SIZE < size:
                break
            start = pos + TRANSFER_HEADER_SIZE
            out.append((offset, bytes(buf[start : start + size])))
            pos = start + size
        if pos:
            del buf[:pos]
        return out


class SlaveReportDecoder:
    """The master's side: bytes from a slave in; ``feed`` answers the last complete report (as
    ReadSocketService keeps only the newest offset of what it read), or None when none completed."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> int | None:
        buf = self._buf
        buf += data
        n = len(buf) - len(buf) % SLAVE_REPORT.size
        if n == 0:
            return None
        (offset,) = SLAVE_REPORT.unpack_from(buf, n - SLAVE_REPORT.size)
        del buf[:n]
        return offset
