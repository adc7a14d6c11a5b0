"""DefaultMessageStore: the store's face to the broker - CommitLog appends and their dispatch to
ConsumeQueues and index, reads, queries, lifecycle. The CommitLog itself, the flush services,
recovery and expiry cleanup live in commit_log, flush, recovery and clean.

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
from collections.abc import Collection, Container, Sequence
from pathlib import Path
from typing import Any

from rmqgate.store.api import (
    SCHEDULE_TOPIC,
    ArrivalListener,
    DispatchRequest,
    GetMessageStatus,
    GetResult,
    PropertiesFilter,
    PutMessageStatus,
    PutResult,
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
from rmqgate.store.mapped_file import MappedFile
from rmqgate.store.meta import LmdbMetaStore
from rmqgate.store.recovery import RecoveryLoss, load_and_recover
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.header import parse_java_int
from rmqgate.wire.message import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_TOPIC_BYTES,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RECORD_PREFIX,
    MessageExt,
    MessageSysFlag,
    decode_message,
    encode_blank,
    encode_message,
    encode_message_into,
    encode_offset_msg_id,
    java_string_hash,
    patch_record,
    record_properties,
    tags_code,
)

_TX_PREPARED = MessageSysFlag.TRANSACTION_PREPARED
_TX_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK
_STOREHOST_V6 = MessageSysFlag.STOREHOST_V6
# PREPARED (0x4) and ROLLBACK (0xC) share this bit, COMMIT (0x8) and NOT_TYPE (0) lack it: messages
# with it get no ConsumeQueue unit and no queue offset (RocketMQ's CommitLog/reput rule)
_TX_NOT_COUNTED = _TX_PREPARED & _TX_ROLLBACK
_PUT_OK = PutMessageStatus.PUT_OK
# maxMessageSize bounds the body; the whole record may be this much larger (4.9.8's MessageExtEncoder)
_RECORD_ALLOWANCE = 64 * 1024
_new_put_result = tuple.__new__
_time_ns = time.time_ns
_unpack_prefix = RECORD_PREFIX.unpack_from
_log = logging.getLogger(__name__)
# DispatchRequest's fields as a plain tuple: what a put hands to dispatch (and listeners get built from)
_Dispatch = tuple[str, int, int, int, int, int, int, str | None, str | None, int, int]


def _dispatch_entry(msg: MessageExt, phys: int, size: int, tcode: int, store_ts: int) -> _Dispatch:
    """The dispatch of ``msg``, just stored at ``phys`` (its topic, queue and queue offset final)."""
    props = msg.properties
    return (
        msg.topic,
        msg.queue_id,
        phys,
        size,
        tcode,
        store_ts,
        msg.queue_offset,
        props.get(PROPERTY_KEYS),
        props.get(PROPERTY_UNIQ_KEY),
        msg.sys_flag,
        msg.prepared_transaction_offset,
    )


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text("ascii").strip()
    except OSError:
        return ""  # unknown: every crash is treated as a possible power loss


_BOOT_ID = _boot_id()


def _now_ms() -> int:
    return _time_ns() // 1_000_000  # (put_message inlines this; tests set _time_ns)


class DefaultMessageStore:
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
        self._store_v6_flag = _STOREHOST_V6 if addr.version == 6 else 0
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
        self._undispatched: list[_Dispatch] | None = None
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
                    max(WRITE_BUFFER_SIZE, config.max_message_size + _RECORD_ALLOWANCE)
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

    # ------------------------------------------------------------------ recovery
    def reput(self, start: int, end: int) -> None:
        """Dispatch CommitLog records in [start, end) to ConsumeQueues and the index (idempotent)."""
        pos = max(start, self.commitlog.get_min_offset())
        q = self.commitlog.queue
        while pos < end:
            f = q.find_mapped_file_by_offset(pos)
            if f is None:  # a missing segment: on with the next one there is
                f = next((g for g in q.files if g.file_from_offset > pos), None)
                if f is None:
                    break
                pos = f.file_from_offset
            rel = pos - f.file_from_offset
            total, magic = _unpack_prefix(f.buf, rel)
            if magic == BLANK_MAGIC:
                pos = f.end_offset
                continue
            try:
                msg = decode_message(f.buf, rel, with_body=False)
            except MessageFormatError:  # cannot happen below a validated end; don't loop on it
                _log.error("reput stopped at undecodable record @%d", pos)
                break
            ts = msg.store_timestamp
            entry = _dispatch_entry(msg, pos, total, self._tags_code(msg.topic, msg.properties, ts), ts)
            self._dispatch_entries((entry,), pos + total)
            if not msg.sys_flag & _TX_NOT_COUNTED:  # (a slave's replicated records count as puts)
                self.topic_queue_table[(msg.topic, msg.queue_id)] = msg.queue_offset + 1
            self._last_store_ts = msg.store_timestamp
            pos += total

    # ------------------------------------------------------------------ write path
    def _tags_code(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            level = props.get(PROPERTY_DELAY_TIME_LEVEL)
            if level:
                delay = self.delay_levels.get(int(level))
                return store_ts + (delay if delay is not None else 1000)
        return tags_code(props.get(PROPERTY_TAGS))

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(
                topic, queue_id, self.root / "consumequeue", self.config.mapped_file_size_consume_queue
            )
            self.consume_queues[(topic, queue_id)] = cq
        return cq

    def _check_topic(self, topic: str) -> bool:
        """A topic names a ConsumeQueue directory. Topics over 127 bytes are stored as v2 records
        (MAGIC_V2, 2-byte topic length) that 4.9 clients cannot decode; the broker's topic
        validation keeps client topics within 127 bytes."""
        raw = topic.encode("utf-8", "surrogatepass")
        if (
            not 0 < len(raw) <= min(MAX_TOPIC_BYTES, 255)
            or "/" in topic
            or "\0" in topic
            or topic in (".", "..")
        ):
            return False
        self._valid_topics.add(topic)
        return True

    def _prepare(self, msg: MessageExt) -> PutMessageStatus | None:
        """Checks and rewrites before encoding a batch's messages (``CommitLog.putMessages`` /
        ``checkStoreStatus``); unlike a single put, a batch schedules no DELAY levels."""
        if self._shutdown or self._logics_error or self._disk_full or self._slave:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if msg.topic not in self._valid_topics and not self._check_topic(msg.topic):
            return PutMessageStatus.MESSAGE_ILLEGAL
        msg.store_host = self._store_host
        msg.store_port = self.config.store_port
        msg.sys_flag = (msg.sys_flag & ~_STOREHOST_V6) | self._store_v6_flag
        return None

    def _apply_delay_level(self, msg: MessageExt) -> None:
        """A DELAY level > 0 turns the message into one for SCHEDULE_TOPIC_XXXX queue level-1, the
        real topic and queue kept in properties."""
        props = msg.properties
        if msg.topic == SCHEDULE_TOPIC:
            return
        text = props[PROPERTY_DELAY_TIME_LEVEL]
        try:
            level = parse_java_int(text)  # Message.getDelayTimeLevel
        except ValueError as exc:  # Java's NumberFormatException: SYSTEM_ERROR, nothing stored
            raise MessageFormatError(f"property DELAY={text!r} {exc}") from None
        if level > 0:
            lvl = min(level, self.max_delay_level)
            props[PROPERTY_DELAY_TIME_LEVEL] = str(lvl)
            props[PROPERTY_REAL_TOPIC] = msg.topic
            props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
            msg.properties_raw = None
            msg.topic = SCHEDULE_TOPIC
            msg.queue_id = lvl - 1

    def _encode(self, msg: MessageExt) -> bytearray | PutMessageStatus:
        try:
            rec = encode_message(msg)
        except MessageFormatError as exc:
            if "properties" in str(exc):
                return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            return PutMessageStatus.MESSAGE_ILLEGAL
        if (
            len(rec) > self.config.max_message_size + _RECORD_ALLOWANCE
            or len(msg.body) > self.config.max_message_size
        ):
            return PutMessageStatus.MESSAGE_ILLEGAL
        return rec

    def _writable_file(self, need: int) -> MappedFile:
        self._warm_done.wait()  # the BLANK record may fall into the chunk being zeroed
        q = self.commitlog.queue
        f = q.get_last_mapped_file(0)
        assert f is not None
        if need + END_FILE_MIN_BLANK_LENGTH > f.file_size - f.wrote_position:
            f.append_last(encode_blank(f.file_size - f.wrote_position))
            f = q.get_last_mapped_file()
            assert f is not None
            if need + END_FILE_MIN_BLANK_LENGTH > f.file_size:
                raise ValueError("record larger than a CommitLog segment")
        return f

    def _dispatch_failed(self) -> PutResult:
        # the record is in the CommitLog; a restart re-dispatches it. Until then refuse writes so
        # queue offsets and ConsumeQueues cannot drift apart.
        _log.exception("dispatch to ConsumeQueue/index failed; store is read-only")
        self._logics_error = True
        return PutResult(PutMessageStatus.UNKNOWN_ERROR)

    def put_message(self, msg: MessageExt, *, schedule_delay: bool = True) -> PutResult:
        """Append one message (the hot path of ``put_messages`` for a batch of one): the record is
        encoded straight into the mapped segment (TOTALSIZE last) and dispatched inline.

        ``schedule_delay=False`` stores a DELAY property without scheduling it: 4.9.8's
        ``messageTimeup`` writes the properties string, DELAY in it, before it clears DELAY from
        the map CommitLog reads, so a delivered delayed message shows its level."""
        if self._shutdown or self._logics_error or self._disk_full or self._slave:
            return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        topic = msg.topic
        props = msg.properties
        counted = not msg.sys_flag & _TX_NOT_COUNTED
        if topic not in self._valid_topics or (counted and PROPERTY_DELAY_TIME_LEVEL in props):
            if not self._check_topic(topic):
                return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
            if counted and schedule_delay and PROPERTY_DELAY_TIME_LEVEL in props:
                self._apply_delay_level(msg)
                topic = msg.topic
        if len(msg.body) > self.config.max_message_size:
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        msg.store_host = self._store_host
        port = msg.store_port = self.config.store_port
        sys_flag = msg.sys_flag = (msg.sys_flag & ~_STOREHOST_V6) | self._store_v6_flag
        queue_id = msg.queue_id
        key = (topic, queue_id)
        lock = self._put_lock
        lock.acquire()  # (not ``with``: half the cost on this path)
        try:
            if self._shutdown:
                return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
            store_ts = _time_ns() // 1_000_000
            qoff = self.topic_queue_table.get(key, 0) if counted else 0
            msg.queue_offset = qoff
            msg.store_timestamp = store_ts
            files = self.commitlog.queue.files
            try:
                f = files[-1] if files else self._writable_file(0)
                at = f.wrote_position
                base = f.file_from_offset
                msg.commit_log_offset = phys = base + at
                # not over the size limit, room for the BLANK record, not into the chunk being warmed
                limit = at + self.config.max_message_size + _RECORD_ALLOWANCE
                if f.file_size - END_FILE_MIN_BLANK_LENGTH < limit:
                    limit = f.file_size - END_FILE_MIN_BLANK_LENGTH
                warm = self._warm_busy_from - base  # read once: the warmer resets it outside the lock
                if warm < limit:
                    limit = warm
                wb = f.write_buffer
                if wb is None:
                    n = encode_message_into(msg, f.buf, at, limit)
                else:
                    staged = f.committed_position
                    limit -= staged
                    n = encode_message_into(msg, wb, at - staged, limit if limit < len(wb) else len(wb))
                if n < 0:
                    f, n = self._encode_past_limit(msg, f, -n)
                    phys = msg.commit_log_offset
            except MessageFormatError as exc:  # (a ValueError)
                if "properties" in str(exc):
                    return PutResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
                return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
            except (OSError, ValueError):
                return PutResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
            if n < 0:
                return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
            f.wrote_position = phys + n - f.file_from_offset
            self._last_store_ts = store_ts
            tags = props.get(PROPERTY_TAGS)
            tcode = tags_code(tags) if tags else 0
            if topic == SCHEDULE_TOPIC:
                tcode = self._tags_code(topic, props, store_ts)
            if counted:
                self.topic_queue_table[key] = qoff + 1
            undispatched = self._undispatched
            if undispatched is not None:  # staged: dispatched once committed (_commit_staged)
                undispatched.append(_dispatch_entry(msg, phys, n, tcode, store_ts))
            else:
                cs = self._committed_slot
                if cs is not None:
                    cs[0](cs[1], cs[2], phys + n)
                try:
                    if counted:
                        (self.consume_queues.get(key) or self.find_consume_queue(topic, queue_id)).put(
                            phys, n, tcode, qoff
                        )
                    if self._index_inline:
                        keys = props.get(PROPERTY_KEYS)
                        uniq = props.get(PROPERTY_UNIQ_KEY)
                        if keys or uniq:
                            self.index.build_index(topic, keys, uniq, phys, store_ts, sys_flag)
                except OSError:
                    return self._dispatch_failed()
        finally:
            lock.release()
        if phys + n > self._warm_wake_at:
            self._wake_warmer()
        fs = self._flush_service
        durable = fs.submit(phys + n) if fs is not None and fs.sync else None
        if undispatched is None and self._listeners:
            self._notify_arrival(msg, key, phys, n, tcode, store_ts)
        prefix_port, prefix = self._msg_id_prefix
        if prefix_port != port:
            prefix = self._offset_msg_id_prefix(port)
        return _new_put_result(
            PutResult, (_PUT_OK, None, queue_id, qoff, phys, n, 1, store_ts, topic, durable, prefix)
        )

    def _encode_past_limit(self, msg: MessageExt, f: MappedFile, size: int) -> tuple[MappedFile, int]:
        """A record that did not fit below the limit ``put_message`` gave: past the chunk the warmer
        is zeroing, wait for it; past the segment's end, BLANK and the next segment. (file, size);
        size < 0 when the record exceeds the size limit."""
        if size > self.config.max_message_size + _RECORD_ALLOWANCE:
            return f, -size
        self._warm_done.wait()
        if size + END_FILE_MIN_BLANK_LENGTH > f.file_size - f.wrote_position:
            f = self._writable_file(size)
        at = f.wrote_position
        msg.commit_log_offset = f.file_from_offset + at
        limit = f.file_size - END_FILE_MIN_BLANK_LENGTH
        wb = f.write_buffer
        if wb is None:
            return f, encode_message_into(msg, f.buf, at, limit)
        if at - f.committed_position + size > len(wb):  # the write buffer is full: to the file first
            f.commit()
        staged = f.committed_position
        return f, encode_message_into(msg, wb, at - staged, min(limit - staged, len(wb)))

    def _wake_warmer(self) -> None:
        warmer = self._warmer
        if warmer is not None:
            warmer.wake()

    def _notify_arrival(
        self, msg: MessageExt, key: tuple[str, int], phys: int, size: int, tcode: int, store_ts: int
    ) -> None:
        for _, watched in self._listeners:
            if watched is None or key in watched:  # someone listens: the request is worth building
                self._notify_entries((_dispatch_entry(msg, phys, size, tcode, store_ts),))
                return

    def _notify_entries(self, entries: Sequence[_Dispatch]) -> None:
        """Tell the arrival listeners watching their queues about dispatched ``entries``."""
        listeners = self._listeners
        if not listeners:
            return
        for entry in entries:
            key = (entry[0], entry[1])
            d = None
            for listener, watched in listeners:
                if watched is None or key in watched:
                    if d is None:
                        d = DispatchRequest(*entry)
                    listener(d)

    def _dispatch_entries(self, entries: Sequence[_Dispatch], committed: int) -> None:
        """Dispatch appended records, the CommitLog being written up to ``committed``: to their
        ConsumeQueues, to the index (inline, or by the dispatcher process told ``committed``)."""
        cs = self._committed_slot
        if cs is not None:
            cs[0](cs[1], cs[2], committed)
        queues = self.consume_queues
        index = self.index if self._index_inline else None
        for topic, queue_id, phys, size, tcode, store_ts, qoff, keys, uniq, sys_flag, _ in entries:
            if not sys_flag & _TX_NOT_COUNTED:
                (queues.get((topic, queue_id)) or self.find_consume_queue(topic, queue_id)).put(
                    phys, size, tcode, qoff
                )
            if index is not None and (keys or uniq):
                index.build_index(topic, keys, uniq, phys, store_ts, sys_flag)

    def _commit_staged(self) -> None:
        """SYNC_FLUSH: write the staged records to their segment, then dispatch them, as RocketMQ's
        reput follows the committed position: the ConsumeQueue never points past the file's data."""
        with self._put_lock:
            committed = self.commitlog.queue.commit()
            entries = self._undispatched
            if not entries:
                return
            self._undispatched = []
            try:
                self._dispatch_entries(entries, committed)
            except OSError:
                self._dispatch_failed()
        self._notify_entries(entries)

    def _offset_msg_id_prefix(self, port: int) -> bytes:
        """Hex of the store host and ``port``: an offsetMsgId less its 16 offset digits (cached)."""
        prefix = encode_offset_msg_id(self._store_host, port, 0)[:-16].encode()
        self._msg_id_prefix = (port, prefix)
        return prefix

    def put_messages(self, msgs: Sequence[MessageExt]) -> PutResult:
        """Append one message or a batch (same topic/queue, consecutive queue offsets, written atomically);
        like RocketMQ's putMessages, a message's DELAY is stored as it is, not scheduled."""
        if not msgs:
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        recs: list[bytearray] = []
        for m in msgs:
            bad = self._prepare(m)
            if bad is not None:
                return PutResult(bad)
            rec = self._encode(m)
            if isinstance(rec, PutMessageStatus):
                return PutResult(rec)
            recs.append(rec)
        first = msgs[0]
        topic, queue_id = first.topic, first.queue_id
        if any(m.topic != topic or m.queue_id != queue_id for m in msgs):
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        blob = recs[0] if len(recs) == 1 else bytearray().join(recs)
        n = len(blob)
        key = (topic, queue_id)
        with self._put_lock:
            if self._shutdown:
                return PutResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
            store_ts = _now_ms()
            try:
                f = self._writable_file(n)
            except (OSError, ValueError):
                return PutResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
            phys0 = f.file_from_offset + f.wrote_position
            qoff0 = self.topic_queue_table.get(key, 0)
            qoff = qoff0
            pos = 0
            for m, rec in zip(msgs, recs, strict=True):
                counted = not m.sys_flag & _TX_NOT_COUNTED
                patch_record(blob, pos, qoff if counted else 0, phys0 + pos, store_ts)
                m.queue_offset = qoff if counted else 0
                m.commit_log_offset = phys0 + pos
                m.store_timestamp = store_ts
                pos += len(rec)
                qoff += counted
            self._warm_done.wait()
            f.append(blob)  # the batch becomes visible whole
            self.topic_queue_table[key] = qoff
            self._last_store_ts = store_ts
            entries: list[_Dispatch] = []
            pos = 0
            for m, rec in zip(msgs, recs, strict=True):
                tcode = self._tags_code(topic, m.properties, store_ts)
                entries.append(_dispatch_entry(m, phys0 + pos, len(rec), tcode, store_ts))
                pos += len(rec)
            if self._undispatched is not None:
                self._undispatched += entries
                entries = []
            else:
                try:
                    self._dispatch_entries(entries, phys0 + n)
                except OSError:
                    return self._dispatch_failed()
        if phys0 + n > self._warm_wake_at:
            self._wake_warmer()
        durable = None
        if self._flush_service is not None and self._flush_service.sync:
            durable = self._flush_service.submit(phys0 + n)
        self._notify_entries(entries)
        port = self.config.store_port
        prefix_port, prefix = self._msg_id_prefix
        if prefix_port != port:
            prefix = self._offset_msg_id_prefix(port)
        msg_ids = None  # one message: built on demand from the prefix, like put_message's
        if len(msgs) > 1:
            text = prefix.decode()
            msg_ids = ",".join(f"{text}{m.commit_log_offset:016X}" for m in msgs)
        return PutResult(
            PutMessageStatus.PUT_OK,
            msg_ids,
            queue_id,
            qoff0,
            phys0,
            n,
            len(msgs),
            store_ts,
            topic,
            durable,
            prefix,
        )

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
