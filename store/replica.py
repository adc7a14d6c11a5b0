"""The store's side of HA replication; it knows nothing of the network.

On the master, ``read_commit_log`` answers what DefaultMessageStore.getCommitLogData hands a
transfer: the CommitLog bytes from an offset to the readable end of the segment holding it (a
transfer never crosses a segment's end), at most haTransferBatchSize of them. On the slave,
``append_to_commit_log`` is DefaultMessageStore.appendToCommitLog + CommitLog.appendData: the bytes
are written where the slave's CommitLog ends (the segment rolled to the next one exactly when Java's
getLastMappedFile rolls it), flushed per flushDiskType, and dispatched to the ConsumeQueues and the
index (the store's ``reput``, Java's ReputMessageService), so pulls from the slave see them.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from rmqgate.store.api import PutMessageStatus

if TYPE_CHECKING:
    import asyncio

    from rmqgate.store.message_store import DefaultMessageStore

_log = logging.getLogger(__name__)


def read_commit_log(store: DefaultMessageStore, offset: int, max_size: int) -> bytes | None:
    """Up to ``max_size`` CommitLog bytes from ``offset``, within the segment holding it and below its
    readable end (what was written; under SYNC_FLUSH, what was committed); None when there are none
    (``offset`` at the end, or in no segment kept)."""
    f = store.commitlog.queue.find_mapped_file_by_offset(offset)
    if f is None:
        return None
    pos = offset - f.file_from_offset
    end = min(f.read_position, pos + max_size)
    if pos >= end:
        return None
    try:
        return bytes(f.buf[pos:end])  # a copy: the segment may be deleted while the bytes are sent
    except ValueError:  # the segment was just deleted
        return None


class AppendRefused(Exception):
    """The bytes were not written: they do not continue this CommitLog."""


class CommitLogAppender:
    """A slave's appends of its master's CommitLog bytes, and their dispatch. A transfer ends where
    its batch ends, mid-record as often as not: the store's reput dispatches the records completed
    from ``reput_from`` on (ReputMessageService's reputFromOffset) and stops where one is cut off;
    ``reput_from`` starts at the CommitLog's end (recovery dispatched, and cut any torn record from,
    what the store held)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.reput_from = store.get_max_phy_offset()

    def append(
        self, start_offset: int, data: bytes | bytearray | memoryview
    ) -> Future[PutMessageStatus] | asyncio.Future[PutMessageStatus] | None:
        """Append ``data`` at ``start_offset``, which must be this CommitLog's max offset (an empty
        CommitLog begins at any segment boundary), and dispatch the records completed. Raises
        ``AppendRefused`` when the bytes do not fit. Under SYNC_FLUSH the answer is the flush's
        future (the group commit that makes them durable), else None."""
        store = self.store
        n = len(data)
        if store._shutdown:
            raise AppendRefused("the store is shut down")
        q = store.commitlog.queue
        with store._put_lock:
            if not q.files:
                if start_offset % q.mapped_file_size:
                    raise AppendRefused(f"an empty CommitLog cannot begin mid-segment at {start_offset}")
                self.reput_from = start_offset
            elif start_offset != q.get_max_offset():
                raise AppendRefused(
                    f"offset {start_offset} is not the CommitLog's max offset {q.get_max_offset()}"
                )
            if n == 0:
                return None
            store._warm_done.wait()  # the warmer must not zero the chunk written into
            f = q.get_last_mapped_file(start_offset)  # (rolls when the last segment is full)
            if f is None or f.file_from_offset + f.wrote_position != start_offset:
                raise AppendRefused(f"no segment ends at {start_offset}")
            if f.wrote_position + n > f.file_size:
                raise AppendRefused(f"{n} bytes at {start_offset} cross the segment's end")
            f.append(data)
            if f.write_buffer is not None:  # SYNC_FLUSH's staging buffer: readable once committed
                f.commit()
            end = start_offset + n
            self.reput_from = store.reput(self.reput_from, end)  # (stops where a record is cut off)
        if end > store._warm_wake_at:
            store._wake_warmer()
        fs = store._flush_service
        if fs is not None and fs.sync:
            return fs.submit(end)
        return None
