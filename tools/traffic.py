"""Traffic sources for the capture tools: one iterator of ``CaptureRecord``s over a pcap or rmqcap.

pcap frames come from ``rmqgate.tools.pcap.read_frames``; their connections get integer ids, a
peer role (name server or broker, from the port and the request codes) and CONN_OPEN/CONN_CLOSE
records, so everything downstream (stats, replay, conversion) reads one record stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rmqgate.tools.capture import (
    CaptureRecord,
    CaptureWriter,
    Direction,
    Kind,
    Role,
    is_capture,
    read_capture,
)
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RESPONSE_FLAG

NAMESRV_PORT = 9876

#: Request codes only a name server serves (a connection sending one talks to a name server).
NAMESRV_CODES = frozenset(
    int(c)
    for c in (
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.GET_NAMESRV_CONFIG,
        RequestCode.QUERY_DATA_VERSION,
    )
)

PCAP_MAGICS = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
)


def is_pcap(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fp:
        return fp.read(4) in PCAP_MAGICS


def _port(addr: str) -> int:
    try:
        return int(addr.rpartition(":")[2])
    except ValueError:
        return 0


def iter_pcap_records(path: str | os.PathLike[str]) -> Iterator[CaptureRecord]:
    """The frames of a pcap as capture records (with CONN_OPEN before each connection's first)."""
    from rmqgate.tools.pcap import read_frames  # the pcap engineer's reader

    ids: dict[str, int] = {}
    roles: dict[str, int] = {}
    last_ts: dict[str, float] = {}
    for fr in read_frames(path):
        key = fr.conn_id
        direction = Direction.C2S if fr.direction == "c2s" else Direction.S2C
        client, server = (fr.src, fr.dst) if direction == Direction.C2S else (fr.dst, fr.src)
        conn = ids.get(key)
        if conn is None:
            conn = ids[key] = len(ids) + 1
            cmd = fr.command
            if _port(server) == NAMESRV_PORT:
                role = Role.NAMESRV
            elif cmd is not None and not (cmd.flag & RESPONSE_FLAG) and direction == Direction.C2S:
                role = Role.NAMESRV if cmd.code in NAMESRV_CODES else Role.BROKER
            else:
                role = Role.BROKER
            roles[key] = role
            yield CaptureRecord(
                Kind.CONN_OPEN, fr.ts, conn, Direction.C2S, role, b"", {"client": client, "server": server}
            )
        last_ts[key] = fr.ts
        yield CaptureRecord(Kind.FRAME, fr.ts, conn, direction, roles[key], fr.raw)
    for key, conn in ids.items():
        yield CaptureRecord(Kind.CONN_CLOSE, last_ts[key], conn, Direction.C2S, roles[key], b"")


def iter_records(path: str | os.PathLike[str]) -> Iterator[CaptureRecord]:
    """Records of a capture file or a pcap/pcapng, whichever ``path`` is."""
    if is_capture(path):
        yield from read_capture(path)
    elif is_pcap(path):
        yield from iter_pcap_records(path)
    else:
        raise ValueError(f"{path}: neither an rmqgate capture nor a pcap file")


def convert_pcap(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> int:
    """Write the RocketMQ frames of pcap ``src`` as capture ``dst``; returns the frame count."""
    frames = 0
    writer: CaptureWriter | None = None
    try:
        for rec in iter_pcap_records(src):
            if writer is None:
                writer = CaptureWriter(dst, source=f"pcap:{Path(src).name}", start_time=rec.ts)
            if rec.kind == Kind.FRAME:
                writer.frame(rec.ts, rec.conn_id, rec.direction, rec.role, rec.data)
                frames += 1
            elif rec.kind == Kind.CONN_OPEN:
                writer.conn_open(rec.ts, rec.conn_id, rec.role, **rec.meta)
            else:
                writer.conn_close(rec.ts, rec.conn_id, rec.role, **rec.meta)
        if writer is None:
            writer = CaptureWriter(dst, source=f"pcap:{Path(src).name}", start_time=0.0)
    finally:
        if writer is not None:
            writer.close()
    return frames
