"""Store throughput next to a floor measured in the same run.

Floor: raw sequential ``os.write`` of the same record bytes (one write per record, as an append-only
log without a store would do) into a fresh file, then one ``fsync``; also reported with a single
bulk write. Measured: ``put_message`` of 1 KiB-body messages (with KEYS/UNIQ_KEY/TAGS, dispatched
to the ConsumeQueue inline and to the IndexFile by the store's dispatcher process, as RocketMQ's
reput thread does) under ASYNC_FLUSH (final flush included) and SYNC_FLUSH with 64 concurrent
asyncio writers each awaiting its group commit; then 32-message pulls (zero-copy views) over
everything stored. The ASYNC case also reports the time until the index covered every message.
The prepared messages (and everything else alive at that point) are moved out of the collector's way
with ``gc.freeze()`` before each timed case: otherwise every full collection during the run scans the
whole prepared input, a cost of holding 100,000 messages in memory that a broker never has.
SYNC_FLUSH is bounded by the device's fdatasync latency, so its rows stand next to two more floors:
the same writes with an fdatasync every 32 and every 64 records; for both, the bytes the device
wrote per byte appended are printed (Linux block-device counters, so other writers on that device
count too). Every case runs ``--repeat`` times (default 3) in fresh
directories; ratios are also given per round, whose cases share the machine's conditions. Run:
``.venv/bin/python bench/store.py [N] [--repeat R]``.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import busy_neighbour_speed

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


def device_written(path: Path) -> int | None:
    """Bytes the block device holding ``path`` has written so far (Linux ``/sys/dev/block``), or None."""
    st = os.stat(path)
    try:
        fields = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat").read_text().split()
    except OSError:
        return None
    return int(fields[6]) * 512  # sectors written, always 512-byte units


def amplification(before: int | None, after: int | None, appended: int) -> float:
    """Device bytes written per byte appended between two ``device_written`` readings (NaN if unknown)."""
    return math.nan if before is None or after is None else (after - before) / appended


def floor_group_commit(root: Path, records: list[bytes], group: int) -> tuple[float, float]:
    """What the device allows SYNC_FLUSH: write() per record, fdatasync after every ``group``
    records (one group commit), one thread; (bytes/s, device bytes written per byte appended, NaN
    when unknown)."""
    records = records[: max(group * 200, len(records) // 4)]
    path = root / "raw-sync.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    dev0 = device_written(root)
    t = time.perf_counter()
    for i, r in enumerate(records, 1):
        os.write(fd, r)
        if i % group == 0:
            os.fdatasync(fd)
    os.fdatasync(fd)
    dt = time.perf_counter() - t
    dev1 = device_written(root)
    os.close(fd)
    path.unlink()
    total = sum(len(r) for r in records)
    return total / dt, amplification(dev0, dev1, total)


def bench_async(
    root: Path, msgs: list[MessageExt], index: bool = True
) -> tuple[float, float, int, DefaultMessageStore]:
    """(put seconds, seconds until the index covered everything, bytes, store)."""
    cfg = config(root, "ASYNC_FLUSH")
    cfg.message_index_enable = index
    store = DefaultMessageStore.open(cfg)
    if store._index_process is not None:
        store._index_process.wait_indexed(30)  # the dispatcher process is up
    gc.collect()
    gc.freeze()
    t = time.perf_counter()
    put = store.put_message
    wrote = 0
    for m in msgs:
        wrote += put(m).wrote_bytes
    store.commitlog.queue.flush()
    dt = time.perf_counter() - t
    gc.unfreeze()
    if store._index_process is not None and not store._index_process.wait_indexed(60):
        raise SystemExit("the index dispatcher did not catch up within 60 s")
    return dt, time.perf_counter() - t, wrote, store


def bench_sync(root: Path, msgs: list[MessageExt]) -> tuple[float, int, int, float]:
    """(seconds, bytes, group commits, device bytes written per byte appended or NaN)."""
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

    gc.collect()
    gc.freeze()
    dev0 = device_written(root)
    t = time.perf_counter()
    asyncio.run(main())
    dt = time.perf_counter() - t
    dev1 = device_written(root)
    gc.unfreeze()
    fsyncs = store._flush_service.flush_count if store._flush_service else 0
    store.shutdown()
    return dt, wrote, fsyncs, amplification(dev0, dev1, wrote)


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


def one_round(base: Path, n: int) -> dict[str, float]:
    """One pass over every case in fresh directories; rates in bytes/s (``*_n``: appends/s)."""
    base.mkdir()
    sample = messages(n, "floor")
    for m in sample:
        m.store_host = b"\x7f\x00\x00\x01"
    records = [bytes(encode_message(m)) for m in sample]
    rec = len(records[0])
    out: dict[str, float] = {"record": rec}
    out["floor"], out["bulk"] = floor(base, records)
    out["gc32"], _ = floor_group_commit(base, records, 32)
    out["gc64"], out["gc64_dev"] = floor_group_commit(base, records, WRITERS)
    del sample, records
    dt, indexed, wrote, store = bench_async(base / "async", messages(n, "async"))
    out["async"], out["async_n"] = wrote / dt, n / dt
    out["indexed"] = wrote / indexed
    rdt, rn, rsize = bench_read(store)
    out["read"], out["read_n"], out["pulls"] = rsize / rdt, rn / rdt, rn // 32
    store.shutdown()
    dt, _, wrote, store = bench_async(base / "async-noindex", messages(n, "noidx"), index=False)
    store.shutdown()
    out["noidx"], out["noidx_n"] = wrote / dt, n / dt
    ns = max(WRITERS, n // 2)
    dt, wrote, fsyncs, out["sync_dev"] = bench_sync(base / "sync", messages(ns, "sync"))
    out["sync"], out["sync_n"], out["per_fsync"] = wrote / dt, ns / dt, ns / max(fsyncs, 1)
    shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    args = sys.argv[1:]
    repeat = 3
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    n = int(args[0]) if args else 100_000
    base = Path(tempfile.mkdtemp(prefix="rmqgate-bench-store-", dir=os.environ.get("BENCH_DIR")))
    rounds: list[dict[str, float]] = []
    try:
        for r in range(repeat):
            rounds.append(one_round(base / f"round{r}", n))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rec = int(rounds[0]["record"])
    print(f"store bench: {n} messages, body {BODY} B, record {rec} B, {QUEUES} queues, {repeat} rounds")
    print("each row: best round (range over rounds); 'vs floor' = best case / best raw-write floor")
    print(f"{'case':<44}{'appends/s':>12}{'MB/s':>10}{'vs floor':>10}  range MB/s")
    best_floor = max(r["floor"] for r in rounds)

    def row(label: str, key: str, ratio: bool = True) -> None:
        vals = [r[key] for r in rounds]
        best = max(vals)
        frac = f"{best / best_floor:>10.2f}" if ratio else f"{'':>10}"
        print(
            f"{label:<44}{best / rec:>12,.0f}{best / 1e6:>10.1f}{frac}  {min(vals) / 1e6:.1f}-{best / 1e6:.1f}"
        )

    row("floor: raw write() per record + fsync", "floor")
    row("floor: one bulk write + fsync", "bulk")
    row("ASYNC_FLUSH put_message (1 writer)", "async")
    row("  until the index covered every message", "indexed")
    row("  [index off] messageIndexEnable=false", "noidx")
    row("floor: fdatasync every 32 records", "gc32")
    row(f"floor: fdatasync every {WRITERS} records", "gc64")
    row(f"SYNC_FLUSH put_message ({WRITERS} writers)", "sync")
    per_fsync = " ".join(f"{r['per_fsync']:.1f}" for r in rounds)
    print(f"  SYNC appends per group commit, per round: {per_fsync}")
    if not any(math.isnan(r["sync_dev"]) or math.isnan(r["gc64_dev"]) for r in rounds):
        print(
            "  device bytes written per byte appended, per round: SYNC_FLUSH "
            + " ".join(f"{r['sync_dev']:.2f}" for r in rounds)
            + f"; fdatasync-every-{WRITERS} floor "
            + " ".join(f"{r['gc64_dev']:.2f}" for r in rounds)
        )
    reads = max(rounds, key=lambda r: r["read"])
    print(
        f"{'pull 32 msgs/get_messages (zero-copy)':<44}{reads['read_n']:>12,.0f}{reads['read'] / 1e6:>10.1f}"
        f"  msgs/s, {int(reads['pulls'])} pulls"
    )
    print()
    a_ratio = [r["async"] / r["floor"] for r in rounds]
    s_ratio = [r["sync"] / r["async"] for r in rounds]
    g_ratio = [r["sync"] / r["gc64"] for r in rounds]
    print(
        "ASYNC / raw-write floor, same round: "
        + " ".join(f"{x:.2f}" for x in a_ratio)
        + f" (best {max(a_ratio):.2f}; target >= 0.50)"
    )
    print(
        f"SYNC({WRITERS}) / ASYNC, same round: "
        + " ".join(f"{x:.2f}" for x in s_ratio)
        + f" (best {max(s_ratio):.2f}; target >= 0.50, i.e. within 2x)"
    )
    print(
        f"SYNC({WRITERS}) / fdatasync-every-{WRITERS} floor, same round: "
        + " ".join(f"{x:.2f}" for x in g_ratio)
        + " (the device's group-commit ceiling for this many writers)"
    )
    speed = busy_neighbour_speed()
    if speed is not None:
        print(
            f"this machine: a CPU-bound loop runs at {speed:.2f}x its own speed while a second CPU is busy "
            "(1.00 = independent cores); the ASYNC rows share the machine with the index dispatcher and "
            "the warmer, the floors with nothing"
        )


if __name__ == "__main__":
    main()
