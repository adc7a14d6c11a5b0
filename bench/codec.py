"""Codec micro-benchmarks: microseconds per operation next to a floor measured in the same run.

Floors: ``json.loads`` of the same JSON header bytes; for binary layouts, a bare ``struct`` decode
of the same fields (one precompiled unpack of the fixed fields plus slicing the variable parts),
i.e. the least work any decoder of that layout must do. Run: ``.venv/bin/python bench/codec.py``.
"""

from __future__ import annotations

import json
import mmap
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import per_op_us, print_table

from rmqgate.wire import RemotingCommand, decode_frame, encode_frame
from rmqgate.wire.codes import RequestCode, SerializeType
from rmqgate.wire.headers import SendMessageRequestHeader, SendMessageResponseHeader
from rmqgate.wire.message import MessageExt, decode_message, encode_message, encode_message_into

TARGET_RATIO = 1.5


def send_v2_request(serialize_type: int) -> RemotingCommand:
    """A SEND_MESSAGE_V2 request shaped like the Java 4.9.8 producer's (see the corpus)."""
    ext = {
        "a": "please_rename_unique_group_name",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "0",
        "g": "1763780000123",
        "h": "0",
        "i": "KEYS\x01OrderID188\x02UNIQ_KEY\x017F0000013D4A18B4AAC2581D2E9C0000\x02WAIT\x01true\x02TAGS\x01TagA",
        "j": "0",
        "k": "false",
        "m": "false",
        "n": "broker-a",
    }
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, ext, b"x" * 1024, opaque=4711, serialize_type=serialize_type
    )


def bare_rocketmq_header_decode(header: bytes) -> tuple:
    """Floor: the minimal struct-based decode of a ROCKETMQ header (fixed fields + strings)."""
    code, lang, version, opaque, flag, rlen = FIXED_AND_REMARK.unpack_from(header, 0)
    pos = FIXED_AND_REMARK.size + rlen
    (elen,) = INT.unpack_from(header, pos)
    pos += 4
    stop = pos + elen
    ext = {}
    while pos < stop:
        (klen,) = SHORT.unpack_from(header, pos)
        key = header[pos + 2 : pos + 2 + klen].decode()
        pos += 2 + klen
        (vlen,) = INT.unpack_from(header, pos)
        ext[key] = header[pos + 4 : pos + 4 + vlen].decode()
        pos += 4 + vlen
    return code, lang, version, opaque, flag, ext


def bare_rocketmq_header_encode(
    code: int, version: int, opaque: int, flag: int, ext: dict[str, str]
) -> bytes:
    """Floor: the same response frame packed by hand (prefix, fixed fields, extFields)."""
    parts = []
    for k, v in ext.items():
        kb, vb = k.encode(), v.encode()
        parts += (SHORT.pack(len(kb)), kb, INT.pack(len(vb)), vb)
    ext_bytes = b"".join(parts)
    header = FIXED_AND_REMARK.pack(code, 0, version, opaque, flag, 0) + INT.pack(len(ext_bytes)) + ext_bytes
    return struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header


FIXED_AND_REMARK = struct.Struct(">hbhiii")
INT = struct.Struct(">i")
SHORT = struct.Struct(">h")


def rows_frames() -> list[list[object]]:
    rows: list[list[object]] = []
    json_frame = encode_frame(send_v2_request(SerializeType.JSON))
    header_len = struct.unpack_from(">i", json_frame, 4)[0] & 0xFFFFFF
    json_header = json_frame[8 : 8 + header_len]
    ours = per_op_us(lambda: decode_frame(json_frame))
    floor = per_op_us(lambda: json.loads(json_header))
    rows.append(["JSON-header frame decode", ours, floor, "json.loads(header)"])

    bin_frame = encode_frame(send_v2_request(SerializeType.ROCKETMQ))
    header_len = struct.unpack_from(">i", bin_frame, 4)[0] & 0xFFFFFF
    bin_header = bytes(bin_frame[8 : 8 + header_len])
    ours = per_op_us(lambda: decode_frame(bin_frame))
    floor = per_op_us(lambda: bare_rocketmq_header_decode(bin_header))
    rows.append(["ROCKETMQ-header frame decode", ours, floor, "bare struct decode of header"])

    cmd = decode_frame(bin_frame)
    ext = cmd.ext_fields
    ours = per_op_us(lambda: SendMessageRequestHeader.from_ext_v2(ext))
    floor = per_op_us(lambda: json.loads(json_header))
    rows.append(["SEND_MESSAGE_V2 header -> typed", ours, floor, "json.loads(header)"])

    response_header = SendMessageResponseHeader(
        msg_id="7F00000100002A9F0000000000000000", queue_id=3, queue_offset=42
    )

    ext_fixed = {**response_header.to_ext(), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    response = cmd.response(0, None, ext_fixed)
    ours = per_op_us(lambda: encode_frame(response))
    floor = per_op_us(lambda: bare_rocketmq_header_encode(0, 409, cmd.opaque, 1, ext_fixed))
    rows.append(["SEND_MESSAGE_V2 response encode (ROCKETMQ)", ours, floor, "bare struct pack of header"])
    return rows


def stored_message() -> MessageExt:
    return MessageExt(
        topic="BenchTopic",
        body=bytes(1024),
        queue_id=3,
        born_timestamp=1763780000123,
        born_host=b"\x7f\x00\x00\x01",
        born_port=50123,
        store_timestamp=1763780000125,
        store_host=b"\x7f\x00\x00\x01",
        store_port=10911,
        properties={
            "KEYS": "k1 k2",
            "UNIQ_KEY": "7F0000010B6C18B4AAC2461E62C40000",
            "CLUSTER": "DefaultCluster",
            "TAGS": "TagA",
        },
    )


# The same fixed run of a v1/IPv4 record (total size .. body length) as one struct: the floor's layout.
STORED_FIXED = struct.Struct(">iiiiiqqiq4siq4siiqi")
BYTE = struct.Struct(">b")


def bare_stored_decode(record: bytes) -> tuple:
    """Floor: fixed fields with one unpack, then body, topic and the properties pairs by slicing."""
    fixed = STORED_FIXED.unpack_from(record, 0)
    pos = STORED_FIXED.size
    body_len = fixed[-1]
    body = record[pos : pos + body_len]
    pos += body_len
    (topic_len,) = BYTE.unpack_from(record, pos)
    topic = record[pos + 1 : pos + 1 + topic_len].decode()
    pos += 1 + topic_len
    (props_len,) = SHORT.unpack_from(record, pos)
    props = record[pos + 2 : pos + 2 + props_len].decode()
    pairs = dict(p.split("\x01", 1) for p in props.split("\x02"))
    return fixed, body, topic, pairs


def bare_stored_build(msg: MessageExt) -> bytes:
    """Floor: pack the same fixed fields and join the variable parts (CRC of the body included)."""
    topic = msg.topic.encode()
    props = "\x02".join(f"{k}\x01{v}" for k, v in msg.properties.items()).encode()
    body = msg.body
    total = STORED_FIXED.size + len(body) + 1 + len(topic) + 2 + len(props)
    fixed = STORED_FIXED.pack(
        total, -626843481, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag, msg.queue_offset,
        msg.commit_log_offset, msg.sys_flag, msg.born_timestamp, msg.born_host, msg.born_port,
        msg.store_timestamp, msg.store_host, msg.store_port, msg.reconsume_times,
        msg.prepared_transaction_offset, len(body),
    )  # fmt: skip
    return b"".join((fixed, body, BYTE.pack(len(topic)), topic, SHORT.pack(len(props)), props))


def bare_stored_build_into(msg: MessageExt, buf: memoryview, pos: int) -> int:
    """Floor of the put path: the same record as ``bare_stored_build`` written at ``buf[pos:]`` as the
    CommitLog writer must (everything after TOTALSIZE in one slice, then TOTALSIZE)."""
    topic = msg.topic.encode()
    props = "\x02".join(f"{k}\x01{v}" for k, v in msg.properties.items()).encode()
    body = msg.body
    total = STORED_FIXED.size + len(body) + 1 + len(topic) + 2 + len(props)
    rest = STORED_REST.pack(
        -626843481, zlib.crc32(body) & 0x7FFFFFFF, msg.queue_id, msg.flag, msg.queue_offset,
        msg.commit_log_offset, msg.sys_flag, msg.born_timestamp, msg.born_host, msg.born_port,
        msg.store_timestamp, msg.store_host, msg.store_port, msg.reconsume_times,
        msg.prepared_transaction_offset, len(body),
    )  # fmt: skip
    buf[pos + 4 : pos + total] = b"".join(
        (rest, body, BYTE.pack(len(topic)), topic, SHORT.pack(len(props)), props)
    )
    INT.pack_into(buf, pos, total)
    return total


STORED_REST = struct.Struct(">" + STORED_FIXED.format[2:])  # the fixed run after TOTALSIZE


def rows_stored_message() -> list[list[object]]:
    msg = stored_message()
    record = bytes(encode_message(msg))
    assert bare_stored_build(msg) == record, "floor builds a different record"
    # the put path: straight into a memoryview of a mapped segment, as the store's CommitLog writes
    segment = mmap.mmap(-1, 1 << 20)
    view = memoryview(segment)
    assert (
        bare_stored_build_into(msg, view, 4096) == len(record) and view[4096 : 4096 + len(record)] == record
    )
    view[4096 : 4096 + len(record)] = bytes(len(record))
    assert encode_message_into(msg, view, 4096, len(view)) == len(record)
    assert view[4096 : 4096 + len(record)] == record, "encode_message_into wrote a different record"
    rows = [
        ["stored message parse (1 KiB)", per_op_us(lambda: decode_message(record)),
         per_op_us(lambda: bare_stored_decode(record)), "bare struct decode"],
        ["stored message build (1 KiB)", per_op_us(lambda: encode_message(msg)),
         per_op_us(lambda: bare_stored_build(msg)), "bare struct pack + join"],
        ["stored message into mapped segment (1 KiB)",
         per_op_us(lambda: encode_message_into(msg, view, 4096, len(view))),
         per_op_us(lambda: bare_stored_build_into(msg, view, 4096)), "bare pack + join + slice"],
    ]  # fmt: skip
    view.release()
    segment.close()
    return rows


def main() -> int:
    rows = rows_frames() + rows_stored_message()
    table = []
    failed = []
    for name, ours, floor, floor_name in rows:
        ratio = ours / floor if floor_name != "-" else None
        table.append(
            [
                name,
                f"{ours:.2f}",
                f"{floor:.2f}" if ratio else "-",
                f"{ratio:.2f}x" if ratio else "-",
                floor_name,
            ]
        )
        if ratio and ratio > TARGET_RATIO:
            failed.append(name)
    print_table(["operation", "codec µs", "floor µs", "ratio", "floor"], table)
    print(f"\ntarget: codec at most {TARGET_RATIO}x its floor; over target: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
