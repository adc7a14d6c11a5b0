"""Store throughput next to a floor measured in the same run.

Floor: raw sequential ``os.write`` of the same record bytes (one write per record, as an append-only
log without a store would do) into a fresh file, then one ``fsync``; also reported with a single
bulk write. Measured: ``put_message`` of 1 KiB-body messages (with KEYS/UNIQ_KEY/TAGS, dispatched
to ConsumeQueue and index) under ASYNC_FLUSH (final flush included) and SYNC_FLUSH with 64
concurrent asyncio writers each awaiting its group commit; then 32-message pulls (zero-copy views)
over everything stored. Run: ``.venv/bin/python bench/store.py [N]``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rmqgate.store.api import GetMessageStatus, StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt, encode_message

BODY = 1024
QUEUES = 8
WRITERS = 64


def messages(n: int, tag: str) -> list[MessageExt]:
    body = os.urandom(BODY)
    return [
        MessageExt(
            "BenchTopic",
            body=body,
            queue_id=i % QUEUES,
            born_timestamp=1_763_780_000_000 + i,
            born_host=b"\x7f\x00\x00\x01",
            born_port=50000,
            properties={"TAGS": "TagA", "KEYS": f"{tag}-key-{i}", "UNIQ_KEY": f"7F00000100012A9F{i:016X}"},
        )
        for i in range(n)
    ]


def config(root: Path, flush: str) -> StoreConfig:
    return StoreConfig(str(root), flush_disk_type=flush, mapped_file_size_commitlog=256 * 1024 * 1024)


def floor(root: Path, records: list[bytes]) -> tuple[float, float]:
    total = sum(len(r) for r in records)
    path = root / "raw.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    for r in records:
        os.write(fd, r)
    os.fsync(fd)
    per_record = time.perf_counter() - t
    os.close(fd)
    path.unlink()
    blob = b"".join(records)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    os.write(fd, blob)
    os.fsync(fd)
    bulk = time.perf_counter() - t
    os.close(fd)
    path.unlink()
    return total / per_record, total / bulk


def bench_async(
    root: Path, msgs: list[MessageExt], index: bool = True
) -> tuple[float, int, DefaultMessageStore]:
    cfg = config(root, "ASYNC_FLUSH")
    cfg.message_index_enable = index
    store = DefaultMessageStore.open(cfg)
    t = time.perf_counter()
    put = store.put_message
    wrote = 0
    for m in msgs:
        wrote += put(m).wrote_bytes
    store.commitlog.queue.flush()
    return time.perf_counter() - t, wrote, store


def bench_sync(root: Path, msgs: list[MessageExt]) -> tuple[float, int, int]:
    store = DefaultMessageStore.open(config(root, "SYNC_FLUSH"))
    per_writer = [msgs[i::WRITERS] for i in range(WRITERS)]
    wrote = 0

    async def writer(batch: list[MessageExt]) -> None:
        nonlocal wrote
        for m in batch:
            r = store.put_message(m)
            await asyncio.wrap_future(r.durable)
            wrote += r.wrote_bytes

    async def main() -> None:
        await asyncio.gather(*(writer(b) for b in per_writer))

    t = time.perf_counter()
    asyncio.run(main())
    dt = time.perf_counter() - t
    fsyncs = store._flush_service.flush_count if store._flush_service else 0
    store.shutdown()
    return dt, wrote, fsyncs


def bench_read(store: DefaultMessageStore) -> tuple[float, int, int]:
    t = time.perf_counter()
    n = size = 0
    for q in range(QUEUES):
        off = 0
        while True:
            res = store.get_messages("BenchTopic", q, off, 32)
            if res.status is not GetMessageStatus.FOUND:
                break
            n += res.message_count
            size += res.buffer_total_size
            off = res.next_begin_offset
    return time.perf_counter() - t, n, size


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    base = Path(tempfile.mkdtemp(prefix="rmqgate-bench-store-", dir=os.environ.get("BENCH_DIR")))
    try:
        sample = messages(n, "floor")
        for m in sample:
            m.store_host = b"\x7f\x00\x00\x01"
        records = [bytes(encode_message(m)) for m in sample]
        raw_bps, bulk_bps = floor(base, records)
        rec = len(records[0])
        print(f"store bench: {n} messages, body {BODY} B, record {rec} B, {QUEUES} queues, dir {base}")
        print(f"{'case':<44}{'appends/s':>12}{'MB/s':>10}{'vs floor':>10}")
        print(
            f"{'floor: raw write() per record + fsync':<44}{raw_bps / rec:>12,.0f}{raw_bps / 1e6:>10.1f}{'1.00':>10}"
        )
        print(
            f"{'floor: one bulk write + fsync':<44}{bulk_bps / rec:>12,.0f}{bulk_bps / 1e6:>10.1f}{bulk_bps / raw_bps:>10.2f}"
        )

        dt, wrote, store = bench_async(base / "async", messages(n, "async"))
        a_bps = wrote / dt
        print(
            f"{'ASYNC_FLUSH put_message (1 writer)':<44}{n / dt:>12,.0f}{a_bps / 1e6:>10.1f}{a_bps / raw_bps:>10.2f}"
        )
        rdt, rn, rsize = bench_read(store)
        store.shutdown()
        dt, wrote, store = bench_async(base / "async-noindex", messages(n, "noidx"), index=False)
        store.shutdown()
        x_bps = wrote / dt
        print(
            f"{'  same, messageIndexEnable=false':<44}{n / dt:>12,.0f}{x_bps / 1e6:>10.1f}{x_bps / raw_bps:>10.2f}"
        )

        ns = max(WRITERS, n // 2)
        dt, wrote, fsyncs = bench_sync(base / "sync", messages(ns, "sync"))
        s_bps = wrote / dt
        print(
            f"{f'SYNC_FLUSH put_message ({WRITERS} writers)':<44}{ns / dt:>12,.0f}{s_bps / 1e6:>10.1f}"
            f"{s_bps / raw_bps:>10.2f}"
        )
        print(f"  SYNC: {fsyncs} group commits for {ns} appends ({ns / max(fsyncs, 1):.1f} per fsync)")
        print(
            f"{'pull 32 msgs/get_messages (zero-copy)':<44}{rn / rdt:>12,.0f}{rsize / rdt / 1e6:>10.1f}  msgs/s, {rn // 32} pulls"
        )
        print()
        print(
            f"ASYNC / raw-write floor: {a_bps / raw_bps:.2f} (target >= 0.50); / bulk floor: {a_bps / bulk_bps:.2f}"
        )
        print(f"SYNC(64) / ASYNC: {s_bps / a_bps:.2f} (target >= 0.50, i.e. within 2x)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
