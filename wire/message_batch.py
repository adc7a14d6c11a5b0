"""Batch bodies (RocketMQ's MessageBatch, ``MessageDecoder.encodeMessages``/``decodeMessages``): the
SEND_BATCH_MESSAGE body, one entry per message with its flag, body and properties string."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from construct import Bytes, Int16sb, Int32sb, PascalString, Struct, this

from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.layout import field as layout_field
from rmqgate.wire.layout import fixed_struct, prefix_struct
from rmqgate.wire.message import MAX_PROPERTIES_BYTES, Buffer, parse_properties, properties_text
from rmqgate.wire.message_const import PROPERTY_UNIQ_KEY

#: One message of a SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessage``): magic and CRC are 0.
BatchMessage = Struct(
    "total_size" / Int32sb,
    "magic" / Int32sb,
    "body_crc" / Int32sb,
    "flag" / Int32sb,
    "body_length" / Int32sb,
    "body" / Bytes(this.body_length),
    "properties" / PascalString(Int16sb, "utf8"),
)


_BATCH_FIXED = fixed_struct(BatchMessage)
_BATCH_PROPERTIES_LENGTH = prefix_struct(layout_field(BatchMessage, "properties"))


@dataclass(slots=True)
class BatchEntry:
    """One message of a SEND_BATCH_MESSAGE body. ``sys_flag`` is not on the wire (the batch's sysFlag
    comes from the request header); it is carried for callers. ``magic``/``body_crc`` are kept as sent
    (Java clients send 0)."""

    flag: int = 0
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    sys_flag: int = 0
    magic: int = 0
    body_crc: int = 0
    properties_raw: str | None = field(default=None, repr=False, compare=False)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


def decode_batch(body: Buffer) -> list[BatchEntry]:
    """Split a batch body (§4.6); ``MessageFormatError`` if an entry is truncated or its sizes disagree."""
    out: list[BatchEntry] = []
    pos = 0
    end = len(body)
    fixed = _BATCH_FIXED.size
    unpack = _BATCH_FIXED.unpack_from
    unpack_props = _BATCH_PROPERTIES_LENGTH.unpack_from
    try:
        while pos < end:
            total, magic, crc, flag, body_len = unpack(body, pos)
            entry_end = pos + total
            if total < fixed + 2 or entry_end > end:
                raise MessageFormatError(f"batch entry size {total} at {pos} overruns a body of {end} bytes")
            start = pos + fixed
            if body_len < 0 or start + body_len + 2 > entry_end:
                raise MessageFormatError(f"batch entry body length {body_len} at {pos} overruns the entry")
            data = bytes(body[start : start + body_len])
            start += body_len
            (props_len,) = unpack_props(body, start)
            start += 2
            if props_len < 0 or start + props_len != entry_end:
                raise MessageFormatError(
                    f"batch entry properties length {props_len} at {pos} is inconsistent"
                )
            raw = str(body[start:entry_end], "utf-8")
            out.append(BatchEntry(flag, data, parse_properties(raw), 0, magic, crc, raw))
            pos = entry_end
    except struct.error as exc:
        raise MessageFormatError(f"truncated batch entry at {pos}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MessageFormatError(f"invalid UTF-8 in batch entry properties at {pos}: {exc}") from None
    return out


def encode_batch(entries: list[BatchEntry]) -> bytes:
    """A batch body as ``MessageDecoder.encodeMessages`` writes it."""
    parts: list[bytes] = []
    fixed = _BATCH_FIXED
    for entry in entries:
        try:
            props = properties_text(entry.properties, entry.properties_raw).encode()
        except UnicodeEncodeError as exc:
            raise MessageFormatError(f"batch entry properties cannot be encoded as UTF-8: {exc}") from None
        if len(props) > MAX_PROPERTIES_BYTES:
            raise MessageFormatError(
                f"properties of {len(props)} bytes are longer than {MAX_PROPERTIES_BYTES}"
            )
        total = fixed.size + len(entry.body) + 2 + len(props)
        try:
            parts.append(fixed.pack(total, entry.magic, entry.body_crc, entry.flag, len(entry.body)))
        except struct.error as exc:
            raise MessageFormatError(f"batch entry field out of range: {exc}") from None
        parts.append(bytes(entry.body))
        parts.append(_BATCH_PROPERTIES_LENGTH.pack(len(props)))
        parts.append(props)
    return b"".join(parts)
