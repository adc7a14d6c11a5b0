"""Memory-mapped segment files named by their 20-digit start offset (``MappedFile``/``MappedFileQueue``).

Writers copy into the mmap, or (``write_buffer``, RocketMQ's writeBuffer) into a buffer that ``commit``
pwrites to the file, so the segment is never mapped writable. A flush is ``msync(MS_SYNC)`` of just
the range written since the last one, called through ctypes so the GIL is released (``mmap.flush``
keeps it): Linux syncs that file range like ``fdatasync`` would, but leaves alone the pages zeroed
ahead of the writer, which stay dirty and mapped writable instead of being written back and faulted
in again. Append-only logs written through the mapping (CommitLog, ConsumeQueue) first drop their
fully written pages from the page tables: writeback must otherwise write-protect every mapped page
it cleans, one TLB-shootdown IPI per page to the writer's CPU.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
import time
from pathlib import Path

PAGE_SIZE = 4096
_MS_SYNC = 4
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _msync = _libc.msync
    _msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _msync.restype = ctypes.c_int
    _madvise = _libc.madvise
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise.restype = ctypes.c_int
    # Advice that returns at once keeps the GIL: getting it back after a release costs a background
    # thread up to a switch interval (5 ms) while another thread keeps appending.
    _madvise_holding_gil = ctypes.PyDLL(None).madvise
    _madvise_holding_gil.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise_holding_gil.restype = ctypes.c_int
except (OSError, AttributeError):  # no libc msync: whole-file fdatasync instead
    _msync = _madvise = _madvise_holding_gil = None
_MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels answer EINVAL and the writer faults pages in
_MADV_NORMAL = 0
_MADV_RANDOM = 1
_MADV_DONTNEED = 4  # on a shared file mapping: unmap only, the page (dirty or not) stays cached


def _mapping_address(mm: mmap.mmap) -> int:
    """Where ``mm`` is mapped (0 if unknown). The probe is a buffer export, dropped at once: closing
    an mmap needs none left; msync/madvise on a range no longer mapped just fail with ENOMEM."""
    try:
        probe = ctypes.c_char.from_buffer(mm)
    except TypeError:  # read-only mapping
        return 0
    address = ctypes.addressof(probe)
    del probe
    return address


_ZERO_CHUNK = bytes(1 << 20)


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    """One mapped segment. ``keep_fd=False`` (ConsumeQueue, index) closes the descriptor once mapped
    (the mmap holds its own) and reopens it to sync: thousands of queues must not pin 2 fds each."""

    __slots__ = (
        "_address",
        "_fd",
        "_open",
        "_release_flushed",
        "_syscalls",
        "_syscalls_done",
        "buf",
        "committed_position",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "mm",
        "path",
        "write_buffer",
        "wrote_position",
    )

    def __init__(
        self,
        path: Path,
        file_size: int,
        *,
        create: bool = True,
        keep_fd: bool = True,
        release_flushed: bool = False,
    ) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        if create and not path.exists():
            # sized under a temporary name, then renamed: a crash never leaves a short segment.
            # Sparse: preallocating 1 GiB per segment fills shared disks; the store instead refuses
            # writes above 90% disk use (a full disk would make mmap writes SIGBUS).
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, file_size)  # sparse, like RocketMQ's setLength
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.rename(tmp, path)
        fd = os.open(path, os.O_RDWR, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size != file_size:  # never resize someone's file: wrong settings would corrupt it
                raise ValueError(f"{path}: size {size} != expected {file_size} (check the store settings)")
            self.mm = mmap.mmap(fd, file_size)
        except BaseException:
            os.close(fd)
            raise
        if not keep_fd:
            os.close(fd)
            fd = -1
        self._fd = fd
        self._open = True
        self._address = _mapping_address(self.mm) if _msync is not None else 0
        self._release_flushed = release_flushed
        self._syscalls = 0  # msync/madvise calls on the mapping now running (see _pin)
        self._syscalls_done = threading.Condition(threading.Lock())
        self.buf = memoryview(self.mm)
        self.wrote_position = 0
        self.flushed_position = 0
        # with a write buffer: bytes [committed_position, wrote_position) are staged in it, from 0
        self.write_buffer: bytearray | None = None
        self.committed_position = 0

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def read_position(self) -> int:
        """End of what readers may see: what was written, or with a write buffer what was committed."""
        return self.wrote_position if self.write_buffer is None else self.committed_position

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``wrote_position`` (TOTALSIZE, its first 4 bytes, last into the mapping:
        a reader of the mapping never sees a record's size before its bytes)."""
        at, n = self.wrote_position, len(data)
        wb = self.write_buffer
        if wb is None:
            view = memoryview(data)
            self.buf[at + 4 : at + n] = view[4:]
            self.buf[at : at + 4] = view[:4]
        else:
            rel = at - self.committed_position
            if rel + n > len(wb):
                self.commit()
                rel = 0
            if n > len(wb):  # larger than the whole buffer: written through at once
                self._pwrite(data, at)
                self.committed_position = at + n
            else:
                wb[rel : rel + n] = data
        self.wrote_position = at + n

    def commit(self) -> int:
        """Write the staged bytes to the file (``pwrite``, GIL released); the committed position."""
        wb = self.write_buffer
        end = self.wrote_position
        if wb is not None and end > self.committed_position:
            start = self.committed_position
            self._pwrite(memoryview(wb)[: end - start], start)
            self.committed_position = end
        return self.committed_position

    def append_last(self, blank: bytes) -> None:
        """End the segment with ``blank`` (the BLANK record) at the write position: it is full."""
        at = self.wrote_position
        self.append(blank)
        try:
            self.commit()
        except OSError:  # not written: the next append tries again, from the same place
            self.wrote_position = at
            raise
        self.wrote_position = self.committed_position = self.file_size

    def _pwrite(self, data: bytes | bytearray | memoryview, at: int) -> None:
        """Write ``data`` (whole records) at ``at``, its first 4 bytes (a TOTALSIZE) last: a process
        killed meanwhile leaves a zero size at ``at``, so recovery ends the log there and no part of
        a batch is ever found without the rest."""
        view = memoryview(data)
        if len(view) > 4:
            self._pwrite_all(view[4:], at + 4)
        self._pwrite_all(view[:4], at)

    def _pwrite_all(self, view: memoryview, at: int) -> None:
        while view:
            n = os.pwrite(self._fd, view, at)
            view, at = view[n:], at + n

    def sync(self) -> None:
        """fdatasync the file (its dirty mapped pages included); releases the GIL meanwhile."""
        if self._fd >= 0:
            os.fdatasync(self._fd)
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _pin(self) -> bool:
        """Keep the mapping in place until ``_unpin`` (False once closed): ``close`` waits for every
        msync/madvise that ``_pin``\ned it. Otherwise another thread could unmap the range between
        our check and the call, and a new mapping (e.g. Python's own heap) take the address:
        MADV_DONTNEED would then zero live memory."""
        with self._syscalls_done:
            if not self._open:
                return False
            self._syscalls += 1
            return True

    def _unpin(self) -> None:
        with self._syscalls_done:
            self._syscalls -= 1
            if not self._syscalls:
                self._syscalls_done.notify_all()

    def sync_range(self, start: int, end: int) -> None:
        """Make ``[start, end)`` durable: msync of those pages (GIL released), else fdatasync."""
        if not self._address:
            self.sync()
            return
        start -= start % PAGE_SIZE
        end = min(end, self.file_size)
        if not self._pin():
            raise ValueError(f"{self.path}: flush after close")
        try:
            if _msync(self._address + start, end - start, _MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"msync {self.path}: {os.strerror(err)}")
        finally:
            self._unpin()

    def release_pages(self, start: int, end: int) -> None:
        """Unmap the whole pages of ``[start, end)`` from the page tables (one TLB flush for all of
        them); the page-cache pages and their dirty state stay, and a later access maps them again.
        Only for bytes nobody writes again: a rewrite would just fault the page back in."""
        end = min(end, self.file_size)
        start -= start % PAGE_SIZE
        end -= end % PAGE_SIZE
        if end <= start or not self._address or not self._pin():
            return
        try:
            _madvise(self._address + start, end - start, _MADV_DONTNEED)
        finally:
            self._unpin()

    def populate(self, start: int, end: int) -> bool:
        """Map ``[start, end)`` writable into the page tables now (GIL released), so the writer's first
        touch of each page does not fault; False when the kernel cannot.

        Readahead is off meanwhile (MADV_RANDOM, then MADV_NORMAL again for later readers). A fault
        that read ahead (the writer's first touch of a sparse segment) leaves a marker; a populating
        fault on it reads the next window ahead and marks that one, chunk after chunk: every page
        zero-filled twice, 80% of the warmer's CPU in a broker profile."""
        end = min(end, self.file_size)
        start -= start % PAGE_SIZE
        if end <= start:
            return True
        if not self._address or not self._pin():  # an address only when libc's msync/madvise loaded
            return False
        address, length = self._address + start, end - start
        try:
            _madvise_holding_gil(address, length, _MADV_RANDOM)
            try:
                return _madvise(address, length, _MADV_POPULATE_WRITE) == 0
            finally:
                _madvise_holding_gil(address, length, _MADV_NORMAL)
        finally:
            self._unpin()

    def flush(self) -> int:
        """Sync what was written since the last flush; returns the flushed position. With
        ``release_flushed`` (append-only files) the pages written full are unmapped first."""
        pos = self.read_position
        if pos > self.flushed_position:
            if self._release_flushed and self.write_buffer is None:  # (else never mapped writable)
                self.release_pages(self.flushed_position, pos)
            self.sync_range(self.flushed_position, pos)
            self.flushed_position = pos
        return self.flushed_position

    def last_modified(self) -> float:
        return os.stat(self.path).st_mtime

    def zero_from(self, pos: int) -> None:
        """Zero every non-zero byte from ``pos`` to the end (torn tails must not resurface later).

        Holes of the sparse segment are skipped (``SEEK_DATA``): reading them would fault in a
        gigabyte of zero pages at every restart."""
        buf = self.buf
        while pos < self.file_size:
            pos = self._next_data(pos)
            if pos >= self.file_size:
                return
            end = min(pos + len(_ZERO_CHUNK), self.file_size)
            if buf[pos:end] != _ZERO_CHUNK[: end - pos]:
                buf[pos:end] = _ZERO_CHUNK[: end - pos]
            pos = end

    def _next_data(self, pos: int) -> int:
        """The first offset at or after ``pos`` that is not in a hole (``file_size`` if none);
        ``pos`` itself where the descriptor is closed or the file system cannot tell."""
        if self._fd < 0:
            return pos
        try:
            return os.lseek(self._fd, pos, os.SEEK_DATA)
        except OSError as e:
            return self.file_size if e.errno == errno.ENXIO else pos

    def close(self) -> None:
        with self._syscalls_done:
            if not self._open:
                return
            self._open = False
            while self._syscalls:
                self._syscalls_done.wait()
        try:
            self.buf.release()
            self.mm.close()
        except BufferError:
            pass  # zero-copy views still alive; the mapping goes when they do
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class MappedFileQueue:
    """Ordered segments of one log (the CommitLog, or one ConsumeQueue)."""

    def __init__(
        self, store_path: Path, mapped_file_size: int, *, keep_fd: bool = True, release_flushed: bool = False
    ) -> None:
        self.store_path = Path(store_path)
        self.mapped_file_size = mapped_file_size
        self.keep_fd = keep_fd
        self.release_flushed = release_flushed
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.write_buffer: bytearray | None = None  # handed on to each new last segment
        self._lock = threading.Lock()

    def load(self) -> None:
        if not self.store_path.is_dir():
            return
        for p in self.store_path.glob("*.tmp"):  # a segment being created when the process died
            p.unlink(missing_ok=True)
        names = sorted(p for p in self.store_path.iterdir() if p.is_file() and p.name.isdigit())
        for p in names:
            if p.stat().st_size != self.mapped_file_size:
                # RocketMQ refuses to load; a wrong-size file means a foreign or damaged store
                raise ValueError(f"{p}: size {p.stat().st_size} != mapped file size {self.mapped_file_size}")
            f = MappedFile(
                p,
                self.mapped_file_size,
                create=False,
                keep_fd=self.keep_fd,
                release_flushed=self.release_flushed,
            )
            f.wrote_position = f.flushed_position = self.mapped_file_size
            self.files.append(f)

    # -- lookup --
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def get_last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The segment being written; a new one when the last is full (or none exists)."""
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full():
            return last
        if not create:
            return last
        if last is None:
            create_offset = start_offset - (start_offset % self.mapped_file_size)
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        self.store_path.mkdir(parents=True, exist_ok=True)
        f = MappedFile(
            self.store_path / offset_to_file_name(create_offset),
            self.mapped_file_size,
            keep_fd=self.keep_fd,
            release_flushed=self.release_flushed,
        )
        wb = self.write_buffer
        if wb is not None:
            if last is not None:
                last.commit()
                last.write_buffer = None
            f.write_buffer = wb
        with self._lock:
            self.files.append(f)
        return f

    def use_write_buffer(self, capacity: int) -> None:
        """Appends to the last segment (and each later one) go through a write buffer of ``capacity``."""
        self.write_buffer = bytearray(capacity)
        last = self.last()
        if last is not None and not last.is_full():
            last.write_buffer = self.write_buffer
            last.committed_position = last.wrote_position

    def commit(self) -> int:
        """Write the last segment's staged bytes to its file; the committed end (absolute offset)."""
        last = self.last()
        return last.file_from_offset + last.commit() if last is not None else 0

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0]
        idx = (offset - first.file_from_offset) // self.mapped_file_size
        if 0 <= idx < len(files):
            f = files[idx]
            if f.file_from_offset <= offset < f.end_offset:
                return f
        for f in files:  # after a deletion left a gap
            if f.file_from_offset <= offset < f.end_offset:
                return f
        return None

    def get_min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    def get_max_offset(self) -> int:
        """End of readable data (``getMaxOffset``): with a write buffer, of what was committed."""
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.read_position if last else 0

    def total_file_size(self) -> int:
        return len(self.files) * self.mapped_file_size

    # -- flush --
    def flush(self) -> int:
        """Flush segments from ``flushed_where`` up to what was written; returns the new flushed_where."""
        while True:
            f = self.find_mapped_file_by_offset(self.flushed_where)
            if f is None:
                f = (
                    self.files[0]
                    if self.files and self.flushed_where < self.files[0].file_from_offset
                    else None
                )
                if f is None:
                    return self.flushed_where
            pos = f.flush()
            self.flushed_where = f.file_from_offset + pos
            if pos < f.file_size:
                return self.flushed_where

    # -- truncation / deletion --
    def set_positions(self, offset: int) -> None:
        """After recovery: data ends at ``offset``; later segments are removed, the tail is zeroed."""
        keep: list[MappedFile] = []
        for f in self.files:
            if f.end_offset <= offset:
                keep.append(f)
            elif f.file_from_offset <= offset:
                pos = offset - f.file_from_offset
                f.zero_from(pos)
                f.wrote_position = f.flushed_position = pos
                keep.append(f)
            else:
                f.destroy()
        with self._lock:
            self.files = keep
        self.flushed_where = offset

    def delete_first(self, n: int) -> list[MappedFile]:
        with self._lock:
            gone, self.files = self.files[:n], self.files[n:]
        for f in gone:
            f.destroy()
        return gone

    def reset_to(self, offset: int) -> None:
        """Drop all segments and start fresh at ``offset`` (a queue whose data was all removed)."""
        self.delete_first(len(self.files))
        self.flushed_where = offset

    def expired_by_time(
        self, expired_ms: int, now_ms: int | None = None, keep_last: bool = True, *, immediately: bool = False
    ) -> int:
        """How many leading segments were last modified more than ``expired_ms`` ago (all of them but
        the last when ``immediately``: RocketMQ's cleanImmediately ignores age, and a segment written
        in the same millisecond would otherwise look younger than ``now``)."""
        now = time.time() * 1000 if now_ms is None else now_ms
        limit = len(self.files) - (1 if keep_last else 0)
        if immediately:
            return max(limit, 0)
        n = 0
        # whole milliseconds, as File.lastModified: a segment last written in the millisecond ``now``
        # names (floored) is as old as it, not younger
        while n < limit and int(self.files[n].last_modified() * 1000) + expired_ms <= now:
            n += 1
        return n

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
