"""The index dispatcher alone: its process CPU per message, catching up and at a producer's pace.

A CommitLog is filled with N messages shaped like the stock benchmark Producer's (topic, a UNIQ_KEY
as MessageClientIDSetter makes it: a fixed prefix, a millisecond clock and a counter, no KEYS, 1 KiB
body) through ``DefaultMessageStore.put_message`` with no index. Then ``run_dispatcher`` runs in a
child process on that store with an empty index, and the child reports its own ``getrusage`` around
the run: CPU per message and how often it slept (voluntary context switches). "catch-up" publishes
the whole CommitLog at once (batches of 4096); "paced" advances the committed offset at ``--rate``
messages per second from this process, so batches are as small as under a live producer (the
dispatcher polls every 10 ms when caught up). CPU time is robust to other load, the paced figures less so (each
wake-up's cost depends on what else ran on the core). Run:
``.venv/bin/python bench/index_dispatch.py [N] [--rate R] [--repeat K]``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from rmqgate.store.api import StoreConfig
from rmqgate.store.index_dispatch import PROGRESS_FILE, DispatcherArgs, DispatchProgress, run_dispatcher
from rmqgate.store.mapped_file import offset_to_file_name
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import BLANK_MAGIC, RECORD_PREFIX, MessageExt

BODY = 1024
SEGMENT = 1024 * 1024 * 1024
CLIENT_ID_PREFIX = "0A0A0A0A1F2B6D3C2A11"  # IP, pid, class loader hash, as MessageClientIDSetter
SENDS_PER_MS = 28  # the 16-thread Producer's pace: the clock part changes every ~28 messages


def fill(root: Path, n: int) -> None:
    store = DefaultMessageStore.open(
        StoreConfig(str(root), message_index_enable=False, mapped_file_size_commitlog=SEGMENT)
    )
    body = os.urandom(BODY)
    clock = 0x0AB1C000
    try:
        for i in range(n):
            uniq = f"{CLIENT_ID_PREFIX}{clock + i // SENDS_PER_MS:08X}{i & 0xFFFF:04X}"
            store.put_message(
                MessageExt(
                    "BenchmarkTest",
                    body=body,
                    queue_id=i % 8,
                    born_timestamp=1_763_780_000_000 + i,
                    born_host=b"\x7f\x00\x00\x01",
                    born_port=50000,
                    properties={"UNIQ_KEY": uniq, "WAIT": "true"},
                )
            )
    finally:
        store.shutdown()


def record_ends(root: Path) -> list[int]:
    """The CommitLog offset after each record of the first segment."""
    with (root / "commitlog" / offset_to_file_name(0)).open("rb") as f:
        data = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    ends = []
    pos = 0
    while pos + RECORD_PREFIX.size <= len(data):
        total, magic = RECORD_PREFIX.unpack_from(data, pos)
        if total <= 0 or magic == BLANK_MAGIC:
            break
        pos += total
        ends.append(pos)
    data.close()
    return ends


def child(args_json: str) -> None:
    args = DispatcherArgs(**json.loads(args_json))
    before = resource.getrusage(resource.RUSAGE_SELF)
    run_dispatcher(args)
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    print(json.dumps({"user": user, "sys": system, "sleeps": after.ru_nvcsw - before.ru_nvcsw}))


def dispatch(root: Path, ends: list[int], rate: float) -> dict[str, float]:
    """Index the whole CommitLog once in a dispatcher child; its CPU seconds and sleeps."""
    shutil.rmtree(root / "index", ignore_errors=True)
    (root / PROGRESS_FILE).unlink(missing_ok=True)
    # the dispatcher runs while the store's lock is held (else it quits): held here instead
    lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(lock_fd, fcntl.LOCK_EX)
    progress = DispatchProgress(root / PROGRESS_FILE)
    generation = time.time_ns()
    progress.set("generation", generation)
    progress.set("min_phy_offset", 0)
    progress.set("stop", 0)
    progress.set("indexed_offset", -1)
    progress.set("committed_offset", ends[-1] if rate <= 0 else 0)
    cfg = StoreConfig(str(root))
    args = DispatcherArgs(
        root=str(root),
        commitlog_dir=str(root / "commitlog"),
        hash_slot_num=cfg.max_hash_slot_num,
        index_num=cfg.max_index_num,
        commitlog_file_size=SEGMENT,
        trusted=True,
        checkpoint_index_ts=0,
        generation=generation,
        parent_pid=os.getpid(),
        flush_interval_ms=cfg.flush_consume_queue_thorough_interval,
    )
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(asdict(args))], stdout=subprocess.PIPE
    )
    try:
        if rate > 0:
            started = time.perf_counter()
            published = 0
            while published < len(ends):
                time.sleep(0.0005)
                due = min(len(ends), int((time.perf_counter() - started) * rate))
                if due > published:
                    published = due
                    progress.set("committed_offset", ends[published - 1])
        progress.set("stop", 1)  # index everything committed, flush, exit
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        progress.close()
        os.close(lock_fd)
    if proc.returncode != 0:
        raise SystemExit(f"the dispatcher exited with {proc.returncode}")
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=200_000, help="messages (default 200000)")
    parser.add_argument("--rate", type=float, default=28_000, help="paced case: messages/s (default 28000)")
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="index-dispatch-") as tmp:
        root = Path(tmp)
        fill(root, ns.n)
        ends = record_ends(root)
        n = len(ends)
        print(f"{n} messages, 1 KiB bodies, UNIQ_KEY only; dispatcher process CPU per message")
        for name, rate in (("catch-up", 0.0), (f"paced {ns.rate:.0f}/s", ns.rate)):
            runs = [dispatch(root, ends, rate) for _ in range(ns.repeat)]
            for r in runs:
                print(
                    f"  {name:14s} user {r['user'] / n * 1e6:5.2f} sys {r['sys'] / n * 1e6:5.2f} us/msg, "
                    f"{n / max(1, r['sleeps']):7.1f} messages per wake-up"
                )
            user = statistics.median(r["user"] for r in runs) / n * 1e6
            system = statistics.median(r["sys"] for r in runs) / n * 1e6
            print(f"{name} median: user {user:.2f} sys {system:.2f} us/msg (of {ns.repeat})")


if __name__ == "__main__":
    main()
