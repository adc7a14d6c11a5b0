"""CommitLog: the mapped segments every message is appended to, read by physical offset and
validated (CRC, positions) by recovery; and the warmer that zeroes and maps the segment ahead of the
write position, RocketMQ's warmMappedFile done continuously."""

from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rmqgate.store.mapped_file import PAGE_SIZE, MappedFileQueue
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.message import BLANK_MAGIC, RECORD_PREFIX, decode_message, store_timestamp_pos

if TYPE_CHECKING:
    from rmqgate.store.message_store import DefaultMessageStore

_log = logging.getLogger(__name__)
_unpack_prefix = RECORD_PREFIX.unpack_from
_TS = struct.Struct(">q")  # STORETIMESTAMP, read at store_timestamp_pos(sysFlag)


class CommitLog:
    """The CommitLog's mapped segments, read by physical offset."""

    def __init__(self, directory: Path, mapped_file_size: int) -> None:
        self.queue = MappedFileQueue(directory, mapped_file_size, release_flushed=True)
        self.mapped_file_size = mapped_file_size

    def get_min_offset(self) -> int:
        return self.queue.get_min_offset()

    def get_max_offset(self) -> int:
        return self.queue.get_max_offset()

    def get_data(self, phys: int, size: int) -> memoryview | None:
        if phys < 0 or phys + size > self.get_max_offset():
            return None
        f = self.queue.find_mapped_file_by_offset(phys)
        if f is None:
            return None
        rel = phys - f.file_from_offset
        if rel + size > f.file_size:
            return None
        try:
            return f.buf[rel : rel + size]
        except ValueError:  # segment was just deleted
            return None

    def record_at(self, phys: int) -> memoryview | None:
        f = self.queue.find_mapped_file_by_offset(phys)
        if f is None or phys >= self.get_max_offset():
            return None
        rel = phys - f.file_from_offset
        try:
            total, magic = _unpack_prefix(f.buf, rel)
            if magic == BLANK_MAGIC or total <= 0 or rel + total > f.read_position:
                return None
            return f.buf[rel : rel + total]
        except ValueError:  # the segment was deleted meanwhile
            return None

    def pickup_store_timestamp(self, phys: int, size: int) -> int:
        rec = self.get_data(phys, size)
        if rec is None or size < 64:
            return -1
        sys_flag = int.from_bytes(rec[36:40], "big")
        return _TS.unpack_from(rec, store_timestamp_pos(sys_flag))[0]

    def roll_next_file(self, phys: int) -> int:
        return phys + self.mapped_file_size - phys % self.mapped_file_size

    def recover_end(self, start: int) -> int:
        """Validate records (magic, size, CRC, position) from segment ``start`` on: the offset where
        the valid records end (a torn or corrupt tail starts there)."""
        files = self.queue.files
        if not files:
            return 0
        end = files[start].file_from_offset
        for i in range(start, len(files)):
            f = files[i]
            buf = f.buf
            pos = 0
            limit = f.file_size
            while pos + 8 <= limit:
                total, magic = _unpack_prefix(buf, pos)
                if magic == BLANK_MAGIC and 8 <= total == limit - pos:
                    break
                try:
                    msg = decode_message(buf, pos, check_crc=True, copy_body=False)
                except MessageFormatError:
                    return f.file_from_offset + pos
                if msg.commit_log_offset != f.file_from_offset + pos:
                    return f.file_from_offset + pos
                pos += total
            else:
                if pos != limit:
                    return f.file_from_offset + pos
            end = f.file_from_offset + pos  # blank (or exactly full): continue with the next file
            if i + 1 < len(files) and files[i + 1].file_from_offset != f.end_offset:
                # a segment is missing (removed by hand?): keep going like Java's recovery, which
                # walks the files it has; stopping here would delete every later, intact segment
                _log.error(
                    "CommitLog segments %d..%d are missing", f.end_offset, files[i + 1].file_from_offset
                )
        return end

    def earliest_store_timestamp(self) -> int:
        """STORETIMESTAMP of the first record still kept; -1 with none."""
        f = self.queue.first()
        if f is None:
            return -1
        try:
            return decode_message(f.buf, 0, with_body=False).store_timestamp
        except (MessageFormatError, ValueError):
            return -1


NOT_WARMING = 1 << 62
# Each chunk costs the warmer at least two waits for the GIL (after the pwrite, after the populate);
# while a writer thread keeps the GIL busy each lasts up to the switch interval (5 ms). With 1 MiB
# chunks the warmer fell 1-2 MiB behind one writer appending ~210 MB/s, which then faulted pages in
# itself and waited for the chunk being zeroed. Under SYNC_FLUSH the loop idles in every group
# commit, so the GIL is free, and the chunk's own sync competes with the commits on the device:
# kept small there.
_WARM_CHUNK_ASYNC = 4 * 1024 * 1024
_WARM_CHUNK_SYNC = 1024 * 1024
_ZEROS = memoryview(bytes(max(_WARM_CHUNK_ASYNC, _WARM_CHUNK_SYNC)))


class CommitLogWarmer(threading.Thread):
    """Writes zeros into the last CommitLog segment ahead of the write position (``pwrite`` releases
    the GIL), so appends copy into allocated page-cache pages instead of faulting each one in; then
    maps that chunk writable into the page tables (``MappedFile.populate``), so appends take no page
    fault there at all. Under SYNC_FLUSH appends reach the segment by ``pwrite`` from a write buffer:
    the zeroed chunk is synced, like RocketMQ's warmMappedFile (a group commit then allocates no
    blocks), and not populated. Flushes sync only the written range, so the chunk stays mapped until
    used.

    It never touches written bytes: under the put lock it picks a chunk at or past the write position
    and publishes its start in ``store._warm_busy_from``; puts bound their record below that until the
    chunk is done (``_warm_done`` is set again). It sleeps until an append passes
    ``store._warm_wake_at`` (``commitlog_warm_ahead`` short of the warmed end): woken by a timer, it
    took the GIL from the appending thread a hundred times a second, mostly for nothing. Populating
    alone under ASYNC_FLUSH (no zeros written) measured 6% slower appends than this."""

    def __init__(self, store: DefaultMessageStore) -> None:
        super().__init__(name="rmqgate-commitlog-warmer", daemon=True)
        self.store = store
        self.ahead = store.config.commitlog_warm_ahead
        self._stop_event = threading.Event()
        self._wakeup = threading.Event()
        self.warmed_to = 0  # absolute CommitLog offset: zeroed below, ahead of the write position
        # appends pwritten from a write buffer (SYNC_FLUSH): the chunk is synced, and not mapped
        # writable, or each group commit's writeback would write-protect its pages again
        self._sync_ahead = store.commitlog.queue.write_buffer is not None
        self._populate = not self._sync_ahead
        self._fd: int | None = None
        self._fd_path: Path | None = None
        self.chunk = _WARM_CHUNK_SYNC if self._sync_ahead else _WARM_CHUNK_ASYNC

    def wake(self) -> None:
        """Called by an append that passed ``store._warm_wake_at``; later ones don't until re-armed."""
        self.store._warm_wake_at = NOT_WARMING
        self._wakeup.set()

    def stop(self) -> None:
        self._stop_event.set()
        self._wakeup.set()
        self.join()

    def run(self) -> None:
        try:
            self._run()
        finally:
            self._close_fd()

    def _run(self) -> None:
        store = self.store
        while True:
            self._wakeup.wait(1.0)  # (the timeout only in case a wake-up went astray)
            self._wakeup.clear()
            if self._stop_event.is_set():
                return
            try:
                while self._warm_one_chunk():
                    if self._stop_event.is_set():
                        return
            except OSError as exc:  # e.g. a full disk: appends go on unwarmed (and refuse at 90%)
                _log.warning("CommitLog warm-up stopped: %s", exc)
                store._warm_busy_from = NOT_WARMING
                store._warm_done.set()
                return
            store._warm_wake_at = self.warmed_to - self.ahead  # where a chunk is due again

    def _warm_one_chunk(self) -> bool:
        store = self.store
        with store._put_lock:
            if store._shutdown:
                return False
            f = store.commitlog.queue.last()
            if f is None:
                return False
            pos = f.file_from_offset + f.wrote_position
            start = max(self.warmed_to, -(-pos // PAGE_SIZE) * PAGE_SIZE)
            end = min(start + self.chunk, f.end_offset)
            if start >= end or start >= pos + self.ahead:
                return False
            store._warm_done.clear()  # appends stay below the chunk meanwhile
            store._warm_busy_from = start
        first, last = start - f.file_from_offset, end - f.file_from_offset
        try:
            if self._fd_path != f.path:  # a descriptor of its own: the segment's may close meanwhile
                self._close_fd()
                self._fd = os.open(f.path, os.O_WRONLY)
                self._fd_path = f.path
            os.pwrite(self._fd, _ZEROS[: last - first], first)
        finally:
            store._warm_busy_from = NOT_WARMING
            store._warm_done.set()
        if self._sync_ahead:  # as RocketMQ's warmMappedFile: blocks allocated now, not in a commit
            f.sync_range(first, last)
        if self._populate:  # the page-table entries too (contents untouched): no fault per page either
            self._populate = f.populate(first, last)
        self.warmed_to = end
        return True

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self._fd_path = None
