"""Flush services: the CommitLog's (ASYNC_FLUSH's interval flush or SYNC_FLUSH's group commit), and
the store's periodic thread that flushes ConsumeQueues, index and checkpoint, persists consumer
offsets and cleans expired files (FlushConsumeQueueService, CleanCommitLogService)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from rmqgate.store.api import SYNC_FLUSH, PutMessageStatus
from rmqgate.store.mapped_file import PAGE_SIZE

if TYPE_CHECKING:
    from rmqgate.store.message_store import DefaultMessageStore

_log = logging.getLogger(__name__)


WRITE_BUFFER_SIZE = 4 * 1024 * 1024  # SYNC_FLUSH's staging: holds a loop round's appends
_FLUSH_ATTEMPTS = 3  # a flush that cannot reach a request's offset in this many tries reports a timeout


class FlushCommitLogService(threading.Thread):
    """ASYNC_FLUSH: fsync every interval when enough pages are dirty. SYNC_FLUSH: group commit.

    Writers on an asyncio loop are committed by that loop, once per loop round (as Redis does for
    ``appendfsync always``): the first put of a round schedules the commit, which writes the records
    the round staged in the CommitLog's write buffer to the segment in one ``pwrite`` (RocketMQ's
    commit to committedPosition), dispatches them, syncs (GIL released meanwhile) and then resolves
    the round's futures. Staged rather than copied into the mapping, the segment is never mapped
    writable, so writeback has no page to write-protect and no writer faults on it again: the sync
    of a round of 64 1 KiB records took 260-300 us instead of 400 us. A commit thread would need the
    GIL back to deliver its result, which a loop busy putting for other writers only hands over once
    it idles: the commits then stalled each round instead of overlapping it, at thousands of GIL
    hand-offs a second. Syncing in the background while the loop appends (a helper process;
    io_uring's IORING_OP_FSYNC, also with the write buffer) measured slower on two vCPUs: smaller
    groups, each with its own pwrite, sync and dispatch, cost the loop more than the overlap saves.
    Writers without a loop (threads) get a ``concurrent.futures.Future`` and are committed by this
    thread."""

    def __init__(self, store: DefaultMessageStore) -> None:
        super().__init__(name="rmqgate-commitlog-flush", daemon=True)
        self.store = store
        self.sync = store.config.flush_disk_type == SYNC_FLUSH
        self._cond = threading.Condition(threading.Lock())  # never taken re-entrantly
        self._flush_lock = threading.Lock()  # a loop's commit and this thread's may overlap
        self._timeout = store.config.sync_flush_timeout / 1000
        self._requests: list[tuple[int, Future[PutMessageStatus], float]] = []
        self._loop_rounds: dict[asyncio.AbstractEventLoop, list[tuple[int, asyncio.Future[Any]]]] = {}
        self._stopped = False
        self.flush_count = 0

    def submit(self, next_offset: int) -> Future[PutMessageStatus] | asyncio.Future[PutMessageStatus]:
        """A future resolved once the CommitLog is durable up to ``next_offset``: an ``asyncio.Future``
        committed with the rest of this loop round when called on a running loop, otherwise a
        ``concurrent.futures.Future`` committed by the flush thread."""
        loop = asyncio._get_running_loop()
        if loop is not None:
            fut = loop.create_future()
            waiting = self._loop_rounds.get(loop)
            if waiting is None:
                waiting = self._loop_rounds[loop] = []
                loop.call_soon(self._commit_round, loop, time.monotonic())
            waiting.append((next_offset, fut))
            return fut
        cfut: Future[PutMessageStatus] = Future()
        with self._cond:
            self._requests.append((next_offset, cfut, time.monotonic() + self._timeout))
            self._cond.notify()
        return cfut

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self.join()

    def _flush(self) -> int:
        store = self.store
        ts = store._last_store_ts  # (before the commit: every record up to it is then flushed)
        if store._undispatched is not None:
            store._commit_staged()
        with self._flush_lock:
            flushed = store.commitlog.queue.flush()
            self.flush_count += 1
        if ts:
            store.checkpoint.physic_msg_timestamp = ts
        return flushed

    def _flush_to(self, target: int) -> int:
        """Flush until ``target`` is durable; the offset reached (-1 when the flush failed)."""
        try:
            flushed = self._flush()
            for _ in range(_FLUSH_ATTEMPTS - 1):
                if flushed >= target:
                    break
                flushed = self._flush()
        except Exception as exc:  # a disk error, the store closed meanwhile...: the waiters must hear
            _log.error("CommitLog group commit failed: %s", exc, exc_info=not isinstance(exc, OSError))
            return -1
        return flushed

    def _commit_round(self, loop: asyncio.AbstractEventLoop, started: float) -> None:
        waiting = self._loop_rounds.pop(loop)
        flushed = self._flush_to(max(off for off, _ in waiting))
        in_time = time.monotonic() - started <= self._timeout
        for off, fut in waiting:
            if not fut.done():
                ok = in_time and off <= flushed
                fut.set_result(PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def run(self) -> None:
        if self.sync:
            self._run_group_commit()
        else:
            self._run_interval()

    def _run_group_commit(self) -> None:
        while True:
            with self._cond:
                while not self._requests and not self._stopped:
                    self._cond.wait()
                reqs, self._requests = self._requests, []
                stopped = self._stopped
            if reqs:
                flushed = self._flush_to(max(r[0] for r in reqs))
                now = time.monotonic()
                for off, fut, deadline in reqs:
                    ok = off <= flushed and now <= deadline
                    fut.set_result(PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_DISK_TIMEOUT)
            if stopped and not self._requests:
                return

    def _run_interval(self) -> None:
        cfg = self.store.config
        q = self.store.commitlog.queue
        last_thorough = time.monotonic()
        while True:
            with self._cond:
                if not self._stopped:
                    self._cond.wait(cfg.flush_interval_commitlog / 1000)
                stopped = self._stopped
            now = time.monotonic()
            dirty_pages = (q.get_max_offset() - q.flushed_where) // PAGE_SIZE
            thorough = now - last_thorough >= cfg.flush_commitlog_thorough_interval / 1000
            if dirty_pages >= cfg.flush_commitlog_least_pages or thorough or stopped:
                if thorough:
                    last_thorough = now
                self._flush()
            if stopped:
                return


class StoreServiceThread(threading.Thread):
    """ConsumeQueue/index/checkpoint flush, consumer offset persistence, expired file cleanup."""

    def __init__(self, store: DefaultMessageStore) -> None:
        super().__init__(name="rmqgate-store-service", daemon=True)
        self.store = store
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        cfg = self.store.config
        tick = min(
            cfg.flush_interval_consume_queue, cfg.flush_consumer_offset_interval, cfg.clean_resource_interval
        )
        next_cq = next_off = next_clean = 0.0
        next_thorough = time.monotonic() + cfg.flush_consume_queue_thorough_interval / 1000
        while not self._stop_event.wait(tick / 1000):
            now = time.monotonic()
            try:
                if now >= next_cq:
                    next_cq = now + cfg.flush_interval_consume_queue / 1000
                    thorough = now >= next_thorough
                    if thorough:
                        next_thorough = now + cfg.flush_consume_queue_thorough_interval / 1000
                    self.store.flush_logics(thorough)
                if now >= next_off:
                    next_off = now + cfg.flush_consumer_offset_interval / 1000
                    self.store.meta.persist_offsets()
                if now >= next_clean:
                    next_clean = now + cfg.clean_resource_interval / 1000
                    self.store.clean_expired_files()
            except Exception:  # keep the service alive; the next round retries
                _log.exception("store service round failed")
