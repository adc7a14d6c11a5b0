"""DefaultMessageStore: the store's face to the broker - lifecycle, reads (getMessage with its batch
limits), queries by key, time and offset, and upkeep. The put path (appends and their dispatch to
ConsumeQueues and index, reput) is in put_message, a base class of it; the CommitLog itself, the
flush services, recovery and expiry cleanup live in commit_log, flush, recovery and clean.

One lock serialises appends and their dispatch to the ConsumeQueue (RocketMQ's reput, done inline so
a message is readable when ``put_message`` returns). With the services running the IndexFile is built
by a dispatcher process following the CommitLog (``index_dispatch``); without, inline too. A flush
thread fsyncs the CommitLog (interval or group commit); a service thread flushes
ConsumeQueues/index/checkpoint, persists consumer offsets and deletes expired segments. Records are
copied into the mmap with their TOTALSIZE written last, so a process killed mid-copy leaves nothing
that recovery could take for a record. Under SYNC_FLUSH they are staged in a write buffer instead
and dispatched once its group commit has written them to the segment (see ``flush.FlushCommitLogService``).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Collection, Container
from pathlib import Path
from typing import Any

from rmqgate.store.api import (
    SCHEDULE_TOPIC,
    ArrivalListener,
    GetMessageStatus,
    GetResult,
    PropertiesFilter,
    QueryResult,
    StoreConfig,
    TagsFilter,
    parse_delay_levels,
)
from rmqgate.store.checkpoint import StoreCheckpoint
from rmqgate.store.clean import CleanService, disk_used_percent
from rmqgate.store.commit_log import NOT_WARMING, CommitLog, CommitLogWarmer
from rmqgate.store.config_io import import_config
from rmqgate.store.consume_queue import BLANK_SIZE, ConsumeQueue
from rmqgate.store.flush import WRITE_BUFFER_SIZE, FlushCommitLogService, StoreServiceThread
from rmqgate.store.index_dispatch import PROGRESS_FILE, DispatcherArgs, DispatchProgress, IndexDispatchProcess
from rmqgate.store.index_file import IndexReader, IndexService
from rmqgate.store.layout import CQ_UNIT, CQ_UNIT_SIZE
from rmqgate.store.meta import LmdbMetaStore
from rmqgate.store.put_message import RECORD_ALLOWANCE, DispatchEntry, PutMessageMixin
from rmqgate.store.recovery import RecoveryLoss, load_and_recover
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.message import MessageExt, decode_message, java_string_hash, record_properties
from rmqgate.wire.message_const import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, MessageSysFlag

_log = logging.getLogger(__name__)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text("ascii").strip()
    except OSError:
        return ""  # unknown: every crash is treated as a possible power loss


_BOOT_ID = _boot_id()


class DefaultMessageStore(PutMessageMixin):
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.root = Path(config.store_path_root_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise RuntimeError(f"store {self.root} is locked by another process") from None
        self.abort_file = self.root / "abort"
        self.last_exit_ok = not self.abort_file.exists()
        # The abort file (only its existence matters to RocketMQ) holds the kernel boot id: a crash
        # within the same boot lost no page-cache writes, so mapped index files can be trusted.
        self.same_boot = (
            not self.last_exit_ok
            and bool(_BOOT_ID)
            and self.abort_file.read_text("ascii", "replace").strip() == _BOOT_ID
        )
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        # (DefaultMessageStore's ensureDirOK: both exist from the start, so their disk ratios read)
        self.commitlog_dir = config.commitlog_dir
        self.consume_queue_dir = self.root / "consumequeue"
        self.commitlog_dir.mkdir(parents=True, exist_ok=True)
        self.consume_queue_dir.mkdir(exist_ok=True)
        self.commitlog = CommitLog(self.commitlog_dir, config.mapped_file_size_commitlog)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = IndexService(
            self.root / "index", config.max_hash_slot_num, config.max_index_num, java_string_hash
        )
        self.meta = LmdbMetaStore(self.root / "meta", config.meta_map_size)
        try:
            self._take_over_java_config()
        except BaseException:  # e.g. config files neither readable nor backed up: tried again next open
            self.meta.close()
            self.commitlog.queue.close()
            self.index.close()
            self.checkpoint.close()
            os.close(self._lock_fd)
            raise
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.max_delay_level = max(self.delay_levels)
        try:
            addr = ipaddress.ip_address(config.store_host)
        except ValueError:  # a host name: the address it resolves to goes into records and ids
            addr = ipaddress.ip_address(socket.gethostbyname(config.store_host))
        self._store_host = addr.packed
        # offsetMsgId = hex(store host, port) + 16 hex digits of the CommitLog offset (the broker
        # may set config.store_port once it listens, so the prefix is keyed by the port)
        self._msg_id_prefix = (-1, b"")
        self._store_v6_flag = MessageSysFlag.STOREHOST_V6 if addr.version == 6 else 0
        self._put_lock = threading.Lock()
        self._listeners: list[tuple[ArrivalListener, Container[tuple[str, int]] | None]] = []
        self._valid_topics: set[str] = set()
        self._logics_error = False  # a dispatch failed: refuse writes (RocketMQ's makeLogicsQueueError)
        self._disk_full = False  # disk over DISK_WARNING_RATIO: refuse writes until cleanup frees space
        self._cleaner = CleanService(self)
        self._slave = config.slave  # (both read once: the role is fixed when the store opens)
        self._correct_offsets = config.corrects_pull_offsets
        self._last_store_ts = 0
        self._shutdown = True
        self._physical_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.recovered_from = 0  # where the last recovery re-dispatched from (observable for tests)
        self.recovery_loss: RecoveryLoss | None = None  # what the last recovery cut (logged too)
        self._put_times_base = self._put_size_base = 0  # put_totals() counts from these
        self._queue_base: dict[tuple[str, int], int] = {}  # and topic_put_totals() from this
        # the index: built inline (self.index), or by a dispatcher process read through self._index_reader
        self._index_inline = config.message_index_enable
        self._index_process: IndexDispatchProcess | None = None
        self._index_reader: IndexReader | None = None
        self._index_writer_lock: DispatchProgress | None = None
        self._committed_slot: tuple[Any, Any, int] | None = None  # (pack_into, page, position)
        # SYNC_FLUSH stages appends in a write buffer (see FlushCommitLogService); staged records wait here
        # for their dispatch (None: dispatched as they are appended)
        self._undispatched: list[DispatchEntry] | None = None
        self._flush_service: FlushCommitLogService | None = None
        self._service: StoreServiceThread | None = None
        self._warmer: CommitLogWarmer | None = None
        self._warm_busy_from = NOT_WARMING  # CommitLog offset the warmer is zeroing from
        self._warm_wake_at = NOT_WARMING  # an append ending past this CommitLog offset wakes the warmer
        self._warm_done = threading.Event()
        self._warm_done.set()

    def _take_over_java_config(self) -> None:
        """A store directory a Java broker wrote: its topics, groups and offsets (``config/*.json``)
        become the metadata on the first open, and again after an import that did not finish (the
        import state is kept in the metadata). Later the metadata is what counts; config files a
        Java broker wrote since are reported, for ``rmqgate store import-config``."""
        meta, config_dir = self.meta, self.root / "config"
        state = meta.import_state()
        if state is None and not meta.is_empty():
            state = "ready"  # metadata from before the import state was kept
            meta.set_import_state(state)
        if state != "ready" and config_dir.is_dir():
            meta.set_import_state("importing")
            import_config(meta, config_dir)
        if state != "ready":
            meta.set_import_state("ready")
            return
        written = meta.last_write_time()
        newer = [p.name for p in sorted(config_dir.glob("*.json")) if p.stat().st_mtime > written + 1]
        if newer:
            _log.warning(
                "%s: %s changed after this store's metadata (a Java broker ran here?); the metadata "
                "is used: run `rmqgate store import-config %s --store %s` to take them over",
                config_dir, ", ".join(newer), config_dir, self.root,
            )  # fmt: skip

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, config: StoreConfig, *, start_services: bool = True) -> DefaultMessageStore:
        store = cls(config)
        in_process = start_services and config.message_index_enable and config.index_dispatch_process
        store._index_inline = config.message_index_enable and not in_process
        try:
            if store._index_inline:
                store._take_index_writer_lock()
            load_and_recover(store)
        except BaseException:
            store._close_files()
            os.close(store._lock_fd)
            raise
        store.abort_file.write_text(_BOOT_ID, "ascii")
        _fsync_dir(store.root)
        store._queue_base = dict(store.topic_queue_table)
        store._put_times_base = sum(store.topic_queue_table.values())
        store._put_size_base = store.commitlog.get_max_offset()
        store._shutdown = False
        if start_services:
            store._flush_service = FlushCommitLogService(store)
            if store._flush_service.sync:
                store.commitlog.queue.use_write_buffer(
                    max(WRITE_BUFFER_SIZE, config.max_message_size + RECORD_ALLOWANCE)
                )
                store._undispatched = []
            store._flush_service.start()
            store._service = StoreServiceThread(store)
            store._service.start()
            if config.commitlog_warm_ahead > 0:
                store._warmer = CommitLogWarmer(store)
                store._warm_wake_at = 0
                store._warmer.start()
        if in_process:
            store._start_index_process()
        return store

    def _take_index_writer_lock(self) -> None:
        """Inline indexing: make a dispatcher left by an earlier open of this store quit, and wait."""
        progress = DispatchProgress(self.root / PROGRESS_FILE)
        progress.set("generation", time.time_ns())
        if not progress.lock(time.monotonic() + 30):
            progress.close()
            raise RuntimeError(f"the index of {self.root} is being written by another process")
        self._index_writer_lock = progress

    def _start_index_process(self) -> None:
        cfg = self.config
        args = DispatcherArgs(
            root=str(self.root),
            commitlog_dir=str(self.commitlog_dir),
            hash_slot_num=cfg.max_hash_slot_num,
            index_num=cfg.max_index_num,
            commitlog_file_size=cfg.mapped_file_size_commitlog,
            trusted=self.last_exit_ok or self.same_boot,
            checkpoint_index_ts=self.checkpoint.index_msg_timestamp,
            generation=time.time_ns(),
            parent_pid=os.getpid(),
            flush_interval_ms=cfg.flush_consume_queue_thorough_interval,
        )
        proc = IndexDispatchProcess(args)
        proc.start(self.commitlog.get_max_offset(), self.commitlog.get_min_offset())
        pack, pos = proc.progress.slot("committed_offset")
        self._committed_slot = (pack, proc.progress.mm, pos)
        self._index_reader = IndexReader(self.root / "index", cfg.max_hash_slot_num, cfg.max_index_num)
        self._index_process = proc

    def shutdown(self) -> None:
        if self._shutdown:
            return
        with self._put_lock:
            self._shutdown = True
        if self._service is not None:
            self._service.stop()
        if self._warmer is not None:
            self._warmer.stop()
        if self._flush_service is not None:
            self._flush_service.stop()
        ts = self._last_store_ts
        if self._undispatched is not None:
            self._commit_staged()
        self.commitlog.queue.flush()
        index_ts: int | None = ts
        if self._index_process is not None:
            index_ts = self._index_process.stop()  # it indexes what is committed, flushes, exits
            self._index_process = None
            self._committed_slot = None
        for cq in self.consume_queues.values():
            cq.flush(0)
        if self._index_inline:
            self.index.flush()
        if ts:
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp, ts)
            self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp, ts)
        if index_ts:
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, index_ts)
        self.checkpoint.flush()
        self._close_files()
        if not self._logics_error:  # else the next start recovers as after a crash: re-dispatches
            self.abort_file.unlink(missing_ok=True)
        _fsync_dir(self.root)
        os.close(self._lock_fd)

    def _close_files(self) -> None:
        self.meta.close()
        self.commitlog.queue.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.index.close()
        if self._index_reader is not None:
            self._index_reader.close()
        if self._index_writer_lock is not None:
            self._index_writer_lock.close()
            self._index_writer_lock = None
        self.checkpoint.close()

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(
                topic, queue_id, self.root / "consumequeue", self.config.mapped_file_size_consume_queue
            )
            self.consume_queues[(topic, queue_id)] = cq
        return cq

    # ------------------------------------------------------------------ read path
    def _is_in_disk(self, phys: int, max_phy: int) -> bool:
        return max_phy - phys > self._physical_memory * self.config.access_message_in_memory_max_ratio // 100

    def _batch_full(self, size: int, max_msgs: int, total: int, count: int, in_disk: bool) -> bool:
        if total == 0 or count == 0:
            return False
        if count >= max_msgs:
            return True
        cfg = self.config
        if in_disk:
            return (
                total + size > cfg.max_transfer_bytes_on_message_in_disk
                or count > cfg.max_transfer_count_on_message_in_disk - 1
            )
        return (
            total + size > cfg.max_transfer_bytes_on_message_in_memory
            or count > cfg.max_transfer_count_on_message_in_memory - 1
        )

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        *,
        max_bytes: int | None = None,
        tags_filter: TagsFilter = None,
        properties_filter: PropertiesFilter = None,
    ) -> GetResult:
        S = GetMessageStatus
        fix = self._correct_offsets  # else each next offset below is the pull's own (a slave's)
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            # RocketMQ's findConsumeQueue creates an empty queue on demand, so a pull on a queue that
            # never got a message answers NO_MESSAGE_IN_QUEUE (none is created here for it)
            return GetResult(S.NO_MESSAGE_IN_QUEUE, 0 if fix else offset, 0, 0)
        min_off = cq.get_min_offset_in_queue()
        max_off = cq.get_max_offset_in_queue()
        if max_off == 0:
            return GetResult(S.NO_MESSAGE_IN_QUEUE, 0 if fix else offset, min_off, max_off)
        if offset < min_off:
            return GetResult(S.OFFSET_TOO_SMALL, min_off if fix else offset, min_off, max_off)
        if offset == max_off:
            return GetResult(S.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            # to the max offset whatever the min (4.9.4+; before, to 0 while the min was 0): what the
            # stock 4.9.8 broker answered in the corpus (h_PullByOffset, queueOffset=110 -> 10)
            return GetResult(S.OFFSET_OVERFLOW_BADLY, max_off if fix else offset, min_off, max_off)
        units = cq.get_index_buffer(offset)
        if units is None:
            return GetResult(
                S.OFFSET_FOUND_NULL, cq.roll_next_file(offset) if fix else offset, min_off, max_off
            )
        if tags_filter is None:
            match = None
        elif callable(tags_filter):
            match = tags_filter
        else:
            match = tags_filter.__contains__
        result = GetResult(S.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        buffers = result.buffers
        qoffs = result.queue_offsets
        total = 0
        max_phy = self.commitlog.get_max_offset()
        next_file_start = -1
        limit = min(len(units), max(16000, max_msgs * CQ_UNIT_SIZE))
        limit -= limit % CQ_UNIT_SIZE
        i = 0
        max_pulling = 0
        status = S.NO_MATCHED_MESSAGE
        commitlog = self.commitlog
        for phys, size, tcode in CQ_UNIT.iter_unpack(units[:limit]):
            if size == BLANK_SIZE:
                i += CQ_UNIT_SIZE
                continue
            max_pulling = phys
            if next_file_start >= 0 and phys < next_file_start:
                i += CQ_UNIT_SIZE
                continue
            if self._batch_full(size, max_msgs, total, len(buffers), self._is_in_disk(phys, max_phy)):
                break
            if max_bytes is not None and buffers and total + size > max_bytes:
                break
            i += CQ_UNIT_SIZE
            if match is not None and not match(tcode):
                continue
            rec = commitlog.get_data(phys, size)
            if rec is None:
                if total == 0:
                    status = S.MESSAGE_WAS_REMOVING
                next_file_start = commitlog.roll_next_file(phys)
                continue
            if properties_filter is not None:
                try:  # an unreadable record matches no property filter
                    matched = properties_filter(record_properties(rec))
                except MessageFormatError:
                    matched = False
                if not matched:
                    if total == 0:
                        status = S.NO_MATCHED_MESSAGE
                    continue
            buffers.append(rec)
            qoffs.append(offset + (i // CQ_UNIT_SIZE) - 1)
            total += size
            status = S.FOUND
            next_file_start = -1
        result.status = status
        result.next_begin_offset = offset + i // CQ_UNIT_SIZE
        result.buffer_total_size = total
        result.suggest_pulling_from_slave = self._is_in_disk(max_pulling, max_phy) if max_pulling else False
        return result

    def get_consume_queue_units(
        self, topic: str, queue_id: int, offset: int, max_units: int
    ) -> list[tuple[int, int, int]]:
        """Raw ConsumeQueue units (commitlog offset, size, tagsCode) from ``offset`` within one CQ file
        (the delay service compares SCHEDULE_TOPIC tagsCodes, i.e. deliver times, without reading records)."""
        cq = self.consume_queues.get((topic, queue_id))
        units = cq.get_index_buffer(offset) if cq else None
        if units is None:
            return []
        return list(CQ_UNIT.iter_unpack(units[: max_units * CQ_UNIT_SIZE]))

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        return cq.get_min_offset_in_queue() if cq else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        return cq.get_max_offset_in_queue() if cq else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq else None
        return unit[0] if unit else 0

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """``checkInDiskByConsumeOffset``: the message at ``offset`` lies further behind the CommitLog's
        end than accessMessageInMemoryMaxRatio of physical memory (False when there is none)."""
        cq = self.consume_queues.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq else None
        return unit is not None and self._is_in_disk(unit[0], self.commitlog.get_max_offset())

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp, self.commitlog.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq else None
        return self.commitlog.pickup_store_timestamp(unit[0], unit[1]) if unit else -1

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def get_min_phy_offset(self) -> int:
        """``getMinPhyOffset``: the first segment's start; -1 while the CommitLog has no segment."""
        return self.commitlog.get_min_offset() if self.commitlog.queue.files else -1

    def get_max_phy_offset(self) -> int:
        return self.commitlog.get_max_offset()

    def select_one_message_by_offset(self, commit_log_offset: int) -> memoryview | None:
        if commit_log_offset < self.commitlog.get_min_offset():
            return None
        return self.commitlog.record_at(commit_log_offset)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        rec = self.select_one_message_by_offset(commit_log_offset)
        if rec is None:
            return None
        try:
            return decode_message(rec, 0)
        except MessageFormatError:
            return None

    def query_message(
        self, topic: str, key: str, max_num: int, begin_timestamp: int = 0, end_timestamp: int = 1 << 62
    ) -> QueryResult:
        max_num = min(max_num, self.config.max_msgs_num_batch)
        proc, reader = self._index_process, self._index_reader
        if proc is not None and reader is not None:
            if not proc.wait_indexed(self.config.index_query_wait / 1000):
                _log.warning(
                    "index dispatch is %d bytes behind; the query may miss recent messages", proc.behind()
                )
            phys, last_ts, last_phy = reader.query_offset(topic, key, max_num, begin_timestamp, end_timestamp)
        else:
            phys, last_ts, last_phy = self.index.query_offset(
                topic, key, max_num, begin_timestamp, end_timestamp
            )
        if not phys:  # (queryMessage sets the index fields only once it found offsets)
            return QueryResult()
        result = QueryResult(index_last_update_timestamp=last_ts, index_last_update_phyoffset=last_phy)
        for p in sorted(phys):  # oldest first, as queryMessage sorts them
            rec = self.select_one_message_by_offset(p)
            if rec is None:
                continue
            try:
                m = decode_message(rec, 0, with_body=False)
            except MessageFormatError:
                continue
            # the index is a hash table: drop collisions
            if m.topic == topic and (
                m.properties.get(PROPERTY_UNIQ_KEY) == key
                or key in (m.properties.get(PROPERTY_KEYS) or "").split(" ")
            ):
                result.buffers.append(rec)
        return result

    def topics(self) -> set[str]:
        return {t for t, _ in self.consume_queues}

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.consume_queues if t == topic)

    # ------------------------------------------------------------------ misc
    def register_arrival_listener(
        self, listener: ArrivalListener, watched: Container[tuple[str, int]] | None = None
    ) -> None:
        """``listener(DispatchRequest)`` after each put, in the putting thread. With ``watched`` (a live
        view, such as a table of parked pulls) only for puts to a (topic, queueId) key it holds at that
        moment: a put nobody waits for builds no DispatchRequest."""
        self._listeners = [*self._listeners, (listener, watched)]

    def delete_topics(self, topics: Collection[str]) -> int:
        """Destroy the topics' ConsumeQueues (``cleanUnusedTopic``); the number destroyed. Consumer
        offsets stay, as in Java: a recreated topic's consumers find theirs, corrected at the pull."""
        with self._put_lock:
            n = self._destroy_queues([k for k in self.consume_queues if k[0] in topics])
            for t in topics:
                shutil.rmtree(self.root / "consumequeue" / t, ignore_errors=True)
        return n

    def clean_expired_consume_queues(self) -> int:
        """``cleanExpiredConsumerQueue``: destroy each ConsumeQueue (not SCHEDULE_TOPIC_XXXX's) whose
        last unit points below the CommitLog's min offset; the number destroyed. As in Java, such a
        queue's next message starts again at offset 0, and consumer offsets stay."""
        with self._put_lock:
            min_phy = self.commitlog.get_min_offset()
            expired = [
                key
                for key, cq in self.consume_queues.items()
                if key[0] != SCHEDULE_TOPIC and 0 <= cq.max_physic_offset < min_phy
            ]
            n = self._destroy_queues(expired)
            for topic, queue_id in expired:
                shutil.rmtree(self.root / "consumequeue" / topic / str(queue_id), ignore_errors=True)
                with contextlib.suppress(OSError):  # the topic's last queue: its directory goes too
                    (self.root / "consumequeue" / topic).rmdir()
        return n

    def _destroy_queues(self, keys: list[tuple[str, int]]) -> int:
        for key in keys:  # (under the put lock)
            self.consume_queues.pop(key).destroy()
            self._put_times_base -= self.topic_queue_table.pop(key, 0)
            self._queue_base.pop(key, None)
        return len(keys)

    def flush_logics(self, thorough: bool = True) -> None:
        """Flush ConsumeQueues (those with ``flush_consume_queue_least_pages`` dirty, or all when
        ``thorough``), on a thorough round also the index files, advancing the checkpoint's logics and
        index timestamps (``FlushConsumeQueueService``); the checkpoint file is flushed every round."""
        ts = self._last_store_ts
        least = 0 if thorough else self.config.flush_consume_queue_least_pages
        for cq in list(self.consume_queues.values()):
            cq.flush(least)
        proc = self._index_process
        if proc is not None:
            proc.ensure_running()
        if thorough:
            if ts:
                self.checkpoint.logics_msg_timestamp = ts
            if proc is not None:
                index_ts = proc.request_flush()  # the dispatcher's last flush; this asks for the next
            else:
                self.index.flush()
                index_ts = ts
            if index_ts:
                self.checkpoint.index_msg_timestamp = index_ts
        self.checkpoint.flush()

    def clean_expired_files(self, *, force: bool = False, now_ms: int | None = None) -> int:
        """Expired CommitLog segments, then ConsumeQueue/index files, deleted (``clean.CleanService``)."""
        return self._cleaner.clean_expired_files(force=force, now_ms=now_ms)

    def put_totals(self) -> tuple[int, int]:
        """(messages, bytes) appended since the store opened, as StoreStatsService's
        putMessageTimesTotal / putMessageSizeTotal: read off the queue offsets and the CommitLog end,
        so that the put path counts nothing. Messages outside every ConsumeQueue (prepared and
        rolled-back transaction records) are not in the number."""
        with self._put_lock:
            n = sum(self.topic_queue_table.values()) - self._put_times_base
            size = self.commitlog.get_max_offset() - self._put_size_base
        return n, size

    def topic_put_totals(self) -> dict[str, int]:
        """Messages appended per topic since the store opened (topics with none are left out)."""
        with self._put_lock:
            offsets = list(self.topic_queue_table.items())
        base = self._queue_base
        out: dict[str, int] = {}
        for key, offset in offsets:
            n = offset - base.get(key, 0)
            if n:
                out[key[0]] = out.get(key[0], 0) + n
        return out

    def runtime_info(self) -> dict[str, str]:
        cl = self.commitlog
        cq_ratio = str(disk_used_percent(self.consume_queue_dir) / 100)
        if self.config.store_path_commit_log:  # (else commitlog/ is on consumequeue/'s partition)
            cl_ratio = str(disk_used_percent(self.commitlog_dir) / 100)
        else:
            cl_ratio = cq_ratio
        return {
            "commitLogMinOffset": str(self.get_min_phy_offset()),
            "commitLogMaxOffset": str(cl.get_max_offset()),
            "commitLogDiskRatio": cl_ratio,
            "consumeQueueDiskRatio": cq_ratio,
            "dispatchBehindBytes": str(self._index_process.behind() if self._index_process else 0),
            "putMessageEntireTimeMax": "0",
            "earliestMessageTimeStamp": str(cl.earliest_store_timestamp()),
        }


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
