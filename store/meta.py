"""LMDB side-store for broker metadata: topic configs, subscription groups, consumer and delay offsets,
consumer filter data.

One environment (``<root>/meta``) with named databases; values are JSON. Every write is one LMDB
transaction (atomic), written through at once and fsynced by the store service's rounds. Java's tables
take any string as a key; LMDB takes 1 to ``max_key_size`` bytes, so an empty or longer key (an empty
group name, a long topic@group) is stored under a digest of itself and its row's value carries it.
Consumer offsets change constantly, so like RocketMQ's ConsumerOffsetManager
they live in memory and are persisted in one transaction every ``flush_consumer_offset_interval``
and on shutdown. Unlike 4.9.8, which loses the offsets committed since its last persist when the process
dies, each change is also appended to a journal (``offsets.journal.<n>``, a mapped file: a copy into
the page cache, no system call, no fsync) that the next open replays; a persist starts a new journal and
removes the older ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb

TOPICS = "topics"
SUBSCRIPTION_GROUPS = "subscription_groups"
CONSUMER_OFFSETS = "consumer_offsets"
DELAY_OFFSETS = "delay_offsets"
CONSUMER_FILTER = "consumer_filter"  # topic -> FilterDataMapByTopic (the SQL92 groups' filter data)
DATABASES = (TOPICS, SUBSCRIPTION_GROUPS, CONSUMER_OFFSETS, DELAY_OFFSETS, CONSUMER_FILTER)
_VERSIONS = "data_versions"
_JOURNAL = "offsets.journal"  # consumer offset changes since the last persist, replayed at open
_JOURNAL_SIZE = 1 << 20
log = logging.getLogger(__name__)
_IMPORT_STATE = b"#import-state"  # in the versions database, beside the tables' data versions

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads
_journal_dumps = json.JSONEncoder(separators=(",", ":")).encode  # ASCII: keys may hold lone surrogates
#: first byte of a digest key: no UTF-8 text starts with 0xFF, so it never meets a key stored as it is
_DIGEST_KEY = b"\xff"


def _utf8(text: str) -> bytes:
    # a JSON header may carry a lone surrogate ("\ud800"): stored as it came, not refused
    return text.encode("utf-8", "surrogatepass")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


class LmdbMetaStore:
    def __init__(self, path: Path, map_size: int = 1 << 30) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        # sync=False: a commit is written to the file (it survives the process) but not fsynced, as Java
        # rewrites topics.json without an fsync; the store service syncs every persist round, off the
        # event loop, where an fsync per admin request would stall every connection
        self.env = lmdb.open(
            str(self.path), map_size=map_size, max_dbs=8, sync=False, metasync=False, lock=True
        )
        self._dbs = {name: self.env.open_db(name.encode()) for name in (*DATABASES, _VERSIONS)}
        self._max_key = self.env.max_key_size()
        self._lock = threading.Lock()
        # a persist writes outside _lock (commits must not wait for fsync); deletes wait for it, or a
        # persist that gathered an offset before its delete would write it back
        self._persist_lock = threading.Lock()
        self._offsets: dict[str, dict[int, int]] = {}
        self._dirty: set[str] = set()
        self._journal_keys: dict[str, bytes] = {}  # a key's journal entry prefix, encoded once
        for key, value in self.items(CONSUMER_OFFSETS):
            self._offsets[key] = {int(q): int(o) for q, o in value.items()}
        journals = self._journals()
        for _, path in journals:
            self._replay(path)
        self._journal_seq = journals[-1][0] + 1 if journals else 0
        self._open_journal()
        if journals:  # what the last process committed after its last persist: into LMDB now
            self.persist_offsets()

    def _db(self, db: str) -> Any:
        try:
            return self._dbs[db]
        except KeyError:
            raise KeyError(f"unknown metadata database {db!r}") from None

    def _bump(self, txn: lmdb.Transaction, db: str) -> None:
        raw = txn.get(db.encode(), db=self._dbs[_VERSIONS])
        version = _loads(raw) if raw else {"counter": 0, "timestamp": 0}
        version = {"counter": int(version["counter"]) + 1, "timestamp": int(time.time() * 1000)}
        txn.put(db.encode(), _dumps(version).encode(), db=self._dbs[_VERSIONS])

    def _key(self, key: str) -> bytes:
        raw = _utf8(key)
        if 0 < len(raw) <= self._max_key:
            return raw
        return _DIGEST_KEY + hashlib.sha256(raw).digest()

    def _row(self, key: str, value: Any) -> tuple[bytes, bytes]:
        k = self._key(key)
        return k, _utf8(_dumps([key, value] if k[:1] == _DIGEST_KEY else value))

    @staticmethod
    def _unrow(k: bytes, v: bytes) -> tuple[str, Any]:
        value = _loads(_text(v))
        if k[:1] == _DIGEST_KEY:
            return value[0], value[1]
        return _text(k), value

    def _write(self, fn: Callable[[lmdb.Transaction], Any]) -> Any:
        """Run ``fn`` in one write transaction; when the map is full, double it and retry."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)

    # -- generic --
    def get(self, db: str, key: str) -> Any | None:
        k = self._key(key)
        with self.env.begin(db=self._db(db)) as txn:
            raw = txn.get(k)
        return None if raw is None else self._unrow(k, raw)[1]

    def put(self, db: str, key: str, value: Any) -> None:
        self.put_many(db, {key: value})

    def put_many(self, db: str, items: dict[str, Any], *, replace: bool = False) -> None:
        handle = self._db(db)
        rows = [self._row(k, v) for k, v in items.items()]

        def write(txn: lmdb.Transaction) -> None:
            if replace:
                txn.drop(handle, delete=False)
            for k, v in rows:
                txn.put(k, v, db=handle)
            self._bump(txn, db)

        if db != CONSUMER_OFFSETS:
            self._write(write)
            return
        with self._persist_lock:
            with self._lock:  # journaled first: a replay must not bring older commits back over it
                if replace:
                    self._log(["*"])
                for k, v in items.items():
                    for q, o in v.items():
                        self._log([k, int(q), int(o)])
            self._write(write)
            with self._lock:
                if replace:
                    self._offsets.clear()
                for k, v in items.items():
                    self._offsets[k] = {int(q): int(o) for q, o in v.items()}
                    self._dirty.discard(k)

    def delete(self, db: str, key: str) -> bool:
        handle = self._db(db)

        def write(txn: lmdb.Transaction) -> bool:
            found = txn.delete(self._key(key), db=handle)
            if found:
                self._bump(txn, db)
            return bool(found)

        if db != CONSUMER_OFFSETS:
            return bool(self._write(write))
        with self._persist_lock:
            with self._lock:
                self._log(["-", key])
            found = self._write(write)
            with self._lock:
                self._offsets.pop(key, None)
                self._dirty.discard(key)
        return bool(found)

    def items(self, db: str) -> Iterator[tuple[str, Any]]:
        with self.env.begin(db=self._db(db)) as txn:
            rows = [self._unrow(k, v) for k, v in txn.cursor()]
        return iter(rows)

    def data_version(self, db: str) -> dict[str, int]:
        with self.env.begin(db=self._dbs[_VERSIONS]) as txn:
            raw = txn.get(db.encode())
        return _loads(raw) if raw else {"counter": 0, "timestamp": 0}

    def set_data_version(self, db: str, version: dict[str, int]) -> None:
        v = {"counter": int(version.get("counter", 0)), "timestamp": int(version.get("timestamp", 0))}
        self._write(lambda txn: txn.put(db.encode(), _dumps(v).encode(), db=self._dbs[_VERSIONS]))

    # -- consumer offsets --
    def _journals(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.path.glob(f"{_JOURNAL}.*"):
            seq = path.name[len(_JOURNAL) + 1 :]
            if seq.isdigit():
                found.append((int(seq), path))
        return sorted(found)

    def _open_journal(self, size: int = 0) -> None:
        """A new journal file of ``_JOURNAL_SIZE`` zero bytes (or ``size``, for one longer entry), mapped:
        an entry is a copy into the map (the page cache keeps it when the process dies), not a system call."""
        path = self.path / f"{_JOURNAL}.{self._journal_seq}"
        size = max(size, _JOURNAL_SIZE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            self._journal = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._journal_pos = 0

    def _log(self, entry: list[Any]) -> None:
        self._append(_journal_dumps(entry).encode() + b"\n")

    def _append(self, line: bytes) -> None:
        """Append one change to the journal (called under ``_lock``); a full journal is followed by a
        new one (both replayed until the next persist)."""
        end = self._journal_pos + len(line)
        if end > len(self._journal):  # a group name may be megabytes long: such a line gets a journal
            self._journal.close()
            self._journal_seq += 1
            self._open_journal(len(line))
            end = len(line)
        self._journal[end - len(line) : end] = line
        self._journal_pos = end

    def _replay(self, path: Path) -> None:
        """Apply a journal's changes: [key, queueId, offset], ["-", key] (deleted), ["*"] (all replaced)."""
        skipped = 0
        for line in path.read_bytes().rstrip(b"\0").splitlines():
            try:
                self._apply(_loads(line))
            except (ValueError, TypeError, IndexError, KeyError):  # cut short when the process died
                skipped += 1
        if skipped:
            log.warning("%s: %d unreadable consumer offset journal entries skipped", path, skipped)

    def _apply(self, entry: list[Any]) -> None:
        if len(entry) == 3:
            key, queue_id, offset = entry
            queue_id, offset = int(queue_id), int(offset)
            if type(key) is not str:
                raise TypeError(key)
            self._offsets.setdefault(key, {})[queue_id] = offset
            self._dirty.add(key)
        elif entry[0] == "-" and len(entry) == 2 and type(entry[1]) is str:
            self._offsets.pop(entry[1], None)
            self._dirty.discard(entry[1])
        elif entry == ["*"]:
            self._offsets.clear()
            self._dirty.clear()
        else:
            raise ValueError(entry)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}@{group}"
        with self._lock:
            table = self._offsets.setdefault(key, {})
            if table.get(queue_id) != offset:
                prefix = self._journal_keys.get(key)
                if prefix is None:  # '["topic@group",' once per key
                    prefix = self._journal_keys[key] = _journal_dumps([key])[:-1].encode() + b","
                self._append(b"%s%d,%d]\n" % (prefix, queue_id, offset))
                table[queue_id] = offset
            self._dirty.add(key)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        table = self._offsets.get(f"{topic}@{group}")
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def offset_table(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._offsets.items()}

    def remove_offsets(self, *, group: str) -> None:
        with self._lock:
            keys = [k for k in self._offsets if k.partition("@")[2] == group]
        for k in keys:
            self.delete(CONSUMER_OFFSETS, k)

    def persist_offsets(self) -> None:
        with self._persist_lock:
            with self._lock:
                dirty = {
                    k: {str(q): o for q, o in self._offsets[k].items()}
                    for k in self._dirty
                    if k in self._offsets
                }
                self._dirty.clear()
                if not dirty:
                    self.env.sync(True)
                    return
                # later changes go to a new journal; the older ones go once this write is in LMDB
                self._journal.close()
                self._journal_seq += 1
                self._open_journal()
            handle = self._dbs[CONSUMER_OFFSETS]

            def write(txn: lmdb.Transaction) -> None:
                for k, v in dirty.items():
                    txn.put(*self._row(k, v), db=handle)
                self._bump(txn, CONSUMER_OFFSETS)

            try:
                self._write(write)
            except BaseException:
                with self._lock:  # retried on the next round
                    self._dirty.update(dirty)
                raise
            self.env.sync(True)
            for seq, path in self._journals():
                if seq < self._journal_seq:
                    path.unlink(missing_ok=True)

    # -- state of a first import (config/*.json of a Java broker) --
    def import_state(self) -> str | None:
        """None (never set), "importing" (an import began and did not finish) or "ready"."""
        with self.env.begin(db=self._dbs[_VERSIONS]) as txn:
            raw = txn.get(_IMPORT_STATE)
        return None if raw is None else raw.decode()

    def set_import_state(self, state: str) -> None:
        self._write(lambda txn: txn.put(_IMPORT_STATE, state.encode(), db=self._dbs[_VERSIONS]))

    def last_write_time(self) -> float:
        """When the metadata was last committed (the data file's modification time)."""
        return (self.path / "data.mdb").stat().st_mtime

    def is_empty(self) -> bool:
        with self.env.begin() as txn:
            return all(txn.stat(self._dbs[db])["entries"] == 0 for db in DATABASES)

    # -- delay offsets --
    def set_delay_offset(self, level: int, offset: int) -> None:
        self.put(DELAY_OFFSETS, str(level), offset)

    def delay_offsets(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.items(DELAY_OFFSETS)}

    def close(self) -> None:
        if self.env is not None:
            self.persist_offsets()
            self.env.sync(True)
            self._journal.close()
            for _, path in self._journals():  # (all in LMDB now)
                path.unlink(missing_ok=True)
            self.env.close()
            self.env = None  # type: ignore[assignment]
