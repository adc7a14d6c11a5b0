"""IndexFile dispatch in a process of its own: RocketMQ's ReputMessageService for the index, on another core.

The store process appends to the CommitLog and publishes in ``index.dispatch`` (one page both
processes map) how far the CommitLog holds complete records. The dispatcher process follows the
CommitLog from where its newest index file ends, writes the IndexFile entries of each record, and
publishes how far it has indexed and flushed. Queries wait until the index covers what was committed
when they arrived. One process writes the index at a time: the writer holds a flock on
``index.dispatch``; a dispatcher quits when its store closes, its parent dies or a newer store opens.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rmqgate.store.index_file import IndexService
from rmqgate.store.layout import INDEX_DISPATCH_FIELDS, INDEX_DISPATCH_PROGRESS
from rmqgate.store.mapped_file import offset_to_file_name
from rmqgate.wire.message import java_string_hash, scan_index_records

PROGRESS_FILE = "index.dispatch"
_PROGRESS_SIZE = max(4096, INDEX_DISPATCH_PROGRESS.size)
_log = logging.getLogger(__name__)
_CAUGHT_UP_SLEEP = 0.01  # seconds


class DispatchProgress:
    """The shared ``index.dispatch`` page: named int64 fields (``IndexDispatchProgress``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size < _PROGRESS_SIZE:
            os.ftruncate(self.fd, _PROGRESS_SIZE)
        self.mm = mmap.mmap(self.fd, _PROGRESS_SIZE)

    def slot(self, name: str) -> tuple[object, int]:
        """``(pack_into, position)`` of a field, for a hot path: ``pack_into(progress.mm, position, v)``."""
        pos, st = INDEX_DISPATCH_FIELDS[name]
        return st.pack_into, pos

    def get(self, name: str) -> int:
        pos, st = INDEX_DISPATCH_FIELDS[name]
        return st.unpack_from(self.mm, pos)[0]

    def set(self, name: str, value: int) -> None:
        pos, st = INDEX_DISPATCH_FIELDS[name]
        st.pack_into(self.mm, pos, value)

    def lock(self, give_up: float) -> bool:
        """Take the index writer's flock, retrying until ``give_up`` (monotonic) passes."""
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    return False
                time.sleep(0.005)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)  # also releases the flock


@dataclass
class DispatcherArgs:
    root: str
    commitlog_dir: str
    hash_slot_num: int
    index_num: int
    commitlog_file_size: int
    trusted: bool  # the index files survived with the page cache (clean stop, or a crash in this boot)
    checkpoint_index_ts: int
    generation: int
    parent_pid: int
    flush_interval_ms: int


class IndexDispatchProcess:
    """The store's handle on its dispatcher process: start, restart when it died, wait, flush, stop."""

    def __init__(self, args: DispatcherArgs) -> None:
        self.args = args
        self.progress = DispatchProgress(Path(args.root) / PROGRESS_FILE)
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._spawned_at = 0.0
        self._restart_lock = threading.Lock()  # the service thread and a querying thread both check

    def start(self, committed: int, min_phy: int) -> None:
        p = self.progress
        p.set("generation", self.args.generation)
        p.set("committed_offset", committed)
        p.set("min_phy_offset", min_phy)
        p.set("stop", 0)
        p.set("indexed_offset", -1)  # unknown until the dispatcher has loaded its files
        self._spawn()

    def _spawn(self) -> None:
        self._spawned_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rmqgate.store.index_dispatch", json.dumps(asdict(self.args))],
            stdin=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,  # a terminal's Ctrl-C goes to the store, which stops us in order
        )

    def ensure_running(self) -> None:
        """Restart a dispatcher that died (its index files are intact in the page cache), at most
        once a second so that one that cannot start does not spin."""
        with self._restart_lock:
            proc = self.proc
            if (
                proc is not None
                and proc.poll() not in (None, 0)  # 0: it quit on purpose (store closed or reopened)
                and not self.progress.get("stop")
                and time.monotonic() - self._spawned_at >= 1.0
            ):
                _log.warning("index dispatcher exited with %s; restarting it", proc.returncode)
                self.args.trusted = True
                self.restarts += 1
                self._spawn()

    def behind(self) -> int:
        indexed = self.progress.get("indexed_offset")
        committed = self.progress.get("committed_offset")
        return committed - indexed if indexed >= 0 else committed

    def wait_indexed(self, timeout: float) -> bool:
        """Block until everything committed now is indexed (False if ``timeout`` seconds pass first)."""
        p = self.progress
        target = p.get("committed_offset")
        deadline = time.monotonic() + timeout
        checked = 0.0
        while p.get("indexed_offset") < target:
            now = time.monotonic()
            if now >= deadline:
                return False
            if now - checked > 0.1:
                self.ensure_running()
                checked = now
            time.sleep(0.0005)
        return True

    def request_flush(self) -> int:
        """Ask for an index flush; returns the store time the index is known flushed up to so far."""
        p = self.progress
        p.set("flush_request", p.get("flush_request") + 1)
        return p.get("flushed_timestamp")

    def stop(self, timeout: float = 60.0) -> int | None:
        """Let the dispatcher index everything committed, flush and exit; returns the flushed store
        time, or None when it did not finish in time (the next start resumes from its files)."""
        with self._restart_lock:  # no restart can slip in after this
            self.progress.set("stop", 1)
            proc = self.proc
        ok = True
        if proc is not None:
            try:
                ok = proc.wait(timeout) == 0
            except subprocess.TimeoutExpired:
                _log.error("index dispatcher did not stop within %.0f s; killing it", timeout)
                proc.kill()
                proc.wait()
                ok = False
        ts = self.progress.get("flushed_timestamp") if ok else None
        self.progress.close()
        return ts


# ---------------------------------------------------------------------------------------- the process


class _CommitLogFollower:
    """Read-only mappings of CommitLog segments, opened as the dispatcher reaches them."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.dir = directory
        self.file_size = file_size
        self._start = -1
        self.mm: mmap.mmap | None = None

    def segment(self, pos: int) -> int:
        """Map the segment holding ``pos``; returns its start, or -1 when no such file exists."""
        start = pos - pos % self.file_size
        if start != self._start:
            self.close()
            try:
                fd = os.open(self.dir / offset_to_file_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return -1
            try:
                self.mm = mmap.mmap(fd, self.file_size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            self._start = start
        return start

    def next_segment(self, pos: int) -> int | None:
        """The first existing segment at or after ``pos`` (expired ones are gone)."""
        starts = sorted(int(p.name) for p in self.dir.iterdir() if p.name.isdigit())
        return next((s for s in starts if s >= pos - pos % self.file_size), None)

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        self._start = -1


def _store_closed(root: Path) -> bool:
    """The store process holds a POSIX lock on ``root/lock`` while the store is open."""
    try:
        fd = os.open(root / "lock", os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # releases our lock again, if we got it
    return True


def run_dispatcher(args: DispatcherArgs) -> int:
    root = Path(args.root)
    progress = DispatchProgress(root / PROGRESS_FILE)

    def superseded() -> bool:
        return progress.get("generation") != args.generation or os.getppid() != args.parent_pid

    # a dispatcher of a store that died a moment ago may still be flushing: wait for its lock
    while not progress.lock(time.monotonic() + 1):
        if superseded():
            return 0
    index = IndexService(root / "index", args.hash_slot_num, args.index_num, java_string_hash)
    rebuild_from = index.load(args.trusted, args.checkpoint_index_ts)
    min_phy = progress.get("min_phy_offset")
    if rebuild_from is not None:
        pos = rebuild_from
    elif index.files:
        pos = index.files[-1].end_phy_offset  # indexed again: it may have only part of its keys
    else:
        pos = min_phy
    pos = min(max(pos, min_phy), progress.get("committed_offset"))
    log = _CommitLogFollower(Path(args.commitlog_dir), args.commitlog_file_size)
    pack_indexed, indexed_pos = progress.slot("indexed_offset")
    progress.set("indexed_offset", pos)
    flush_every = args.flush_interval_ms / 1000
    last_flush = time.monotonic()
    flushed_req = progress.get("flushed_request")
    last_ts = flushed_ts = 0
    checked = 0.0

    def flush() -> None:
        nonlocal flushed_ts, last_flush
        index.flush()
        flushed_ts = last_ts
        if flushed_ts:
            progress.set("flushed_timestamp", flushed_ts)
        last_flush = time.monotonic()

    try:
        while True:
            committed = progress.get("committed_offset")
            if pos < committed:
                start = log.segment(pos)
                if start < 0:
                    nxt = log.next_segment(pos)
                    pos = committed if nxt is None else max(nxt, pos)
                    continue
                buf = log.mm
                assert buf is not None
                end = min(committed - start, args.commitlog_file_size)
                scan = scan_index_records(buf, pos - start, end, 4096)
                if scan.records:
                    index.build_index_records(scan.records, start)
                if scan.last_store_timestamp:
                    last_ts = scan.last_store_timestamp
                rel = scan.end
                if scan.stopped is not None:
                    if scan.stopped != "blank":  # below the committed offset: a bug, not a tear
                        _log.error("index dispatch skips the rest of segment %d: %s", start, scan.stopped)
                    rel = args.commitlog_file_size
                pos = start + rel
                pack_indexed(progress.mm, indexed_pos, pos)
                if time.monotonic() - checked < 0.5:
                    continue
            now = time.monotonic()
            if now - checked >= 0.2:
                checked = now
                if superseded() or _store_closed(root):
                    break
                mp = progress.get("min_phy_offset")
                if mp > min_phy:
                    min_phy = mp
                    index.delete_expired(min_phy)
            req = progress.get("flush_request")
            if req != flushed_req or (now - last_flush >= flush_every and last_ts != flushed_ts):
                flush()
                flushed_req = req
                progress.set("flushed_request", req)
            if progress.get("stop") and pos >= progress.get("committed_offset"):
                break
            if pos >= progress.get("committed_offset"):
                # caught up: let appends accumulate; a query by key waits at most this long for the
                # newest ones. A wake-up costs more than its Python work (by then the core's caches
                # hold other processes' data): every 10 ms rather than 2 ms, batches of ~350 instead
                # of ~75 under the 16-thread Producer, cost ~0.5 us less CPU per message
                time.sleep(_CAUGHT_UP_SLEEP)
    finally:
        try:
            flush()
        finally:
            index.close()
            log.close()
            progress.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmqgate.store.index_dispatch")
    parser.add_argument("args", help="DispatcherArgs as JSON")
    ns = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # background work: it runs on cores nothing else wants (SCHED_IDLE), so appends and consumers
    # go first; queries by key wait for the index to catch up (dispatchBehindBytes says how far)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s index-dispatch %(message)s")
    return run_dispatcher(DispatcherArgs(**json.loads(ns.args)))


if __name__ == "__main__":
    sys.exit(main())
