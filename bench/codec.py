"""Codec micro-benchmarks: microseconds per operation next to a floor measured in the same run.

Floors: ``json.loads`` of the same JSON header bytes; for binary layouts, a bare ``struct`` decode
of the same fields (one precompiled unpack of the fixed fields plus slicing the variable parts),
i.e. the least work any decoder of that layout must do. Run: ``.venv/bin/python bench/codec.py``.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import per_op_us, print_table

from rmqgate.wire import RemotingCommand, decode_frame, encode_frame
from rmqgate.wire.codes import RequestCode, SerializeType
from rmqgate.wire.headers import SendMessageRequestHeader, SendMessageResponseHeader

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

    def encode_response() -> bytes:
        ext = response_header.to_ext()
        ext["MSG_REGION"] = "DefaultRegion"
        ext["TRACE_ON"] = "true"
        return encode_frame(cmd.response(0, None, ext))

    ours = per_op_us(encode_response)
    probe = encode_response()
    resp_header = probe[8:]
    floor = (
        per_op_us(lambda: json.loads(resp_header)) if probe[4] == 0 else per_op_us(lambda: len(resp_header))
    )
    rows.append(["SEND_MESSAGE_V2 response encode (ROCKETMQ)", ours, floor, "-"])
    return rows


def main() -> int:
    rows = rows_frames()
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
