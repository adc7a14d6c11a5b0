"""MappedFile: range flushes through msync, page-table population ahead of the writer, appends
staged in a write buffer."""

from __future__ import annotations

import ctypes
import os
import resource
import threading
from pathlib import Path

import pytest

from rmqgate.store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue, offset_to_file_name

SIZE = 1024 * PAGE_SIZE


def _segment(tmp_path: Path, *, keep_fd: bool = True) -> MappedFile:
    return MappedFile(tmp_path / offset_to_file_name(0), SIZE, keep_fd=keep_fd)


@pytest.mark.parametrize("keep_fd", [True, False])
def test_flush_covers_each_new_range_and_its_bytes_are_in_the_file(tmp_path: Path, keep_fd: bool) -> None:
    # what reaches the disk cannot be observed here: this checks the flushed positions and the bytes
    f = _segment(tmp_path, keep_fd=keep_fd)
    try:
        f.buf[100:105] = b"first"
        f.wrote_position = 105
        assert f.flush() == 105
        f.buf[PAGE_SIZE * 3 + 7 : PAGE_SIZE * 3 + 13] = b"second"  # starts mid-page, far from the first
        f.wrote_position = PAGE_SIZE * 3 + 13
        assert f.flush() == PAGE_SIZE * 3 + 13
        assert f.flushed_position == f.wrote_position
        assert f.flush() == PAGE_SIZE * 3 + 13  # nothing new: no sync, same answer
        fd = os.open(f.path, os.O_RDONLY)
        try:
            assert os.pread(fd, 5, 100) == b"first"
            assert os.pread(fd, 6, PAGE_SIZE * 3 + 7) == b"second"
        finally:
            os.close(fd)
    finally:
        f.close()


def test_sync_range_after_close_is_an_error_not_a_crash(tmp_path: Path) -> None:
    f = _segment(tmp_path)
    f.close()
    with pytest.raises((ValueError, OSError)):
        f.sync_range(0, PAGE_SIZE)


def test_populate_keeps_the_contents_and_spares_the_writer_its_page_faults(tmp_path: Path) -> None:
    f = _segment(tmp_path)
    try:
        f.buf[PAGE_SIZE - 3 : PAGE_SIZE + 3] = b"abcdef"
        populated = f.populate(0, SIZE // 2)
        assert isinstance(populated, bool)
        assert bytes(f.buf[PAGE_SIZE - 3 : PAGE_SIZE + 3]) == b"abcdef"
        assert bytes(f.buf[2 * PAGE_SIZE : 3 * PAGE_SIZE]) == bytes(PAGE_SIZE)
        if not populated:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")

        def faults_writing(start: int, pages: int) -> int:
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            for p in range(start, start + pages * PAGE_SIZE, PAGE_SIZE):
                f.buf[p] = 1
            return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

        pages = 200
        on_populated = faults_writing(4 * PAGE_SIZE, pages)
        on_untouched = faults_writing(SIZE // 2, pages)
        # the control: first writes do fault there (one per page, or one per large folio)
        assert on_untouched >= 4
        assert on_populated * 4 <= on_untouched
    finally:
        f.close()


def _resident_pages(f: MappedFile, start: int, end: int) -> int:
    """How many pages of ``[start, end)`` of the mapping are in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    vec = (ctypes.c_ubyte * ((end - start) // PAGE_SIZE))()
    address = ctypes.addressof(ctypes.c_char.from_buffer(f.mm)) + start
    assert libc.mincore(address, end - start, vec) == 0, os.strerror(ctypes.get_errno())
    return sum(b & 1 for b in vec)


def test_populate_does_not_carry_readahead_past_the_warmed_range(tmp_path: Path) -> None:
    """The writer's first touch of a fresh sparse segment faults and reads ahead (zero-filling pages),
    leaving a readahead marker; had the warmer's populating faults hit it, each chunk would read the
    next window ahead too, a chain that zero-fills every page twice (most of the warmer's CPU in a
    broker profile). Populated chunks must leave the pages after them alone."""
    chunk = 256 * PAGE_SIZE
    f = MappedFile(tmp_path / offset_to_file_name(0), 64 * chunk)
    try:
        f.buf[0:5] = b"first"  # before any warming
        fd = os.open(f.path, os.O_WRONLY)
        try:
            for start in range(chunk, 40 * chunk, chunk):  # the warmer's sequence: zeros, then populate
                os.pwrite(fd, bytes(chunk), start)
                if not f.populate(start, start + chunk):
                    pytest.skip("this kernel cannot populate page tables (MADV_POPULATE_WRITE, Linux 5.14+)")
        finally:
            os.close(fd)
        assert _resident_pages(f, chunk, 40 * chunk) == 39 * 256
        assert _resident_pages(f, 40 * chunk, 64 * chunk) == 0
        assert bytes(f.buf[0:5]) == b"first" and bytes(f.buf[chunk : chunk + 8]) == bytes(8)
    finally:
        f.close()


def _mapped_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (pages present in its page tables)."""
    kib = 0
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef":
            inside = line.endswith(" " + str(path))
        elif inside and line.startswith("Rss:"):
            kib += int(line.split()[1])
    return kib


@pytest.mark.parametrize("release", [True, False])
def test_release_flushed_unmaps_only_the_pages_written_full(tmp_path: Path, release: bool) -> None:
    """Append-only files drop their written-full pages from the page tables at flush (writeback
    would otherwise write-protect each one with its own TLB shootdown); the bytes stay readable
    and on file, and the partly written last page stays mapped for the writer."""
    if not Path("/proc/self/smaps").exists():
        pytest.skip("needs /proc/self/smaps")
    f = MappedFile(tmp_path / offset_to_file_name(0), SIZE, release_flushed=release)
    try:
        data = os.urandom(PAGE_SIZE * 40 + 100)
        f.buf[: len(data)] = data
        f.wrote_position = len(data)
        assert _mapped_kib(f.path) >= 41 * PAGE_SIZE // 1024
        assert f.flush() == len(data)
        mapped = _mapped_kib(f.path)
        if release:
            assert mapped == PAGE_SIZE // 1024  # just the last, partly written page
        else:
            assert mapped >= 41 * PAGE_SIZE // 1024
        more = os.urandom(PAGE_SIZE)
        f.buf[len(data) : len(data) + len(more)] = more  # the writer goes on past the partial page
        f.wrote_position += len(more)
        assert f.flush() == len(data) + len(more)
        assert bytes(f.buf[: f.wrote_position]) == data + more  # released pages map back in on reading
        fd = os.open(f.path, os.O_RDONLY)
        try:
            assert os.pread(fd, f.wrote_position, 0) == data + more
        finally:
            os.close(fd)
    finally:
        f.close()


def test_write_buffer_stages_appends_until_commit_and_never_maps_a_page(tmp_path: Path) -> None:
    """With a write buffer, appends stay in it until ``commit`` pwrites them: readers and flushes
    see the committed end only, the file holds none of the staged bytes, and the mapping never takes
    a page in (so writeback has none to write-protect). A record larger than the buffer is written
    through; ``append_last`` ends the segment."""
    f = MappedFile(tmp_path / offset_to_file_name(0), SIZE, release_flushed=True)
    fd = os.open(f.path, os.O_RDONLY)
    try:
        f.write_buffer = bytearray(2 * PAGE_SIZE)
        recs = [os.urandom(1000) for _ in range(5)]
        for r in recs[:3]:
            f.append(r)
        assert (f.wrote_position, f.read_position) == (3000, 0)
        assert f.flush() == 0  # nothing committed, nothing to sync
        assert os.pread(fd, 3000, 0) == bytes(3000)
        assert f.commit() == 3000 and f.read_position == 3000
        assert f.flush() == 3000
        f.append(recs[3])
        f.append(recs[4])
        big = os.urandom(3 * PAGE_SIZE)  # commits the 2000 staged bytes first, then goes through
        f.append(big)
        assert f.committed_position == f.wrote_position == 5000 + len(big)
        f.append(b"tail")
        f.append_last(b"\x00\x00\x00\x10BLANK...")
        assert f.wrote_position == f.committed_position == f.read_position == SIZE
        data = b"".join(recs) + big + b"tail" + b"\x00\x00\x00\x10BLANK..."
        assert os.pread(fd, len(data), 0) == data
        if Path("/proc/self/smaps").exists():
            assert _mapped_kib(f.path) == 0
        assert bytes(f.buf[: len(data)]) == data  # the mapping reads what was pwritten
    finally:
        os.close(fd)
        f.close()


def test_commit_writes_the_first_size_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit stopped after its first write (here a failing pwrite; in life a SIGKILL) leaves the
    size field where the staged range starts zero, so recovery ends the log there rather than find
    the first records of a batch without the rest; the next commit writes the whole range again."""
    import rmqgate.store.mapped_file as mapped_file

    f = MappedFile(tmp_path / offset_to_file_name(0), SIZE)
    fd = os.open(f.path, os.O_RDONLY)
    real_pwrite = os.pwrite
    calls: list[int] = []

    def pwrite_once(fd_: int, data: memoryview, at: int) -> int:
        calls.append(at)
        if len(calls) > 1:
            raise OSError(5, "Input/output error")
        return real_pwrite(fd_, data, at)

    try:
        f.write_buffer = bytearray(4 * PAGE_SIZE)
        data = os.urandom(3000)
        f.append(data)
        monkeypatch.setattr(mapped_file.os, "pwrite", pwrite_once)
        with pytest.raises(OSError):
            f.commit()
        assert calls == [4, 0]  # everything after the first size, then the size
        assert os.pread(fd, 4, 0) == bytes(4) and os.pread(fd, 2996, 4) == data[4:]
        assert f.committed_position == 0 and f.read_position == 0
        monkeypatch.setattr(mapped_file.os, "pwrite", real_pwrite)
        assert f.commit() == 3000
        assert os.pread(fd, 3000, 0) == data
    finally:
        os.close(fd)
        f.close()


@pytest.mark.parametrize("call", ["release_pages", "populate", "sync_range"])
def test_close_waits_for_a_running_msync_or_madvise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """A close from another thread (topic deletion, cleanup) must not unmap the range while the flush
    or warmer thread is inside msync/madvise on it: the address could be mapped again meanwhile
    (Python's heap), and MADV_DONTNEED there would zero live memory."""
    from rmqgate.store import mapped_file

    if mapped_file._madvise is None:
        pytest.skip("no libc msync/madvise")
    entered, proceed = threading.Event(), threading.Event()
    real = mapped_file._madvise if call != "sync_range" else mapped_file._msync

    def blocking(address: int, length: int, flag: int) -> int:
        entered.set()
        proceed.wait(30)
        return int(real(address, length, flag))

    monkeypatch.setattr(mapped_file, "_madvise" if call != "sync_range" else "_msync", blocking)
    f = MappedFile(tmp_path / offset_to_file_name(0), SIZE, release_flushed=True)
    f.buf[: PAGE_SIZE * 3] = os.urandom(PAGE_SIZE * 3)
    user = threading.Thread(target=getattr(f, call), args=(0, PAGE_SIZE * 3))
    user.start()
    assert entered.wait(30)
    closer = threading.Thread(target=f.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive(), "close() unmapped the file during a running msync/madvise"
    assert not f.is_open  # no new call starts meanwhile
    assert not f.populate(0, PAGE_SIZE)
    proceed.set()
    user.join(30)
    closer.join(30)
    assert not closer.is_alive() and not user.is_alive()


def test_a_segment_last_written_in_the_millisecond_now_names_is_expired_at_age_0(tmp_path: Path) -> None:
    """Ages in whole milliseconds, as File.lastModified and System.currentTimeMillis: a segment whose
    mtime falls inside the (floored) millisecond of ``now`` is not younger than now."""
    q = MappedFileQueue(tmp_path, 4096)
    try:
        for _ in range(2):
            q.get_last_mapped_file(q.get_max_offset()).wrote_position = 4096
        first_ns = 1_763_780_000_000_000_000 + 700_000  # 0.7 ms into a millisecond
        os.utime(q.files[0].path, ns=(first_ns, first_ns))
        assert q.expired_by_time(0, now_ms=first_ns // 1_000_000) == 1
        assert q.expired_by_time(1, now_ms=first_ns // 1_000_000) == 0
    finally:
        q.close()


@pytest.mark.parametrize("keep_fd", [True, False])
def test_zero_from_clears_data_past_holes_and_keeps_what_is_before(tmp_path: Path, keep_fd: bool) -> None:
    size = 16 << 20
    f = MappedFile(tmp_path / offset_to_file_name(0), size, keep_fd=keep_fd)
    junk = {0: b"kept", 100: b"torn tail", 3 << 20: b"after a hole", size - 7: b"the end"}
    for at, data in junk.items():
        f.buf[at : at + len(data)] = data
    f.zero_from(100)
    f.close()
    content = (tmp_path / offset_to_file_name(0)).read_bytes()
    assert content[:4] == b"kept"
    assert content[100:].count(0) == size - 100
