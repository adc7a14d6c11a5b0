"""IndexFile (header, hash slots, linked entries) and IndexService: lookup by KEYS token and UNIQ_KEY."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path

from rmqgate.store.layout import INDEX_ENTRY, INDEX_HEADER, INDEX_HEADER_SIZE, INDEX_SLOT, IndexHeader
from rmqgate.store.mapped_file import MappedFile
from rmqgate.wire.layout import fixed_field_names
from rmqgate.wire.message import java_string_hash
from rmqgate.wire.message_const import MessageSysFlag

_entry_pack = INDEX_ENTRY.pack_into
_entry_unpack = INDEX_ENTRY.unpack_from
_slot_pack = INDEX_SLOT.pack_into
_slot_unpack = INDEX_SLOT.unpack_from
_INT_MAX = 0x7FFFFFFF
#: IndexFile attributes named as the header's fields, in its order
_HEADER_FIELDS = fixed_field_names(IndexHeader)
_header_values = attrgetter(*_HEADER_FIELDS)
_TX_MASK = MessageSysFlag.TRANSACTION_MASK
_TX_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK
#: (position, sysFlag, store timestamp, topic, KEYS, UNIQ_KEY): one message to index, its texts as str
#: or as UTF-8 bytes (``wire.message.IndexRecord``, what the dispatcher's scan finds).
MessageKeys = tuple[int, int, int, "str | bytes", "str | bytes | None", "str | bytes | None"]


def index_file_name(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


class IndexFile:
    begin_timestamp: int  # (the header fields, set from the file)
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def __init__(self, path: Path, hash_slot_num: int, index_num: int, *, create: bool = True) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.entries_pos = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT.size
        size = self.entries_pos + index_num * INDEX_ENTRY.size
        # name: creation time, 17 digits. A file of another size was written with other
        # maxHashSlotNum/maxIndexNum: MappedFile refuses it.
        self._file = MappedFile(path, size, create=create, keep_fd=False)
        self.buf = self._file.buf
        self.reload_header()
        self.flushed_count = self.index_count

    def reload_header(self) -> None:
        """Read the header (another process may be writing this file)."""
        for name, value in zip(_HEADER_FIELDS, INDEX_HEADER.unpack_from(self.buf, 0), strict=True):
            setattr(self, name, value)
        if self.index_count <= 0:
            self.index_count = 1  # index numbers start at 1; 0 marks an empty slot / end of chain

    @property
    def path(self) -> Path:
        return self._file.path

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(self.buf, 0, *_header_values(self))

    def init_continuation(self, end_phy_offset: int, end_timestamp: int) -> None:
        if end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = end_timestamp
        self._write_header()

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_key(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Append an entry for a key whose ``indexKeyHashMethod`` value is ``key_hash``."""
        return self.put_entries([(key_hash, phy_offset, store_timestamp)], 0) == 1

    def put_entries(self, entries: Sequence[tuple[int, int, int]], start: int) -> int:
        """Append ``entries[start:]`` (key hash, CommitLog offset, store timestamp; offsets not
        decreasing) until the file is full; returns how many were written.

        The entries are written first, then the header with the new index_count, then the slots, and
        last the header's end offset and time: a slot never points past index_count, and a dispatcher
        killed before the end is written resumes (from the end offset) at this batch's first record,
        whose entries it writes and links again (a query drops the duplicate offsets). Written
        before the slots, the end made a killed batch's keys unreachable for good. Entries sharing a
        slot chain to each other in order."""
        count = self.index_count
        n = min(len(entries) - start, self.index_num - count)
        if n <= 0:
            return 0
        buf = self.buf
        slots = self.hash_slot_num
        begin = self.begin_timestamp
        linked: dict[int, int] = {}  # slot position -> newest index number written here
        idx = count
        pos = self.entries_pos + count * 20
        diff_ts = diff = -1
        phy = ts = 0
        for i in range(start, start + n):
            key_hash, phy, ts = entries[i]
            if idx <= 1:  # the file's first entry sets begin_timestamp: later ones are relative to it
                begin = self.begin_timestamp = ts
                self.begin_phy_offset = phy
                diff_ts, diff = ts, 0
            elif ts != diff_ts:
                diff_ts = ts
                diff = 0 if begin <= 0 else min(max((ts - begin) // 1000, 0), _INT_MAX)
            slot_pos = INDEX_HEADER_SIZE + key_hash % slots * 4
            prev = linked.get(slot_pos)
            if prev is None:
                prev = _slot_unpack(buf, slot_pos)[0]
                if prev <= 0 or prev > count:
                    prev = 0
            _entry_pack(buf, pos, key_hash, phy, diff, prev)
            linked[slot_pos] = idx
            idx += 1
            pos += 20
        self.hash_slot_count += n
        self.index_count = idx
        self._write_header()
        for slot_pos, i in linked.items():
            _slot_pack(buf, slot_pos, i)
        self.end_phy_offset = phy
        self.end_timestamp = ts
        self._write_header()
        return n

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        buf = self.buf
        count = self.index_count
        (idx,) = _slot_unpack(buf, INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * 4)
        if idx <= 0 or idx > count or count <= 1:
            return
        seen = 0
        while len(out) < max_num and seen <= count:
            seen += 1
            h, phy, diff, prev = _entry_unpack(buf, self.entries_pos + idx * 20)
            if diff < 0:
                break
            t = self.begin_timestamp + diff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            if prev <= 0 or prev > count or prev == idx or t < begin:
                break
            idx = prev

    def flush(self) -> None:
        count = self.index_count
        self._write_header()
        self._file.sync()
        self.flushed_count = count

    def close(self) -> None:
        if self._file.is_open:
            self._write_header()
        self._file.close()

    def close_readonly(self) -> None:
        """Unmap without writing (a reader must not write back a header it read earlier)."""
        self._file.close()

    def destroy(self) -> None:
        self._file.destroy()


def query_files(
    files: Sequence[IndexFile], key_hash: int, max_num: int, begin: int, end: int
) -> tuple[list[int], int, int]:
    """CommitLog offsets of the entries for ``key_hash`` stored in [begin, end], newest file first;
    also the newest file's end timestamp and end offset (``QueryMessageResult``'s index fields)."""
    out: list[int] = []
    last_ts = last_phy = 0
    for i in range(len(files) - 1, -1, -1):
        f = files[i]
        if i == len(files) - 1:
            last_ts, last_phy = f.end_timestamp, f.end_phy_offset
        if f.is_time_matched(begin, end):
            f.select_phy_offsets(out, key_hash, max_num, begin, end)
        if f.begin_timestamp < begin or len(out) >= max_num:
            break
    if len(out) > 1:
        out = list(dict.fromkeys(out))
    return out, last_ts, last_phy


def _abs_hash(h: int) -> int:
    """``indexKeyHashMethod``'s last step: abs of the int hash, MIN_VALUE -> 0."""
    return 0 if h == -0x80000000 else abs(h)


def index_key_hash(key: str) -> int:
    """``indexKeyHashMethod``: abs(String.hashCode), MIN_VALUE -> 0."""
    return _abs_hash(java_string_hash(key))


class IndexReader:
    """Queries over index files another process writes: the directory is listed and each header
    re-read per query; files are mapped once and dropped when they disappear."""

    def __init__(self, root: Path, hash_slot_num: int, index_num: int) -> None:
        self.dir = Path(root)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._files: dict[str, IndexFile] = {}
        self._lock = threading.Lock()

    def _refresh(self) -> list[IndexFile]:
        try:
            names = sorted(p.name for p in self.dir.iterdir() if p.name.isdigit())
        except FileNotFoundError:
            names = []
        for gone in self._files.keys() - set(names):
            self._files.pop(gone).close_readonly()
        out = []
        for name in names:
            f = self._files.get(name)
            if f is None:
                try:
                    f = IndexFile(self.dir / name, self.hash_slot_num, self.index_num, create=False)
                except (FileNotFoundError, ValueError):  # deleted meanwhile / not ours
                    continue
                self._files[name] = f
            else:
                f.reload_header()
            out.append(f)
        return out

    def query_offset(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> tuple[list[int], int, int]:
        with self._lock:
            files = self._refresh()
            return query_files(files, index_key_hash(f"{topic}#{key}"), max_num, begin, end)

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close_readonly()
            self._files.clear()


class IndexService:
    def __init__(
        self, root: Path, hash_slot_num: int, index_num: int, key_hash: Callable[[str], int]
    ) -> None:
        self.dir = Path(root)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._java_hash = key_hash
        # java_string_hash takes the hash of a prefix as seed: "topic#" is hashed once per topic
        self._chains = key_hash is java_string_hash
        self._topic_seeds: dict[str | bytes, tuple[int, dict[str | bytes, int]]] = {}
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()

    def key_hash(self, key: str) -> int:
        """``indexKeyHashMethod``: abs(String.hashCode), MIN_VALUE -> 0."""
        return _abs_hash(self._java_hash(key))

    def load(self, last_exit_ok: bool, index_checkpoint_ts: int) -> int | None:
        """Open the index files; after a crash drop those not known flushed. Returns the CommitLog
        offset from which the dropped entries must be rebuilt (None if nothing was dropped)."""
        if not self.dir.is_dir():
            return None
        rebuild_from: int | None = None
        for p in self.dir.glob("*.tmp"):
            p.unlink(missing_ok=True)
        for p in sorted(x for x in self.dir.iterdir() if x.is_file() and x.name.isdigit()):
            f = IndexFile(p, self.hash_slot_num, self.index_num)
            if not last_exit_ok and f.end_timestamp > index_checkpoint_ts:
                begin = f.begin_phy_offset
                rebuild_from = begin if rebuild_from is None else min(rebuild_from, begin)
                f.destroy()  # not known to be complete on disk: rebuilt from the CommitLog
                continue
            self.files.append(f)
        return rebuild_from

    def _last_file(self) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full():
            return last
        self.dir.mkdir(parents=True, exist_ok=True)
        ms = int(time.time() * 1000)
        while (self.dir / index_file_name(ms)).exists():
            ms += 1
        f = IndexFile(self.dir / index_file_name(ms), self.hash_slot_num, self.index_num)
        if last is not None:
            f.init_continuation(last.end_phy_offset, last.end_timestamp)
            last.flush()
        with self._lock:
            self.files.append(f)
        return f

    def build_index(
        self,
        topic: str,
        keys: str | None,
        uniq_key: str | None,
        phy_offset: int,
        store_timestamp: int,
        sys_flag: int = 0,
    ) -> None:
        """Index one message's UNIQ_KEY and KEYS tokens (``IndexService.buildIndex``)."""
        self.build_index_records([(phy_offset, sys_flag, store_timestamp, topic, keys, uniq_key)], 0)

    def build_index_records(self, records: Sequence[MessageKeys], base: int) -> None:
        """Index many messages at once: ``(position, sysFlag, store timestamp, topic, KEYS,
        UNIQ_KEY)``, positions relative to ``base`` and increasing, texts as str or UTF-8 bytes (what
        ``scan_index_records`` finds). Rolled-back transaction messages are not indexed; messages
        below the newest file's end offset were indexed before (a re-dispatch after recovery) and
        are skipped, except the one at that offset, which a kept file may hold only part of (queries
        drop the duplicates)."""
        files = self.files
        f = files[-1] if files else None
        if f is None or f.index_count >= f.index_num:
            f = self._last_file()
        done_below = f.end_phy_offset - base
        chains = self._chains
        key_hash = self._topic_key_hash if chains else self._joined_key_hash
        entries: list[tuple[int, int, int]] = []
        append = entries.append
        last_topic: str | bytes | None = None
        seed = 0
        heads: dict[str | bytes, int] = {}
        for pos, sys_flag, ts, topic, keys, uniq in records:
            if pos < done_below or sys_flag & _TX_MASK == _TX_ROLLBACK:
                continue
            phy = base + pos
            if uniq:
                if chains and type(uniq) is bytes and len(uniq) > 4 and uniq.isascii():
                    # _topic_key_hash inlined for a UNIQ_KEY as found by the scan (ASCII bytes)
                    if topic != last_topic:
                        seed, heads = self._seeds(topic)
                        last_topic = topic
                    hseed = heads.get(uniq[:-4])
                    if hseed is None:
                        hseed = self._head_seed(heads, uniq[:-4], seed)
                    h = (
                        hseed * 923521 + uniq[-4] * 29791 + uniq[-3] * 961 + uniq[-2] * 31 + uniq[-1]
                    ) & 0xFFFFFFFF
                    if h & 0x80000000:  # abs of the negative int, MIN_VALUE -> 0
                        h = (0x100000000 - h) & _INT_MAX
                    append((h, phy, ts))
                else:
                    append((key_hash(topic, uniq), phy, ts))
            if keys:
                for k in keys.split(b" " if type(keys) is bytes else " "):
                    if k:
                        append((key_hash(topic, k), phy, ts))
        start = 0
        while start < len(entries):
            start += f.put_entries(entries, start)
            if start < len(entries):
                f = self._last_file()

    def _joined_key_hash(self, topic: str | bytes, key: str | bytes) -> int:
        if type(topic) is bytes:
            topic = topic.decode("utf-8", "replace")
        if type(key) is bytes:
            key = key.decode("utf-8", "replace")
        return self.key_hash(f"{topic}#{key}")

    def _seeds(self, topic: str | bytes) -> tuple[int, dict[str | bytes, int]]:
        """The hash of "topic#" and the topic's cache of key-head hashes (seeded with it)."""
        seeds = self._topic_seeds.get(topic)
        if seeds is None:
            if len(self._topic_seeds) >= 1024:
                self._topic_seeds.clear()
            seeds = self._topic_seeds[topic] = (self._java_hash("#", self._java_hash(topic)), {})
        return seeds

    def _head_seed(self, heads: dict[str | bytes, int], head: str | bytes, seed: int) -> int:
        if len(heads) >= 1024:
            heads.clear()
        hseed = heads[head] = self._java_hash(head, seed)
        return hseed

    def _topic_key_hash(self, topic: str | bytes, key: str | bytes) -> int:
        """``key_hash(topic + "#" + key)`` from cached seeds: the hash of "topic#", and of "topic#" plus
        all but the last few characters of a key (ids such as UNIQ_KEY share long prefixes, a
        producer's address, pid and time, and differ in a counter at the end), so mostly only a
        key's tail is hashed: for ASCII bytes, the last four in plain arithmetic. Other bytes are
        decoded first (a cut must not split a character)."""
        seed, heads = self._seeds(topic)
        if type(key) is bytes and not key.isascii():
            key = key.decode("utf-8", "replace")
        if len(key) <= 4:
            return _abs_hash(self._java_hash(key, seed))
        head = key[:-4]
        hseed = heads.get(head)
        if hseed is None:
            hseed = self._head_seed(heads, head, seed)
        if type(key) is bytes:  # ASCII: hseed * 31**4 + the last four code units, weighted 31**3 .. 1
            h = (hseed * 923521 + key[-4] * 29791 + key[-3] * 961 + key[-2] * 31 + key[-1]) & 0xFFFFFFFF
            return _abs_hash(h - 0x100000000 if h & 0x80000000 else h)
        return _abs_hash(self._java_hash(key[-4:], hseed))

    def query_offset(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> tuple[list[int], int, int]:
        return query_files(list(self.files), self.key_hash(f"{topic}#{key}"), max_num, begin, end)

    def flush(self) -> int:
        """Flush every index file; returns the end timestamp now safe on disk (for the checkpoint)."""
        files = list(self.files)
        for f in files:
            if f.index_count != f.flushed_count:
                f.flush()
        return files[-1].end_timestamp if files else 0

    def delete_expired(self, min_phy_offset: int) -> int:
        n = 0
        for f in self.files[:-1]:
            if f.end_phy_offset >= min_phy_offset:
                break
            n += 1
        with self._lock:
            gone, self.files = self.files[:n], self.files[n:]
        for f in gone:
            f.destroy()
        return n

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []
