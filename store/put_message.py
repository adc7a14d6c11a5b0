"""The put path of DefaultMessageStore, RocketMQ's CommitLog.putMessage/putMessages: checks, the
record encoded into the mapped segment (or the SYNC_FLUSH write buffer), and the dispatch of what was
appended to ConsumeQueues, the index and arrival listeners; also reput, the same dispatch of records
already in the CommitLog (recovery, a slave's replica).

``PutMessageMixin`` is a base class of ``DefaultMessageStore``: the hot path reads the store's state as
attributes of ``self``, with no call layer per message between the store and the append.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rmqgate.store.api import (
    SCHEDULE_TOPIC,
    DispatchRequest,
    PutMessageStatus,
    PutResult,
)
from rmqgate.store.mapped_file import MappedFile
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.header import parse_java_int
from rmqgate.wire.message import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_TOPIC_BYTES,
    RECORD_PREFIX,
    MessageExt,
    decode_message,
    encode_blank,
    encode_message,
    encode_message_into,
    encode_offset_msg_id,
    patch_record,
    tags_code,
)
from rmqgate.wire.message_const import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageSysFlag,
)

if TYPE_CHECKING:
    from rmqgate.store.message_store import DefaultMessageStore

_TX_PREPARED = MessageSysFlag.TRANSACTION_PREPARED
_TX_ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK
_STOREHOST_V6 = MessageSysFlag.STOREHOST_V6
# PREPARED (0x4) and ROLLBACK (0xC) share this bit, COMMIT (0x8) and NOT_TYPE (0) lack it: messages
# with it get no ConsumeQueue unit and no queue offset (RocketMQ's CommitLog/reput rule)
_TX_NOT_COUNTED = _TX_PREPARED & _TX_ROLLBACK
_PUT_OK = PutMessageStatus.PUT_OK
# maxMessageSize bounds the body; the whole record may be this much larger (4.9.8's MessageExtEncoder)
RECORD_ALLOWANCE = 64 * 1024
_new_put_result = tuple.__new__
_time_ns = time.time_ns
_unpack_prefix = RECORD_PREFIX.unpack_from
_log = logging.getLogger(__name__)
#: records reput hands to one _dispatch_entries call (a recovery reputs whole CommitLogs)
REPUT_BATCH = 1024
# DispatchRequest's fields as a plain tuple: what a put hands to dispatch (and listeners get built from)
DispatchEntry = tuple[str, int, int, int, int, int, int, str | None, str | None, int, int]


def _dispatch_entry(msg: MessageExt, phys: int, size: int, tcode: int, store_ts: int) -> DispatchEntry:
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


def _now_ms() -> int:
    return _time_ns() // 1_000_000  # (put_message inlines this; tests set _time_ns)


class PutMessageMixin:
    """DefaultMessageStore's appends and their dispatch (its methods take the store as ``self``)."""

    # ------------------------------------------------------------------ reput
    def reput(self: DefaultMessageStore, start: int, end: int) -> int:
        """Dispatch the whole CommitLog records in [start, end) to ConsumeQueues and the index
        (idempotent), ``REPUT_BATCH`` records to a ``_dispatch_entries`` call as a batch put is; returns
        where it stopped: ``end``, or where a record (or a segment's BLANK end) is not whole below
        ``end`` (a replica's transfer ends mid-record as often as not)."""
        pos = max(start, self.commitlog.get_min_offset())
        q = self.commitlog.queue
        prefix_size = RECORD_PREFIX.size
        entries: list[DispatchEntry] = []
        while pos < end:
            f = q.find_mapped_file_by_offset(pos)
            if f is None:  # a missing segment: on with the next one there is
                f = next((g for g in q.files if g.file_from_offset > pos), None)
                if f is None:
                    break
                pos = f.file_from_offset
                continue
            rel = pos - f.file_from_offset
            if end - pos < prefix_size or rel + prefix_size > f.file_size:
                break
            total, magic = _unpack_prefix(f.buf, rel)
            if magic == BLANK_MAGIC:
                if end < f.end_offset:  # the segment's end is not written yet
                    break
                pos = f.end_offset
                continue
            if total <= 0 or pos + total > end:
                break
            try:
                msg = decode_message(f.buf, rel, with_body=False)
            except MessageFormatError as exc:  # whole but unreadable: skipped, as ReputMessageService does
                _log.error("reput skips the undecodable record of %d bytes @%d: %s", total, pos, exc)
                pos += total
                continue
            ts = msg.store_timestamp
            entries.append(
                _dispatch_entry(msg, pos, total, self._tags_code(msg.topic, msg.properties, ts), ts)
            )
            if not msg.sys_flag & _TX_NOT_COUNTED:  # (a slave's replicated records count as puts)
                self.topic_queue_table[(msg.topic, msg.queue_id)] = msg.queue_offset + 1
            self._last_store_ts = ts
            pos += total
            if len(entries) >= REPUT_BATCH:
                self._dispatch_entries(entries, pos)
                entries = []
        if entries:
            self._dispatch_entries(entries, pos)
        return pos

    # ------------------------------------------------------------------ put
    def _tags_code(self: DefaultMessageStore, topic: str, props: dict[str, str], store_ts: int) -> int:
        if topic == SCHEDULE_TOPIC:
            level = props.get(PROPERTY_DELAY_TIME_LEVEL)
            if level:
                delay = self.delay_levels.get(int(level))
                return store_ts + (delay if delay is not None else 1000)
        return tags_code(props.get(PROPERTY_TAGS))

    def _check_topic(self: DefaultMessageStore, topic: str) -> bool:
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

    def _prepare(self: DefaultMessageStore, msg: MessageExt) -> PutMessageStatus | None:
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

    def _apply_delay_level(self: DefaultMessageStore, msg: MessageExt) -> None:
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

    def _encode(self: DefaultMessageStore, msg: MessageExt) -> bytearray | PutMessageStatus:
        try:
            rec = encode_message(msg)
        except MessageFormatError as exc:
            if "properties" in str(exc):
                return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            return PutMessageStatus.MESSAGE_ILLEGAL
        if (
            len(rec) > self.config.max_message_size + RECORD_ALLOWANCE
            or len(msg.body) > self.config.max_message_size
        ):
            return PutMessageStatus.MESSAGE_ILLEGAL
        return rec

    def _writable_file(self: DefaultMessageStore, need: int) -> MappedFile:
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

    def _dispatch_failed(self: DefaultMessageStore) -> PutResult:
        # the record is in the CommitLog; a restart re-dispatches it. Until then refuse writes so
        # queue offsets and ConsumeQueues cannot drift apart.
        _log.exception("dispatch to ConsumeQueue/index failed; store is read-only")
        self._logics_error = True
        return PutResult(PutMessageStatus.UNKNOWN_ERROR)

    def put_message(self: DefaultMessageStore, msg: MessageExt, *, schedule_delay: bool = True) -> PutResult:
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
                limit = at + self.config.max_message_size + RECORD_ALLOWANCE
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

    def _encode_past_limit(
        self: DefaultMessageStore, msg: MessageExt, f: MappedFile, size: int
    ) -> tuple[MappedFile, int]:
        """A record that did not fit below the limit ``put_message`` gave: past the chunk the warmer
        is zeroing, wait for it; past the segment's end, BLANK and the next segment. (file, size);
        size < 0 when the record exceeds the size limit."""
        if size > self.config.max_message_size + RECORD_ALLOWANCE:
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

    def _wake_warmer(self: DefaultMessageStore) -> None:
        warmer = self._warmer
        if warmer is not None:
            warmer.wake()

    def _notify_arrival(
        self: DefaultMessageStore,
        msg: MessageExt,
        key: tuple[str, int],
        phys: int,
        size: int,
        tcode: int,
        store_ts: int,
    ) -> None:
        for _, watched in self._listeners:
            if watched is None or key in watched:  # someone listens: the request is worth building
                self._notify_entries((_dispatch_entry(msg, phys, size, tcode, store_ts),))
                return

    def _notify_entries(self: DefaultMessageStore, entries: Sequence[DispatchEntry]) -> None:
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

    def _dispatch_entries(
        self: DefaultMessageStore, entries: Sequence[DispatchEntry], committed: int
    ) -> None:
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

    def _commit_staged(self: DefaultMessageStore) -> None:
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

    def _offset_msg_id_prefix(self: DefaultMessageStore, port: int) -> bytes:
        """Hex of the store host and ``port``: an offsetMsgId less its 16 offset digits (cached)."""
        prefix = encode_offset_msg_id(self._store_host, port, 0)[:-16].encode()
        self._msg_id_prefix = (port, prefix)
        return prefix

    def put_messages(self: DefaultMessageStore, msgs: Sequence[MessageExt]) -> PutResult:
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
            entries: list[DispatchEntry] = []
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
