"""MappedFile: range flushes through msync, page-table population ahead of the writer."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from rmqgate.store.mapped_file import PAGE_SIZE, MappedFile, offset_to_file_name

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
