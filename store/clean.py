"""Expired-file cleanup: CommitLog segments past fileReservedTime deleted at the deleteWhen hour or
when the disk is over its ratio (CleanCommitLogService), then the ConsumeQueue and index files that
point only below the new minimum offset (CleanConsumeQueueService); and the disk ratio both use."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmqgate.store.message_store import DefaultMessageStore

_log = logging.getLogger(__name__)

CLEAN_FORCIBLY_RATIO = 85  # diskSpaceCleanForciblyRatio: delete regardless of age
DISK_WARNING_RATIO = 90  # diskSpaceWarningLevelRatio: stop accepting writes


class CleanService:
    """Deletes expired files of one store; one cleanup at a time (the service thread, admin
    requests): each decides from a snapshot how many leading files to delete, and two at once would
    delete twice as many."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._cleaned_below = -1  # the CommitLog min offset ConsumeQueue and index files were cleaned to

    def clean_expired_files(self, *, force: bool = False, now_ms: int | None = None) -> int:
        """CommitLog segments older than ``file_reserved_time`` when it is time (``delete_when`` hour,
        disk over ratio, or ``force``), then the ConsumeQueue/index files that only point below the
        new min offset; the number of CommitLog segments deleted."""
        with self._lock:
            return self._clean(force, time.time_ns() // 1_000_000 if now_ms is None else now_ms)

    def _clean(self, force: bool, now: int) -> int:
        store = self.store
        cfg = store.config
        hour = time.localtime(now / 1000).tm_hour
        timeup = any(h.strip().isdigit() and int(h) == hour for h in cfg.delete_when.split(";"))
        # isSpaceToDelete: the CommitLog's partition first; only when it has room, the ConsumeQueue's
        # (which then marks DISK_FULL again). getDiskMaxUsedSpaceRatio's bounds; an unreadable
        # partition counts as full, as in Java
        limit = min(max(cfg.disk_max_used_space_ratio, 10), 95)
        ratio = disk_used_percent(store.commitlog_dir)
        _mark_disk(store, ratio)
        immediately = ratio > CLEAN_FORCIBLY_RATIO
        spacefull = ratio < 0 or ratio > limit
        if not spacefull:
            ratio = disk_used_percent(store.consume_queue_dir)
            _mark_disk(store, ratio)
            immediately = immediately or ratio > CLEAN_FORCIBLY_RATIO
            spacefull = ratio < 0 or ratio > limit
        deleted = 0
        if timeup or spacefull or force:
            q = store.commitlog.queue
            n = min(q.expired_by_time(cfg.file_reserved_time * 3_600_000, now, immediately=immediately), 10)
            if n:
                with store._put_lock:
                    q.delete_first(n)
                deleted = n
        min_phy = store.commitlog.get_min_offset()
        if min_phy > self._cleaned_below:  # CleanConsumeQueueService: only once the min offset moved
            self._cleaned_below = min_phy
            for cq in list(store.consume_queues.values()):
                cq.delete_expired_files(min_phy)
            if store._index_process is not None:
                store._index_process.progress.set("min_phy_offset", min_phy)
            else:
                store.index.delete_expired(min_phy)
        return deleted


def _mark_disk(store: DefaultMessageStore, ratio: int) -> None:
    """RunningFlags' DISK_FULL (puts refused) as isSpaceToDelete sets it: marked over the warning ratio,
    cleared only at or below the forcible-clean ratio; in between it stays as it was, so a store that
    filled up takes writes again only once cleanup has brought it down to 85 %."""
    if ratio > DISK_WARNING_RATIO:
        if not store._disk_full:
            _log.error("disk maybe full soon %d%%, so mark disk full", ratio)
        store._disk_full = True
    elif ratio <= CLEAN_FORCIBLY_RATIO:
        if store._disk_full:
            _log.info("disk space OK %d%%, so mark disk ok", ratio)
        store._disk_full = False


def disk_util(store: DefaultMessageStore) -> str:
    """``SendMessageProcessor.diskUtil``: the CommitLog's, ConsumeQueue's and index's partitions used,
    as the SERVICE_NOT_AVAILABLE answer to a send quotes them ("CL:  0.91 CQ:  0.91 INDEX:  0.91")."""
    cl, cq, index = (
        disk_used_percent(p) / 100
        for p in (store.commitlog_dir, store.consume_queue_dir, store.root / "index")
    )
    return f"CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {index:5.2f}"


def disk_used_percent(path: Path) -> int:
    """UtilAll.getDiskPartitionSpaceUsedPercent as a whole percent: used / (used + available to
    us), rounded up (df's figure; blocks reserved for root count as neither); -100 (ratio -1) when
    the partition cannot be read."""
    try:
        u = shutil.disk_usage(path)  # used = total - free blocks; free = blocks available to us
    except OSError:
        return -100
    entire = u.used + u.free
    if u.total <= 0 or entire <= 0:
        return -100
    return -(-u.used * 100 // entire)
