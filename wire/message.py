"""Stored messages, RocketMQ's MessageDecoder and MessageExt: the CommitLog record (= PULL/VIEW body
element), the properties string, offsetMsgId and the ConsumeQueue tag hash. Property names and sysFlag
bits are in ``message_const``, batch bodies in ``message_batch``, body compression in ``compression``.

Every layout is declared once in construct below; the hot paths use ``struct`` formats and byte
positions derived from those declarations (specialised per sysFlag host widths and magic version).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from operator import mul
from typing import Any, NamedTuple

from construct import (
    Bytes,
    Construct,
    FormatField,
    IfThenElse,
    Int8sb,
    Int16sb,
    Int32sb,
    Int32ub,
    Int64sb,
    PascalString,
    Renamed,
    Struct,
    Switch,
    this,
)

from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.layout import field as layout_field
from rmqgate.wire.layout import prefix_struct
from rmqgate.wire.message_const import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageSysFlag,
)

Buffer = bytes | bytearray | memoryview

# --------------------------------------------------------------------------------------------------
# Constants


def _signed32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
MAGIC_V1_SIGNED = _signed32(MAGIC_V1)  # -626843481, as Java's CommitLog.MESSAGE_MAGIC_CODE
MAGIC_V2_SIGNED = _signed32(MAGIC_V2)  # -626843477
BLANK_MAGIC_SIGNED = _signed32(BLANK_MAGIC)  # -875286124
#: Smallest end-of-file blank a CommitLog writer must be able to put (total size + magic).
END_FILE_MIN_BLANK_LENGTH = 8
#: Topic lengths above this (UTF-8 bytes) need the v2 record (2-byte topic length).
V1_TOPIC_MAX_BYTES = 127
MAX_TOPIC_BYTES = 32767
MAX_PROPERTIES_BYTES = 32767


# --------------------------------------------------------------------------------------------------
# Declarations

_HOST_V4 = 4
_HOST_V6 = 16

#: One CommitLog record (``CommitLog.DefaultAppendMessageCallback``, ``MessageDecoder.decode``).
#: The magic selects the topic-length width; sysFlag bits select IPv4/IPv6 born and store hosts.
StoredMessage = Struct(
    "total_size" / Int32sb,
    "magic" / Int32ub,
    "body_crc" / Int32sb,
    "queue_id" / Int32sb,
    "flag" / Int32sb,
    "queue_offset" / Int64sb,
    "commit_log_offset" / Int64sb,
    "sys_flag" / Int32sb,
    "born_timestamp" / Int64sb,
    "born_host" / IfThenElse(this.sys_flag & MessageSysFlag.BORNHOST_V6, Bytes(_HOST_V6), Bytes(_HOST_V4)),
    "born_port" / Int32sb,
    "store_timestamp" / Int64sb,
    "store_host" / IfThenElse(this.sys_flag & MessageSysFlag.STOREHOST_V6, Bytes(_HOST_V6), Bytes(_HOST_V4)),
    "store_port" / Int32sb,
    "reconsume_times" / Int32sb,
    "prepared_transaction_offset" / Int64sb,
    "body_length" / Int32sb,
    "body" / Bytes(this.body_length),
    "topic"
    / Switch(this.magic, {MAGIC_V1: PascalString(Int8sb, "utf8"), MAGIC_V2: PascalString(Int16sb, "utf8")}),
    "properties" / PascalString(Int16sb, "utf8"),
)

#: offsetMsgId before hex encoding: store host address, port, CommitLog offset.
OffsetMsgId = Struct(
    "address" / IfThenElse(this.v6, Bytes(_HOST_V6), Bytes(_HOST_V4)),
    "port" / Int32sb,
    "commit_log_offset" / Int64sb,
)


def _resolve(con: Construct, ctx: Mapping[str, Any]) -> Construct:
    while True:
        if isinstance(con, Renamed):
            con = con.subcon
        elif isinstance(con, IfThenElse):
            con = con.thensubcon if con.condfunc(ctx) else con.elsesubcon
        elif isinstance(con, Switch):
            con = con.cases[con.keyfunc(ctx)]
        else:
            return con


def _fixed_layout(con: Construct, ctx: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(name, struct code, offset) of the leading fixed-width fields of ``con`` specialised for ``ctx``."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    for sub in con.subcons:
        inner = _resolve(sub, ctx)
        if isinstance(inner, FormatField):
            code = inner.fmtstr[1:]
        elif isinstance(inner, Bytes) and isinstance(inner.length, int):
            code = f"{inner.length}s"
        else:
            break
        out.append((sub.name, code, pos))
        pos += struct.calcsize(">" + code)
    return out


def _run_struct(layout: list[tuple[str, str, int]], first: str, last: str) -> tuple[int, struct.Struct]:
    """Position and ``struct.Struct`` of the contiguous fields ``first``..``last`` of a fixed layout."""
    names = [name for name, _, _ in layout]
    i, j = names.index(first), names.index(last)
    return layout[i][2], struct.Struct(">" + "".join(code for _, code, _ in layout[i : j + 1]))


def _pick_struct(layout: list[tuple[str, str, int]], *names: str) -> struct.Struct:
    """``struct.Struct`` reading just the named fields of a fixed layout (in layout order), skipping
    the bytes between them."""
    fmt, at = ">", 0
    for name, code, pos in layout:
        if name in names:
            fmt += (f"{pos - at}x" if pos > at else "") + code
            at = pos + struct.calcsize(">" + code)
    return struct.Struct(fmt)


def _ctx(sys_flag: int = 0, magic: int = MAGIC_V1) -> dict[str, int]:
    return {"sys_flag": sys_flag, "magic": magic}


_HOST_FLAGS = MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6
_LAYOUTS = {hf: _fixed_layout(StoredMessage, _ctx(hf)) for hf in (0, 0x10, 0x20, 0x30)}
_V4 = _LAYOUTS[0]

#: total size + magic: what a CommitLog scanner reads first (also the whole BLANK record).
_RECORD_PREFIX_POS, RECORD_PREFIX = _run_struct(_V4, "total_size", "magic")
#: The host-independent leading fields (total size .. born timestamp).
_HEAD_POS, _HEAD = _run_struct(_V4, "total_size", "born_timestamp")
#: Per host-width combination: born host .. body length, and the whole fixed part.
_TAILS = {hf: _run_struct(lay, "born_host", "body_length")[1] for hf, lay in _LAYOUTS.items()}
_FIXED = {hf: _run_struct(lay, "total_size", "body_length")[1] for hf, lay in _LAYOUTS.items()}
_TAIL_POS = _HEAD.size
_TOPIC_LENGTH = {
    MAGIC_V1: prefix_struct(_resolve(layout_field(StoredMessage, "topic"), _ctx(magic=MAGIC_V1))),
    MAGIC_V2: prefix_struct(_resolve(layout_field(StoredMessage, "topic"), _ctx(magic=MAGIC_V2))),
}
_PROPERTIES_LENGTH = prefix_struct(layout_field(StoredMessage, "properties"))
_MIN_RECORD = _FIXED[0].size + _TOPIC_LENGTH[MAGIC_V1].size + _PROPERTIES_LENGTH.size

QUEUE_OFFSET_POS, _OFFSETS = _run_struct(_V4, "queue_offset", "commit_log_offset")
PHYSICAL_OFFSET_POS, _PHYSICAL_OFFSET = _run_struct(_V4, "commit_log_offset", "commit_log_offset")
SYSFLAG_POS, _SYSFLAG = _run_struct(_V4, "sys_flag", "sys_flag")
_TOTAL_SIZE = _run_struct(_V4, "total_size", "total_size")[1]
MAGIC_POS = _run_struct(_V4, "magic", "magic")[0]
FLAG_POS = _run_struct(_V4, "flag", "flag")[0]
BODY_CRC_POS = _run_struct(_V4, "body_crc", "body_crc")[0]
_STORE_TS_POS = {
    hf: _run_struct(lay, "store_timestamp", "store_timestamp")[0] for hf, lay in _LAYOUTS.items()
}
_STORE_TIMESTAMP = _run_struct(_V4, "store_timestamp", "store_timestamp")[1]
#: Java's MESSAGE_STORE_TIMESTAMP_POSITION (IPv4 born host).
STORE_TIMESTAMP_POS = _STORE_TS_POS[0]

_MSG_ID = {
    False: _run_struct(_fixed_layout(OffsetMsgId, {"v6": False}), "address", "commit_log_offset")[1],
    True: _run_struct(_fixed_layout(OffsetMsgId, {"v6": True}), "address", "commit_log_offset")[1],
}
_MSG_ID_HEX_LENGTH = {_MSG_ID[False].size * 2: _MSG_ID[False], _MSG_ID[True].size * 2: _MSG_ID[True]}


def store_timestamp_pos(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP in a record with this sysFlag (56 with an IPv4 born host)."""
    return _STORE_TS_POS[sys_flag & _HOST_FLAGS]


def record_length(
    body_len: int,
    topic_len: int,
    properties_len: int,
    born_v6: bool = False,
    store_v6: bool = False,
    v2: bool = False,
) -> int:
    """CommitLog record size (``CommitLog.calMsgLength``), lengths in bytes."""
    hf = (MessageSysFlag.BORNHOST_V6 if born_v6 else 0) | (MessageSysFlag.STOREHOST_V6 if store_v6 else 0)
    return (
        _FIXED[hf].size
        + body_len
        + _TOPIC_LENGTH[MAGIC_V2 if v2 else MAGIC_V1].size
        + topic_len
        + _PROPERTIES_LENGTH.size
        + properties_len
    )


# --------------------------------------------------------------------------------------------------
# Properties


def parse_properties(s: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: pairs without a key, value or separator are skipped."""
    out: dict[str, str] = {}
    if not s:
        return out
    # (a plain loop: dict() over a methodcaller split, then checking for empty parts, is ~1.7x slower)
    for item in s.split(PROPERTY_SEPARATOR):
        key, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if key and value:
            out[key] = value
    return out


def _java_spread_hash(key: str) -> int:
    h = java_string_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def java_hashmap_order(keys: list[str], max_size: int | None = None) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` (default capacity) holding ``keys``, inserted in order.

    ``max_size`` is the largest size the map ever reached (removals do not shrink the table).
    Treeified bins (8+ colliding keys) are not modelled.
    """
    size = max(len(keys), max_size or 0)
    capacity = 16
    while size > capacity * 3 // 4:
        capacity <<= 1
    mask = capacity - 1
    return sorted(keys, key=lambda k: _java_spread_hash(k) & mask)


_join_pairs = PROPERTY_SEPARATOR.join
_join_pair = NAME_VALUE_SEPARATOR.join


def format_properties(
    properties: Mapping[str, str | None], *, java_order: bool = False, max_size: int | None = None
) -> str:
    """``MessageDecoder.messageProperties2String``: ``k\\x01v`` joined by ``\\x02``, None values skipped.

    With ``java_order`` the pairs come in the iteration order of the Java broker's HashMap (see
    ``java_hashmap_order``), which is what a Java broker writes to the CommitLog.
    """
    if java_order:
        keys = java_hashmap_order([k for k, v in properties.items() if v is not None], max_size)
        return PROPERTY_SEPARATOR.join([f"{k}{NAME_VALUE_SEPARATOR}{properties[k]}" for k in keys])
    try:
        # str.join straight over the (key, value) item tuples runs in C; a None value (or any
        # non-str) makes it raise TypeError, and the general form below skips or formats those.
        return _join_pairs(map(_join_pair, properties.items()))
    except TypeError:
        return PROPERTY_SEPARATOR.join(
            [f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items() if v is not None]
        )


def properties_text(properties: Mapping[str, str | None], raw: str | None) -> str:
    """The properties string to write: a decoded ``raw`` is written back verbatim (byte-identical
    records) while it still parses to ``properties``, whoever changed the dict and however."""
    text = format_properties(properties)
    if raw is None or text == raw:  # the common case: raw is the dict's own formatting
        return text
    # raw in another form (Java order, skipped pairs) or the dict was changed: compare parsed
    return raw if parse_properties(raw) == properties else text


# --------------------------------------------------------------------------------------------------
# Stored message


@dataclass(slots=True)
class MessageExt:
    """One stored message: a CommitLog record, a PULL/VIEW body element.

    ``body`` is the body as stored (still compressed when sysFlag has COMPRESSED); hosts are raw
    4- or 16-byte addresses that must agree with the BORNHOST_V6/STOREHOST_V6 sysFlag bits.
    ``properties_raw`` is the decoded properties string; ``encode_message`` writes it back verbatim
    while it still parses to ``properties``.
    """

    topic: str
    body: bytes | bytearray | memoryview = b""
    flag: int = 0
    queue_id: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x00\x00\x00\x00"
    born_port: int = 0
    store_timestamp: int = 0
    store_host: bytes = b"\x00\x00\x00\x00"
    store_port: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0
    magic: int = MAGIC_V1
    properties_raw: str | None = field(default=None, repr=False, compare=False)

    def detached(self, **changes: Any) -> MessageExt:
        """A copy to store again (a delayed message when due, a half re-put or ended): it owns its
        body (a stored message's is a view of the mapped file) and its properties dict, with
        ``changes`` applied; the properties string as read is still written while the dict matches it."""
        return replace(self, body=bytes(self.body), properties=dict(self.properties), store_size=0, **changes)

    @property
    def offset_msg_id(self) -> str:
        return encode_offset_msg_id(self.store_host, self.store_port, self.commit_log_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


def body_crc(body: Buffer) -> int:
    """``UtilAll.crc32``: CRC32 masked to a non-negative int32."""
    return zlib.crc32(body) & 0x7FFFFFFF


_unpack_head = _HEAD.unpack_from
_unpack_prefix = RECORD_PREFIX.unpack_from
_unpack_props_len = _PROPERTIES_LENGTH.unpack_from
_TAIL_UNPACK = {hf: s.unpack_from for hf, s in _TAILS.items()}
_TOPIC_UNPACK = {m: (s.unpack_from, s.size) for m, s in _TOPIC_LENGTH.items()}


_BODY_LENGTH_POS = {hf: st.size - 4 for hf, st in _FIXED.items()}  # body length ends the fixed part
_unpack_int = _TOTAL_SIZE.unpack_from


#: (position, sysFlag, store timestamp, topic, KEYS, UNIQ_KEY) of a record an index dispatcher indexes.
IndexRecord = tuple[int, int, int, bytes, "bytes | None", "bytes | None"]


class IndexScan(NamedTuple):
    """What ``scan_index_records`` found: records with KEYS or UNIQ_KEY as ``(position, sysFlag,
    store timestamp, topic, KEYS, UNIQ_KEY)`` (topic and values as UTF-8 bytes, absent values None),
    where the scan stopped, the store timestamp of the last record read (0 if none) and why it
    stopped early (``"blank"`` at the end-of-file BLANK record, else what is wrong with the record
    at ``end``), None when it reached the end or the record limit."""

    records: list[IndexRecord]
    end: int
    last_store_timestamp: int
    stopped: str | None


#: Per host-width combination: (total size, magic, sysFlag, store timestamp, body length) in one unpack.
_INDEX_PICK = {
    hf: _pick_struct(lay, "total_size", "magic", "sys_flag", "store_timestamp", "body_length").unpack_from
    for hf, lay in _LAYOUTS.items()
}
_KEYS_PAIR = (PROPERTY_KEYS + NAME_VALUE_SEPARATOR).encode()
_UNIQ_KEY_PAIR = (PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR).encode()
_PROPERTY_SEPARATOR_BYTES = PROPERTY_SEPARATOR.encode()
_PROPERTY_SEPARATOR_CODE = ord(PROPERTY_SEPARATOR)


def _property_bytes(buf: bytes | bytearray | mmap.mmap, pair: bytes, start: int, end: int) -> bytes | None:
    """``parse_properties(...).get(name)`` over the UTF-8 properties at ``buf[start:end]`` without
    parsing the others, ``pair`` being the encoded name and separator: the last pair whose name is
    exactly that (at the start or after a separator) and whose value is not empty. The separators
    never occur inside a multi-byte UTF-8 sequence."""
    i = end
    while True:
        i = buf.rfind(pair, start, i)
        if i < 0:
            return None
        if i == start or buf[i - 1] == _PROPERTY_SEPARATOR_CODE:
            value_at = i + len(pair)
            value_end = buf.find(_PROPERTY_SEPARATOR_BYTES, value_at, end)
            if value_end < 0:
                value_end = end
            if value_end > value_at:
                return buf[value_at:value_end]


def record_properties(buf: Buffer) -> RecordProperties:
    """The properties of the stored record ``buf`` (exactly one whole record, e.g. a ConsumeQueue
    unit's CommitLog slice: the properties end it) as a lazy view, nothing else decoded; raises
    ``MessageFormatError`` if the record is malformed."""
    try:
        _, magic, sys_flag, _, body_len = _PICK_V4(buf, 0)
        hf = sys_flag & _HOST_FLAGS
        if hf:
            _, magic, sys_flag, _, body_len = _INDEX_PICK[hf](buf, 0)
        at = _BODY_END[hf] + body_len
        if magic == MAGIC_V1:
            at += 1 + buf[at]
        else:
            unpack_topic_len, topic_prefix = _TOPIC_UNPACK[magic]
            at += topic_prefix + unpack_topic_len(buf, at)[0]
        (props_len,) = _unpack_props_len(buf, at)
    except (struct.error, KeyError, IndexError) as exc:
        raise MessageFormatError(f"unreadable record properties: {exc}") from None
    at += 2
    if at + props_len != len(buf):
        raise MessageFormatError(f"properties length {props_len} disagrees with the record size {len(buf)}")
    return RecordProperties(buf[at:])


_PICK_V4 = _INDEX_PICK[0]
_BODY_END = {hf: pos + 4 for hf, pos in _BODY_LENGTH_POS.items()}


class RecordProperties(bytes):
    """A stored message's properties text (UTF-8 bytes) read one property at a time: ``get(name)``
    is ``parse_properties(text).get(name)`` without splitting the others (a filter that reads one or
    two properties of a message pays for those only). A value that is not UTF-8 reads as absent."""

    __slots__ = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        pair = _PAIRS.get(name)
        if pair is None:
            pair = (name + NAME_VALUE_SEPARATOR).encode()
            if len(_PAIRS) < _MAX_PAIRS:  # the names come from clients' expressions: kept bounded
                _PAIRS[name] = pair
        raw = self
        at = raw.rfind(pair)
        if at < 0:
            return default
        if at == 0 or raw[at - 1] == _PROPERTY_SEPARATOR_CODE:  # the usual case, in one step
            start = at + len(pair)
            end = raw.find(_PROPERTY_SEPARATOR_BYTES, start)
            value: bytes | None = raw[start:end] if end >= 0 else raw[start:]
            if not value:  # an empty value is no value: an earlier pair may have one
                value = _property_bytes(raw, pair, 0, at)
        else:
            value = _property_bytes(raw, pair, 0, at)
        if value is None:
            return default
        try:
            return str(value, "utf-8")
        except UnicodeDecodeError:
            return default


_PAIRS: dict[str, bytes] = {}
_MAX_PAIRS = 4096


def scan_index_records(buf: bytes | bytearray | mmap.mmap, pos: int, end: int, max_records: int) -> IndexScan:
    """Read the records in ``buf[pos:end]`` (a CommitLog segment; at most ``max_records``) for an
    index dispatcher: per record one unpack of its fixed fields, the topic and the KEYS and UNIQ_KEY
    values as bytes, with no message built and nothing decoded."""
    records: list[IndexRecord] = []
    append = records.append
    pick_v4 = _PICK_V4
    rfind = buf.rfind
    find = buf.find
    keys_pair, uniq_pair, sep = _KEYS_PAIR, _UNIQ_KEY_PAIR, _PROPERTY_SEPARATOR_BYTES
    sep_code = _PROPERTY_SEPARATOR_CODE
    uniq_len = len(uniq_pair)
    body_end_v4 = _BODY_END[0]
    last_ts = 0
    size = len(buf)
    scanned = 0
    while pos < end and scanned < max_records:
        try:
            total, magic, sys_flag, store_ts, body_len = pick_v4(buf, pos)
            if magic == BLANK_MAGIC:
                return IndexScan(records, pos, last_ts, "blank")
            hf = sys_flag & _HOST_FLAGS
            if hf:
                total, magic, sys_flag, store_ts, body_len = _INDEX_PICK[hf](buf, pos)
                at = pos + _BODY_END[hf] + body_len
            else:
                at = pos + body_end_v4 + body_len
            unpack_topic_len, topic_prefix = _TOPIC_UNPACK[magic]
            (topic_len,) = unpack_topic_len(buf, at)
            at += topic_prefix
            topic_end = at + topic_len
            (props_len,) = _unpack_props_len(buf, topic_end)
        except (struct.error, KeyError) as exc:
            if pos + RECORD_PREFIX.size <= size and _unpack_prefix(buf, pos)[1] == BLANK_MAGIC:
                return IndexScan(records, pos, last_ts, "blank")  # in the last bytes of the segment
            return IndexScan(records, pos, last_ts, f"truncated or unknown record at offset {pos}: {exc}")
        props_at = topic_end + 2
        record_end = pos + total
        if (
            body_len < 0
            or topic_len < 0
            or props_len < 0
            or props_at + props_len != record_end
            or record_end > size
        ):
            return IndexScan(
                records, pos, last_ts, f"record lengths disagree with total size {total} at offset {pos}"
            )
        if props_len:
            # _property_bytes inlined for UNIQ_KEY's usual place (one pair, a value); KEYS only when
            # its name occurs at all
            i = rfind(uniq_pair, props_at, record_end)
            uniq = None
            if i >= 0:
                value_at = i + uniq_len
                value_end = find(sep, value_at, record_end)
                if value_end < 0:
                    value_end = record_end
                if value_end > value_at and (i == props_at or buf[i - 1] == sep_code):
                    uniq = buf[value_at:value_end]
                else:  # an empty value or a name ending in UNIQ_KEY: the general search
                    uniq = _property_bytes(buf, uniq_pair, props_at, record_end)
            keys = (
                _property_bytes(buf, keys_pair, props_at, record_end)
                if find(keys_pair, props_at, record_end) >= 0
                else None
            )
            if keys or uniq:
                append((pos, sys_flag, store_ts, buf[at:topic_end], keys, uniq))
        last_ts = store_ts
        pos = record_end
        scanned += 1
    return IndexScan(records, pos, last_ts, None)


def decode_message(
    buf: Buffer,
    offset: int = 0,
    *,
    with_body: bool = True,
    check_crc: bool = False,
    copy_body: bool = True,
) -> MessageExt:
    """Parse the stored message at ``buf[offset:]``; raises ``MessageFormatError`` if it is malformed.

    ``copy_body=False`` leaves the body as a memoryview into ``buf``.
    """
    if offset < 0:
        raise MessageFormatError(f"negative record offset {offset}")
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _unpack_head(buf, offset)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            raise MessageFormatError(f"bad magic 0x{magic:08X} at offset {offset}")
        end = offset + total
        if total < _MIN_RECORD or end > len(buf):
            raise MessageFormatError(
                f"record total size {total} at offset {offset} does not fit a buffer of {len(buf)} bytes"
            )
        hf = sys_flag & _HOST_FLAGS
        (born_host, born_port, store_ts, store_host, store_port, reconsume, prep_tx, body_len) = _TAIL_UNPACK[
            hf
        ](buf, offset + _TAIL_POS)
        pos = offset + _FIXED[hf].size
        if body_len < 0 or pos + body_len > end:
            raise MessageFormatError(f"body length {body_len} overruns the record at offset {offset}")
        if with_body:
            view = buf[pos : pos + body_len] if copy_body else memoryview(buf)[pos : pos + body_len]
            body = bytes(view) if copy_body else view
            if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
                raise MessageFormatError(f"body CRC mismatch in the record at offset {offset}")
        else:
            body = b""
        pos += body_len
        unpack_topic_len, topic_prefix = _TOPIC_UNPACK[magic]
        (topic_len,) = unpack_topic_len(buf, pos)
        pos += topic_prefix
        if topic_len < 0 or pos + topic_len > end:
            raise MessageFormatError(f"topic length {topic_len} overruns the record at offset {offset}")
        topic = str(buf[pos : pos + topic_len], "utf-8")
        pos += topic_len
        (props_len,) = _unpack_props_len(buf, pos)
        pos += 2
        if props_len < 0 or pos + props_len != end:
            raise MessageFormatError(
                f"properties length {props_len} disagrees with total size {total} at offset {offset}"
            )
        raw = str(buf[pos:end], "utf-8") if props_len else ""
    except struct.error as exc:
        raise MessageFormatError(f"truncated record at offset {offset}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise MessageFormatError(f"invalid UTF-8 in the record at offset {offset}: {exc}") from None
    return MessageExt(
        topic,
        body,
        flag,
        queue_id,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_host,
        born_port,
        store_ts,
        store_host,
        store_port,
        reconsume,
        prep_tx,
        parse_properties(raw),
        crc,
        total,
        magic,
        raw,
    )


def iter_messages(buf: Buffer, *, with_body: bool = True) -> Iterator[MessageExt]:
    """The records of a PULL/QUERY/VIEW body: stored messages back to back, nothing else."""
    offset = 0
    end = len(buf)
    while offset < end:
        msg = decode_message(buf, offset, with_body=with_body)
        offset += msg.store_size
        yield msg


def iter_commitlog(buf: Buffer, offset: int = 0, *, with_body: bool = True) -> Iterator[MessageExt]:
    """The records of one CommitLog file from ``offset``, up to the end-of-file BLANK record, the
    unwritten (zero) tail or the end of ``buf``; ``MessageFormatError`` on anything else."""
    end = len(buf)
    while offset + RECORD_PREFIX.size <= end:
        total, magic = _unpack_prefix(buf, offset)
        if magic == BLANK_MAGIC or (total == 0 and magic == 0):
            return
        msg = decode_message(buf, offset, with_body=with_body)
        offset += msg.store_size
        yield msg


def encode_blank(remaining: int) -> bytes:
    """The end-of-file BLANK record announcing ``remaining`` unused bytes."""
    return RECORD_PREFIX.pack(remaining, BLANK_MAGIC)


def _field_size(layout: list[tuple[str, str, int]], name: str) -> int:
    return _run_struct(layout, name, name)[1].size


#: Per host-width combination (sysFlag & BORNHOST_V6|STOREHOST_V6): packer of magic .. body length
#: (the fixed part after TOTALSIZE, which goes in last) and the born/store host widths it expects.
_REST_POS = _run_struct(_V4, "magic", "magic")[0]
_RECORD_REST = {
    hf: (
        _run_struct(lay, "magic", "body_length")[1].pack,
        _field_size(lay, "born_host"),
        _field_size(lay, "store_host"),
    )
    for hf, lay in _LAYOUTS.items()
}
_pack_total_into = _TOTAL_SIZE.pack_into
_pack_properties_length = _PROPERTIES_LENGTH.pack
_join_bytes = b"".join
_crc32 = zlib.crc32

#: topic -> ((magic, length prefix + UTF-8 topic) unless ``msg.magic`` asks for v2, (the same) when it
#: does): v1 up to 127 bytes, else v2. Bounded: topics up to 255 bytes (what a broker accepts), and
#: emptied when full.
_TOPIC_PARTS: dict[str, tuple[tuple[int, bytes], tuple[int, bytes]]] = {}
_TOPIC_PARTS_MAX = 4096
_TOPIC_PARTS_MAX_BYTES = 255


def _utf8_within(text: str, what: str, limit: int) -> bytes:
    try:
        raw = text.encode()
    except UnicodeEncodeError as exc:
        raise MessageFormatError(f"{what} cannot be encoded as UTF-8: {exc}") from None
    if len(raw) > limit:
        raise MessageFormatError(f"{what}: {len(raw)} UTF-8 bytes, more than the {limit} allowed")
    return raw


def _topic_parts(topic: str) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    raw = _utf8_within(topic, "topic", MAX_TOPIC_BYTES)
    n = len(raw)
    v2 = (MAGIC_V2, _TOPIC_LENGTH[MAGIC_V2].pack(n) + raw)
    parts = (v2 if n > V1_TOPIC_MAX_BYTES else (MAGIC_V1, _TOPIC_LENGTH[MAGIC_V1].pack(n) + raw), v2)
    if n <= _TOPIC_PARTS_MAX_BYTES:
        if len(_TOPIC_PARTS) >= _TOPIC_PARTS_MAX:
            _TOPIC_PARTS.clear()
        _TOPIC_PARTS[topic] = parts
    return parts


def encode_message_into(msg: MessageExt, buf: bytearray | memoryview, pos: int, limit: int) -> int:
    """Write the CommitLog record of ``msg`` at ``buf[pos:]`` (e.g. straight into a mapped segment)
    and return its size; sets ``msg.store_size``, ``msg.body_crc`` and ``msg.magic``.

    v1 unless the topic exceeds 127 UTF-8 bytes (or ``msg.magic`` already says v2); host widths
    follow the sysFlag bits. Everything after TOTALSIZE is built as one bytes object and copied in
    one slice assignment (slicing a memoryview of a mapping costs more than joining); TOTALSIZE is
    written last, so a reader (or a crash) never sees a partly written record as one. If the record
    would end past ``limit`` nothing is written and minus its size is returned.
    """
    topic = msg.topic
    try:
        magic, topic_part = _TOPIC_PARTS[topic][msg.magic == MAGIC_V2]
    except KeyError:
        magic, topic_part = _topic_parts(topic)[msg.magic == MAGIC_V2]
    properties = msg.properties
    raw = msg.properties_raw
    if raw is None:  # the put path: format_properties inlined
        try:
            text = _join_pairs(map(_join_pair, properties.items()))
        except TypeError:
            text = format_properties(properties)
    else:
        text = properties_text(properties, raw)
    try:
        props = text.encode()
    except UnicodeEncodeError:
        props = _utf8_within(text, "properties", MAX_PROPERTIES_BYTES)  # raises, saying why
    sys_flag = msg.sys_flag
    pack_rest, born_width, store_width = _RECORD_REST[sys_flag & _HOST_FLAGS]
    born_host = msg.born_host
    store_host = msg.store_host
    if len(born_host) != born_width or len(store_host) != store_width:
        raise _host_width_error(born_host, store_host, sys_flag)
    body = msg.body
    crc = _crc32(body) & 0x7FFFFFFF
    try:
        rest = _join_bytes(
            (
                pack_rest(
                    magic,
                    crc,
                    msg.queue_id,
                    msg.flag,
                    msg.queue_offset,
                    msg.commit_log_offset,
                    sys_flag,
                    msg.born_timestamp,
                    born_host,
                    msg.born_port,
                    msg.store_timestamp,
                    store_host,
                    msg.store_port,
                    msg.reconsume_times,
                    msg.prepared_transaction_offset,
                    len(body),
                ),
                body,
                topic_part,
                _pack_properties_length(len(props)),  # past MAX_PROPERTIES_BYTES: struct.error
                props,
            )
        )
    except struct.error as exc:
        _utf8_within(text, "properties", MAX_PROPERTIES_BYTES)  # the properties length: raises, saying so
        raise MessageFormatError(f"message field out of range: {exc}") from None
    total = _REST_POS + len(rest)
    end = pos + total
    if end > limit:
        return -total
    buf[pos + _REST_POS : end] = rest
    _pack_total_into(buf, pos, total)
    msg.store_size = total
    msg.body_crc = crc
    msg.magic = magic
    return total


def _host_width_error(born_host: bytes, store_host: bytes, sys_flag: int) -> MessageFormatError:
    born_width = _RECORD_REST[sys_flag & _HOST_FLAGS][1]
    which, host = ("born", born_host) if len(born_host) != born_width else ("store", store_host)
    return MessageFormatError(f"{which} host of {len(host)} bytes disagrees with sysFlag 0x{sys_flag:X}")


_NO_LIMIT = 1 << 62


def encode_message(msg: MessageExt) -> bytearray:
    """The CommitLog record of ``msg`` (see ``encode_message_into``, which writes the same bytes)."""
    out = bytearray(_REST_POS)
    # encode_message_into's one slice assignment after TOTALSIZE extends this too-short bytearray
    encode_message_into(msg, out, 0, _NO_LIMIT)
    return out


_pack_offsets = _OFFSETS.pack_into
_pack_store_ts = _STORE_TIMESTAMP.pack_into
_unpack_sysflag = _SYSFLAG.unpack_from


def patch_record(
    buf: bytearray | memoryview, pos: int, queue_offset: int, physical_offset: int, store_timestamp: int
) -> None:
    """Write QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP into the record at ``buf[pos:]``."""
    _pack_offsets(buf, pos + QUEUE_OFFSET_POS, queue_offset, physical_offset)
    (sys_flag,) = _unpack_sysflag(buf, pos + SYSFLAG_POS)
    _pack_store_ts(buf, pos + _STORE_TS_POS[sys_flag & _HOST_FLAGS], store_timestamp)


# --------------------------------------------------------------------------------------------------
# offsetMsgId


def encode_offset_msg_id(address: bytes, port: int, commit_log_offset: int) -> str:
    """Broker message id: uppercase hex of store address (4 or 16 bytes), port, CommitLog offset."""
    if len(address) == _HOST_V4:
        layout = _MSG_ID[False]
    elif len(address) == _HOST_V6:
        layout = _MSG_ID[True]
    else:
        raise MessageFormatError(f"store address of {len(address)} bytes is neither IPv4 nor IPv6")
    try:
        return layout.pack(address, port, commit_log_offset).hex().upper()
    except struct.error as exc:
        raise MessageFormatError(f"offsetMsgId field out of range: {exc}") from None


def decode_offset_msg_id(msg_id: str) -> tuple[bytes, int, int]:
    """``(address, port, commit_log_offset)`` of an offsetMsgId: 32 hex chars IPv4, 56 IPv6."""
    layout = _MSG_ID_HEX_LENGTH.get(len(msg_id))
    if layout is None:
        raise MessageFormatError(f"offsetMsgId of {len(msg_id)} characters (expected 32 or 56)")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageFormatError(f"offsetMsgId {msg_id!r} is not hex") from None
    if len(raw) != layout.size:  # fromhex skips whitespace
        raise MessageFormatError(f"offsetMsgId {msg_id!r} is not hex")
    return layout.unpack(raw)


# --------------------------------------------------------------------------------------------------
# Tag hash


#: 31**k mod 2**32 for k = 0..256: the weight of the k-th UTF-16 code unit from the end of a string.
_POW31 = tuple(pow(31, k, 1 << 32) for k in range(257))
_CHUNK = 256


def java_string_hash(s: str | bytes, seed: int = 0) -> int:
    """Java ``String.hashCode()``: int32 arithmetic over UTF-16 code units, signed result.

    ``seed`` is the hash of a prefix: ``java_string_hash(b, java_string_hash(a)) == java_string_hash(a + b)``.
    ``s`` may also be UTF-8 bytes, hashed as the string they decode to (malformed input replaced, as
    Java's ``new String(bytes, UTF_8)`` does); ASCII bytes are their own code units, so nothing is
    decoded. The polynomial is summed in C (``map(mul)`` over the reversed units and a table of
    powers of 31) instead of a per-unit Python loop.
    """
    if s.isascii():
        units: Any = s if type(s) is bytes else s.encode("ascii")
    else:
        if type(s) is bytes:
            s = s.decode("utf-8", "replace")
        data = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    table = _POW31
    n = len(units)
    if n <= _CHUNK:
        h = seed * table[n] + sum(map(mul, units[::-1], table))
    else:
        h = seed
        for start in range(0, n, _CHUNK):
            chunk = units[start : start + _CHUNK]
            h = (h * table[len(chunk)] + sum(map(mul, chunk[::-1], table))) & 0xFFFFFFFF
    h &= 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value (``MessageExtBrokerInner.tagsString2tagsCode``)."""
    if not tags:
        return 0
    return java_string_hash(tags)
