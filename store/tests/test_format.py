"""rmqgate's store files read by an independent parser written from PROTOCOL.md §4 with plain struct
(deliberately not using rmqgate's layouts or codec)."""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

from rmqgate.store.api import StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BLANK = -875286124


def parse_commitlog(directory: Path, file_size: int) -> list[dict]:
    """§4.1: walk every segment, follow END-of-file BLANK records into the next file."""
    out = []
    files = sorted(directory.iterdir())
    for i, path in enumerate(files):
        assert path.name == f"{int(path.name):020d}"
        data = path.read_bytes()
        assert len(data) == file_size
        base = int(path.name)
        assert base == i * file_size
        pos = 0
        while pos + 8 <= len(data):
            total, magic = struct.unpack_from(">ii", data, pos)
            if total == 0:
                break
            if magic == BLANK:
                assert total == len(data) - pos and total >= 8
                break
            assert magic in (MAGIC_V1, MAGIC_V2)
            crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(">iiiqqiq", data, pos + 8)
            p = pos + 48
            born_host, born_port = data[p : p + 4], struct.unpack_from(">i", data, p + 4)[0]
            p += 8
            (store_ts,) = struct.unpack_from(">q", data, p)
            p += 8
            store_host, store_port = data[p : p + 4], struct.unpack_from(">i", data, p + 4)[0]
            p += 8
            reconsume, prep, body_len = struct.unpack_from(">iqi", data, p)
            p += 16
            body = data[p : p + body_len]
            p += body_len
            width = 1 if magic == MAGIC_V1 else 2  # v2: 2-byte topic length
            topic_len = int.from_bytes(data[p : p + width], "big")
            topic = data[p + width : p + width + topic_len].decode()
            p += width + topic_len
            (props_len,) = struct.unpack_from(">h", data, p)
            props = data[p + 2 : p + 2 + props_len].decode()
            p += 2 + props_len
            assert p - pos == total
            assert crc == zlib.crc32(body) & 0x7FFFFFFF
            assert phys == base + pos
            pairs = dict(kv.split("\x01") for kv in props.split("\x02") if kv)
            out.append(
                dict(
                    phys=phys,
                    size=total,
                    topic=topic,
                    qid=qid,
                    qoff=qoff,
                    body=body,
                    props=pairs,
                    store_ts=store_ts,
                    store_host=store_host,
                    store_port=store_port,
                    born_host=born_host,
                    born_port=born_port,
                    flag=flag,
                    sysflag=sysflag,
                    born_ts=born_ts,
                    reconsume=reconsume,
                    prep=prep,
                )
            )
            pos += total
    return out


def java_hash(s: str) -> int:
    h = 0
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    for u in units:
        h = (h * 31 + u) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def parse_cq(path: Path) -> list[tuple[int, int, int]]:
    units = []
    for f in sorted(path.iterdir()):
        data = f.read_bytes()
        for pos in range(0, len(data), 20):
            off, size, tags = struct.unpack_from(">qiq", data, pos)
            if size == 0 and off == 0:
                break
            units.append((off, size, tags))
    return units


def index_header(path: Path) -> tuple[int, ...]:
    return struct.unpack_from(">qqqqii", path.read_bytes(), 0)


def index_lookup(path: Path, slots: int, key: str) -> list[int]:
    data = path.read_bytes()
    index_count = index_header(path)[5]
    h = abs(java_hash(key))
    (idx,) = struct.unpack_from(">i", data, 40 + (h % slots) * 4)
    found = []
    while 0 < idx < index_count:
        kh, phy, _diff, prev = struct.unpack_from(">iqii", data, 40 + slots * 4 + idx * 20)
        if kh == h:
            found.append(phy)
        idx = prev
    return found


def test_independent_parser_reads_rmqgate_files(tmp_path: Path) -> None:
    cfg = StoreConfig(
        str(tmp_path),
        mapped_file_size_commitlog=32 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=64,
        max_index_num=2000,
        store_host="10.1.2.3",
        store_port=10911,
    )
    store = DefaultMessageStore.open(cfg)
    sent = []
    t0 = int(time.time() * 1000)
    for i in range(400):
        props = {"TAGS": f"tag{i % 3}", "KEYS": f"order-{i} shared", "UNIQ_KEY": f"UNIQ{i:06d}"}
        m = MessageExt(
            "FmtTopic",
            body=bytes([i % 251]) * (50 + i % 200),
            queue_id=i % 4,
            flag=i,
            born_timestamp=t0 + i,
            born_host=b"\x7f\x00\x00\x01",
            born_port=5555,
            properties=props,
        )
        res = store.put_message(m)
        sent.append((res, props, bytes(m.body)))
    long_res = store.put_message(MessageExt("V" * 250, body=b"long topic", properties={"TAGS": "x"}))
    store.shutdown()

    records = parse_commitlog(tmp_path / "commitlog", 32 * 1024)
    assert len(records) == 401
    long_rec = records.pop()
    assert long_rec["topic"] == "V" * 250 and long_rec["body"] == b"long topic"
    assert long_rec["phys"] == long_res.physical_offset
    assert len(list((tmp_path / "commitlog").iterdir())) > 3  # several segments, BLANK records in between
    for (res, props, body), rec in zip(sent, records, strict=True):
        assert rec["phys"] == res.physical_offset and rec["qoff"] == res.queue_offset
        assert rec["body"] == body and rec["props"] == props and rec["topic"] == "FmtTopic"
        assert rec["store_host"] == bytes([10, 1, 2, 3]) and rec["store_port"] == 10911
        assert rec["store_ts"] == res.store_timestamp
        assert res.msg_id == (bytes([10, 1, 2, 3]) + struct.pack(">iq", 10911, rec["phys"])).hex().upper()

    per_queue: dict[int, list[dict]] = {}
    for rec in records:
        per_queue.setdefault(rec["qid"], []).append(rec)
    for qid, recs in per_queue.items():
        units = parse_cq(tmp_path / "consumequeue" / "FmtTopic" / str(qid))
        assert [(r["phys"], r["size"], java_hash(r["props"]["TAGS"])) for r in recs] == units
        assert [r["qoff"] for r in recs] == list(range(len(recs)))

    (index_file,) = sorted((tmp_path / "index").iterdir())
    assert len(index_file.name) == 17 and index_file.name.isdigit()
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = index_header(index_file)
    assert (begin_phy, end_phy) == (records[0]["phys"], records[-1]["phys"])
    assert (begin_ts, end_ts) == (records[0]["store_ts"], records[-1]["store_ts"])
    assert slot_count == 3 * 400 and index_count == 3 * 400 + 1  # index numbers start at 1
    assert index_lookup(index_file, 64, "FmtTopic#order-123") == [records[123]["phys"]]
    assert index_lookup(index_file, 64, "FmtTopic#UNIQ000007") == [records[7]["phys"]]
    assert sorted(index_lookup(index_file, 64, "FmtTopic#shared")) == sorted(r["phys"] for r in records)

    physic, logics, index_ts = struct.unpack_from(">qqq", (tmp_path / "checkpoint").read_bytes(), 0)
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    assert physic == logics == index_ts == long_rec["store_ts"]
    assert not (tmp_path / "abort").exists()
