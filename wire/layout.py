"""The remoting frame and the ROCKETMQ binary header, declared once in construct.

Hot paths do not run these declarations per frame: ``fixed_struct`` derives a ``struct.Struct``
from the leading fixed-width fields of a declaration, and the frame/header codecs use those.
"""

import struct

from construct import (
    Bytes,
    Construct,
    FormatField,
    GreedyRange,
    Int8ub,
    Int16sb,
    Int32sb,
    Int32ub,
    PascalString,
    Prefixed,
    Renamed,
    Struct,
    this,
)

HEADER_LENGTH_MASK = 0x00FFFFFF

#: The frame: ``length`` counts everything after itself; the header word carries the serialization
#: type in its high byte and the header length in the low 24 bits.
Frame = Struct(
    "length" / Int32ub,
    "header_word" / Int32ub,
    "header" / Bytes(this.header_word & HEADER_LENGTH_MASK),
    "body" / Bytes(this.length - 4 - (this.header_word & HEADER_LENGTH_MASK)),
)

#: One extFields entry of a ROCKETMQ header: int16 key length + key, int32 value length + value.
ExtField = Struct(
    "key" / PascalString(Int16sb, "utf8"),
    "value" / PascalString(Int32sb, "utf8"),
)

#: ROCKETMQ (binary) header (``RocketMQSerializable``). A remark or extFields length of 0 means null.
RocketMQHeader = Struct(
    "code" / Int16sb,
    "language" / Int8ub,
    "version" / Int16sb,
    "opaque" / Int32sb,
    "flag" / Int32sb,
    "remark" / PascalString(Int32sb, "utf8"),
    "ext_fields" / Prefixed(Int32sb, GreedyRange(ExtField)),
)


def _format_fields(con: Construct) -> list[tuple[str, FormatField]]:
    out = []
    for sub in con.subcons:
        inner = sub.subcon if isinstance(sub, Renamed) else sub
        if not isinstance(inner, FormatField):
            break
        out.append((sub.name, inner))
    return out


def fixed_struct(con: Construct) -> struct.Struct:
    """A ``struct.Struct`` for the leading run of fixed-width fields of a construct ``Struct``."""
    fields = _format_fields(con)
    if not fields:
        raise ValueError("declaration has no leading fixed-width fields")
    order = {f.fmtstr[0] for _, f in fields}
    if len(order) != 1:
        raise ValueError("mixed byte orders in one declaration")
    return struct.Struct(order.pop() + "".join(f.fmtstr[1:] for _, f in fields))


def joined_struct(*parts: struct.Struct) -> struct.Struct:
    """One ``struct.Struct`` for derived layouts that follow each other in a frame (one pack or unpack
    where a hot path would otherwise make several)."""
    order = {p.format[0] for p in parts}
    if len(order) != 1:
        raise ValueError("mixed byte orders in one joined layout")
    return struct.Struct(order.pop() + "".join(p.format[1:] for p in parts))


def fixed_field_names(con: Construct) -> tuple[str, ...]:
    return tuple(name for name, _ in _format_fields(con))


def prefix_struct(con: Construct) -> struct.Struct:
    """The ``struct.Struct`` of the length prefix of a ``PascalString``/``Prefixed`` (wrappers unwrapped)."""
    node = con
    while not hasattr(node, "lengthfield"):
        node = node.subcon
    return struct.Struct(node.lengthfield.fmtstr)


def field(con: Construct, name: str) -> Construct:
    for sub in con.subcons:
        if sub.name == name:
            return sub
    raise KeyError(name)


FRAME_PREFIX = fixed_struct(Frame)  # length, header word
FRAME_LENGTH = struct.Struct(field(Frame, "length").subcon.fmtstr)
ROCKETMQ_FIXED = fixed_struct(RocketMQHeader)  # code, language, version, opaque, flag
REMARK_LENGTH = prefix_struct(field(RocketMQHeader, "remark"))
EXT_TOTAL_LENGTH = prefix_struct(field(RocketMQHeader, "ext_fields"))
EXT_KEY_LENGTH = prefix_struct(field(ExtField, "key"))
EXT_VALUE_LENGTH = prefix_struct(field(ExtField, "value"))
