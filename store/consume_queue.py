"""ConsumeQueue: per topic/queue, 20-byte units (commitlog offset, size, tagsCode) in mapped segments."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rmqgate.store.layout import CQ_UNIT, CQ_UNIT_SIZE
from rmqgate.store.mapped_file import PAGE_SIZE, MappedFileQueue

BLANK_SIZE = 0x7FFFFFFF
BLANK_UNIT = CQ_UNIT.pack(0, BLANK_SIZE, 0)  # padding before the first real unit of a late-created queue
_unpack_from = CQ_UNIT.unpack_from
_pack_into = CQ_UNIT.pack_into


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, mapped_file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        # a whole number of units per file, rounded up like getMappedFileSizeConsumeQueue()
        self.mapped_file_size = -(-mapped_file_size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        self.queue = MappedFileQueue(
            Path(root) / topic / str(queue_id), self.mapped_file_size, keep_fd=False, release_flushed=True
        )
        self.max_physic_offset = -1  # end (offset + size) of the last dispatched record
        self.min_logic_offset = 0  # bytes

    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Find the end of valid units in the last three segments (``offset >= 0 and size > 0``)."""
        files = self.queue.files
        if not files:
            return
        idx = max(0, len(files) - 3)
        end = files[idx].file_from_offset
        while idx < len(files):
            f = files[idx]
            buf = f.buf
            pos = 0
            while pos < f.file_size:
                off, size, _ = _unpack_from(buf, pos)
                if off < 0 or size <= 0:
                    break
                if size != BLANK_SIZE:
                    self.max_physic_offset = off + size
                pos += CQ_UNIT_SIZE
            end = f.file_from_offset + pos
            if pos < f.file_size:
                break
            idx += 1
        self.queue.set_positions(end)

    # -- offsets --
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.queue.get_max_offset() // CQ_UNIT_SIZE

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Move the min logical offset to the first unit still pointing into the CommitLog."""
        first = self.queue.first()
        if first is None:
            return
        buf = first.buf
        for pos in range(0, first.wrote_position, CQ_UNIT_SIZE):
            off, size, _ = _unpack_from(buf, pos)
            if size != BLANK_SIZE and off >= min_phy_offset:
                self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset + pos)
                return
        # nothing valid in the first segment: everything it holds is gone
        self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset + first.wrote_position)

    # -- write --
    def put(self, commit_log_offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write the unit for logical offset ``cq_offset``; repeated dispatch of an existing unit is a no-op."""
        if commit_log_offset + size <= self.max_physic_offset:
            return True
        expect = cq_offset * CQ_UNIT_SIZE
        q = self.queue
        files = q.files
        if files:  # fast path: the next unit of the last segment
            f = files[-1]
            pos = expect - f.file_from_offset
            if pos == f.wrote_position and pos < f.file_size:
                _pack_into(f.buf, pos, commit_log_offset, size, tags_code)
                f.wrote_position = pos + CQ_UNIT_SIZE
                self.max_physic_offset = commit_log_offset + size
                return True
        if expect < q.get_max_offset():
            return True
        fsize = self.mapped_file_size
        f = q.last()
        if f is None:
            f = q.get_last_mapped_file(expect)
            assert f is not None
            if expect > f.file_from_offset:  # queue begins mid-file: pad with blank units
                for p in range(0, expect - f.file_from_offset, CQ_UNIT_SIZE):
                    f.buf[p : p + CQ_UNIT_SIZE] = BLANK_UNIT
            self.min_logic_offset = expect
            q.flushed_where = f.file_from_offset
        while expect >= f.end_offset:
            f.wrote_position = fsize
            f = q.get_last_mapped_file()
            assert f is not None
        pos = expect - f.file_from_offset
        _pack_into(f.buf, pos, commit_log_offset, size, tags_code)
        f.wrote_position = pos + CQ_UNIT_SIZE
        self.max_physic_offset = commit_log_offset + size
        return True

    # -- read --
    def get_unit(self, offset: int) -> tuple[int, int, int] | None:
        pos = offset * CQ_UNIT_SIZE
        if pos < self.min_logic_offset:
            return None
        f = self.queue.find_mapped_file_by_offset(pos)
        if f is None or pos - f.file_from_offset >= f.wrote_position:
            return None
        try:
            return _unpack_from(f.buf, pos - f.file_from_offset)
        except ValueError:  # the segment was deleted meanwhile
            return None

    def get_index_buffer(self, offset: int) -> memoryview | None:
        """Units from ``offset`` to the end of what is written in its segment (``getIndexBuffer``)."""
        pos = offset * CQ_UNIT_SIZE
        if pos < self.min_logic_offset:
            return None
        f = self.queue.find_mapped_file_by_offset(pos)
        if f is None:
            return None
        rel = pos - f.file_from_offset
        if rel >= f.wrote_position:
            return None
        try:
            return f.buf[rel : f.wrote_position]
        except ValueError:  # the segment was deleted meanwhile
            return None

    def roll_next_file(self, offset: int) -> int:
        units = self.mapped_file_size // CQ_UNIT_SIZE
        return offset + units - offset % units

    def last_unit(self) -> tuple[int, int, int, int] | None:
        """(logical offset, commitlog offset, size, tagsCode) of the last unit, if any."""
        mx = self.get_max_offset_in_queue()
        if mx <= self.get_min_offset_in_queue():
            return None
        u = self.get_unit(mx - 1)
        return None if u is None else (mx - 1, *u)

    def get_offset_in_queue_by_time(self, timestamp: int, store_time: Callable[[int, int], int]) -> int:
        """Logical offset whose store time is ``timestamp`` or closest to it (4.9 semantics)."""
        lo = self.get_min_offset_in_queue()
        hi = self.get_max_offset_in_queue() - 1
        if hi < lo:
            return lo
        left = right = -1
        left_t = right_t = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            u = self.get_unit(mid)
            t = store_time(u[0], u[1]) if u else -1
            if t < 0:
                lo = mid + 1
                continue
            if t == timestamp:
                while mid > self.get_min_offset_in_queue():  # first of equal timestamps
                    p = self.get_unit(mid - 1)
                    if p is None or store_time(p[0], p[1]) != timestamp:
                        break
                    mid -= 1
                return mid
            if t > timestamp:
                right, right_t, hi = mid, t, mid - 1
            else:
                left, left_t, lo = mid, t, mid + 1
        if left < 0:
            return right
        if right < 0:
            return left  # all older: the newest one, as 4.9 answers
        return right if abs(timestamp - left_t) > abs(timestamp - right_t) else left

    def truncate_dirty(self, phy_end: int) -> None:
        """Drop the units whose record ends beyond ``phy_end`` (the CommitLog was cut there) in one
        cut: units follow the CommitLog's order, so the first such unit is found by bisection (blank
        padding units stay)."""
        lo, hi = self.get_min_offset_in_queue(), self.get_max_offset_in_queue()
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.get_unit(mid)
            if u is None or u[1] == BLANK_SIZE or u[0] + u[1] <= phy_end:
                lo = mid + 1
            else:
                hi = mid
        self.truncate_to(lo)

    def truncate_to(self, offset: int) -> None:
        """Keep only the units below logical ``offset`` (a no-op at or past the end)."""
        pos = offset * CQ_UNIT_SIZE
        if pos < self.queue.get_max_offset():
            self.queue.set_positions(pos)
            if not self.queue.files:
                self.min_logic_offset = min(self.min_logic_offset, pos)
        last = self.last_unit()
        self.max_physic_offset = last[1] + last[2] if last else -1

    def delete_expired_files(self, min_phy_offset: int) -> int:
        """Remove leading segments whose last unit points below the CommitLog's min offset."""
        q = self.queue
        n = 0
        for f in q.files[:-1]:
            off, size, _ = _unpack_from(f.buf, f.file_size - CQ_UNIT_SIZE)
            if off + size > min_phy_offset and size != BLANK_SIZE:
                break
            n += 1
        if n:
            q.delete_first(n)
        self.correct_min_offset(min_phy_offset)
        return n

    def flush(self, least_pages: int = 0) -> None:
        q = self.queue
        if least_pages and (q.get_max_offset() - q.flushed_where) < least_pages * PAGE_SIZE:
            return
        q.flush()

    def destroy(self) -> None:
        for f in list(self.queue.files):
            f.destroy()
        self.queue.files = []

    def close(self) -> None:
        self.queue.close()
