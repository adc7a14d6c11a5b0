"""The store's interface for the broker's processors (no sockets, no request codes).

Usage::

    store = open_store(StoreConfig(store_path_root_dir="/var/rmq/store"))  # recovers, then serves
    res = store.put_message(msg)              # msg: rmqgate.wire.message.MessageExt (inner message)
    if res.durable is not None:               # SYNC_FLUSH: wait for the group commit
        status = await asyncio.wrap_future(res.durable)   # PutMessageStatus.PUT_OK / FLUSH_DISK_TIMEOUT
    got = store.get_messages("T", 0, offset, 32, tags_filter={hash_of_tag})
    store.meta.commit_offset("group", "T", 0, 42)
    store.shutdown()

Semantics follow RocketMQ 4.9 ``DefaultMessageStore``/``CommitLog``: ``put_message`` appends under one
lock (mmap copy, no fsync), assigns the physical offset, the queue offset (per topic-queue table,
rebuilt on recovery), the store timestamp and the store host (from the config), redirects DELAY>0
messages to ``SCHEDULE_TOPIC_XXXX`` like ``CommitLog.putMessage``, and dispatches to the
ConsumeQueue and IndexFile before returning, so a message is visible to ``get_messages`` as soon as
``put_message`` returns; arrival listeners are then called in the putting thread. fsync happens in
a flush thread. The caller (broker) owns properties: drop ``WAIT``, add ``CLUSTER`` before putting.
Buffers in results are memoryviews over the mmapped CommitLog: use them promptly, don't keep them.
Writes are refused (SERVICE_NOT_AVAILABLE) after shutdown, after a failed dispatch, and while the
disk is over 90% full (RocketMQ's RunningFlags). The first open of a directory a Java broker wrote
imports its ``config/*.json`` into ``store.meta``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Collection, Container, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from rmqgate.wire.header import parse_java_long

if TYPE_CHECKING:
    from rmqgate.wire.message import MessageExt, RecordProperties

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
#: ``BrokerRole``: a SLAVE's store takes no puts, and its pull offsets are not corrected
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
SLAVE = "SLAVE"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> dict[int, int]:
    """``messageDelayLevel`` -> {level: delay ms}, read as ``ScheduleMessageService.parseDelayLevel``
    does: split on single spaces (trailing empty parts dropped), each a Java long and a unit s/m/h/d.
    Anything else raises ValueError naming the part, where Java stops the broker; so does a text
    without levels, which Java lets through to file delayed messages under queue -1."""
    parts = spec.split(" ")
    while parts and not parts[-1]:
        parts.pop()
    if not parts:
        raise ValueError(f"messageDelayLevel={spec!r}: no delay levels")
    levels = {}
    for level, part in enumerate(parts, 1):
        unit = _DELAY_UNITS.get(part[-1:])
        try:
            if unit is None:
                raise ValueError("has no unit s, m, h or d")
            levels[level] = parse_java_long(part[:-1]) * unit
        except ValueError as exc:
            raise ValueError(f"messageDelayLevel={spec!r}: level {level} {part!r} {exc}") from None
    return levels


@dataclass
class StoreConfig:
    """``MessageStoreConfig`` in snake case (RocketMQ's defaults)."""

    # the fields the store reads at each use: changed on a running store, they apply at once
    LIVE_FIELDS: ClassVar[tuple[str, ...]] = (
        "max_message_size",
        "file_reserved_time",
        "delete_when",
        "disk_max_used_space_ratio",
        "access_message_in_memory_max_ratio",
        "max_transfer_count_on_message_in_memory",
        "max_transfer_bytes_on_message_in_memory",
    )

    store_path_root_dir: str
    store_path_commit_log: str | None = None  # storePathCommitLog; None: <store_path_root_dir>/commitlog
    mapped_file_size_commitlog: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    message_index_enable: bool = True
    # rmqgate: build the index in a process of its own (RocketMQ's reput thread, on another core);
    # only with the store's services running, else inline with each put
    index_dispatch_process: bool = True
    index_query_wait: int = 3000  # ms a query waits for the index to cover what was committed
    flush_disk_type: str = ASYNC_FLUSH
    broker_role: str = "ASYNC_MASTER"  # read when the store opens
    offset_check_in_slave: bool = False  # a SLAVE corrects a pull's next offset as a master does
    flush_interval_commitlog: int = 500  # ms
    # rmqgate: zero the CommitLog this many bytes ahead of the write position from a background
    # thread (page cache allocated off the put path, like RocketMQ's warmMapedFile); 0 = off
    commitlog_warm_ahead: int = 4 * 1024 * 1024
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval: int = 10_000  # ms
    flush_interval_consume_queue: int = 1000  # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms; also when index files and checkpoint advance
    sync_flush_timeout: int = 5000  # ms
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"  # hours of day, ";"-separated
    disk_max_used_space_ratio: int = 75
    clean_resource_interval: int = 10_000  # ms
    max_message_size: int = 4 * 1024 * 1024
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    default_query_max_num: int = 32
    max_msgs_num_batch: int = 64  # cap on query_message results
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    store_host: str = "127.0.0.1"  # written into each record (STOREHOST); IPv6 sets STOREHOST_V6
    store_port: int = 10911
    flush_consumer_offset_interval: int = 5000  # ms, consumer offsets -> LMDB
    meta_map_size: int = 1 << 30  # LMDB map size (sparse file; grows as needed up to this)

    @property
    def commitlog_dir(self) -> Path:
        """Where the CommitLog segments live (storePathCommitLog, possibly outside the root)."""
        if self.store_path_commit_log:
            return Path(self.store_path_commit_log)
        return Path(self.store_path_root_dir) / "commitlog"

    @property
    def slave(self) -> bool:
        """``checkStoreStatus``: a slave's store takes no puts."""
        return self.broker_role == SLAVE

    @property
    def corrects_pull_offsets(self) -> bool:
        """``nextOffsetCorrection``: a slave answers a pull's own offset unless offsetCheckInSlave."""
        return not self.slave or self.offset_check_in_slave


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class PutResult(NamedTuple):
    """What an append did. A tuple: the put path builds one per message, and a tuple is the cheapest
    object Python makes (``tuple.__new__(PutResult, fields)`` skips even the generated ``__new__``)."""

    status: PutMessageStatus
    msg_ids: str | None = None  # batches: the comma-joined offsetMsgIds (single puts: see msg_id)
    queue_id: int = 0
    queue_offset: int = 0  # first logical offset (batch: consecutive from here)
    physical_offset: int = 0
    wrote_bytes: int = 0
    msg_num: int = 0
    store_timestamp: int = 0
    topic: str = ""  # the topic actually written (SCHEDULE_TOPIC_XXXX for delayed messages)
    #: SYNC_FLUSH only: resolves with PUT_OK once flushed, FLUSH_DISK_TIMEOUT after sync_flush_timeout.
    #: An ``asyncio.Future`` of the running loop when put from a loop thread (committed with the other
    #: puts of that loop round), else a ``concurrent.futures.Future``; ``asyncio.wrap_future`` takes both.
    durable: Future[PutMessageStatus] | asyncio.Future[PutMessageStatus] | None = None
    #: hex of the store host and port: a single put's offsetMsgId is this + ``%016X`` of physical_offset
    msg_id_prefix: bytes = b""

    @property
    def msg_id(self) -> str:
        """offsetMsgId (comma-joined for a batch), built when first asked for, as RocketMQ's
        ``AppendMessageResult`` does with its msgIdSupplier: most callers never need the text."""
        if self.msg_ids is not None:
            return self.msg_ids
        if not self.msg_id_prefix:
            return ""
        return f"{self.msg_id_prefix.decode()}{self.physical_offset:016X}"


@dataclass(slots=True)
class GetResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)  # whole stored records, zero-copy
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.buffers)


@dataclass(slots=True)
class QueryResult:
    buffers: list[memoryview] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """What the reput/dispatch step learns about one stored message (arrival listeners get it)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int


#: Called after each dispatch (the broker wakes long-polling pulls for ``topic@queue_id``).
ArrivalListener = Callable[[DispatchRequest], None]

#: Tag filter of ``get_messages``: a set of tag hash codes, or a predicate on the ConsumeQueue tagsCode.
TagsFilter = Collection[int] | Callable[[int], bool] | None

#: Property filter of ``get_messages``: a predicate on the properties of a stored message that passed
#: the tag filter, given as a ``RecordProperties`` view (``get(name)`` reads one property from the
#: record's bytes); a message it refuses is skipped like a tag mismatch.
PropertiesFilter = Callable[["RecordProperties"], bool] | None


class MetaStore(Protocol):
    """LMDB side-store. Databases: ``topics`` (name -> TopicConfig dict), ``subscription_groups``
    (group -> SubscriptionGroupConfig dict), ``consumer_offsets`` ("topic@group" -> {queueId: offset}),
    ``delay_offsets`` (level -> offset). Values are JSON-compatible dicts in fastjson's field names."""

    def get(self, db: str, key: str) -> Any | None: ...
    def put(self, db: str, key: str, value: Any) -> None: ...
    def put_many(self, db: str, items: dict[str, Any], *, replace: bool = False) -> None: ...
    def delete(self, db: str, key: str) -> bool: ...
    def items(self, db: str) -> Iterator[tuple[str, Any]]: ...
    def data_version(self, db: str) -> dict[str, int]: ...  # {"timestamp": ms, "counter": n}

    # consumer offsets: in memory, persisted every flush_consumer_offset_interval and on shutdown
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...  # -1 if unknown
    def offset_table(self) -> dict[str, dict[int, int]]: ...  # copy of "topic@group" -> {qid: off}
    def remove_offsets(self, *, group: str) -> None: ...  # every topic's offsets of the group
    def persist_offsets(self) -> None: ...
    def set_delay_offset(self, level: int, offset: int) -> None: ...
    def delay_offsets(self) -> dict[int, int]: ...


class MessageStore(Protocol):
    config: StoreConfig
    meta: MetaStore

    def shutdown(self) -> None: ...  # flush everything, remove the abort file

    # -- write --
    # schedule_delay=False stores a DELAY property as it is (a delayed message re-put when due)
    def put_message(self, msg: MessageExt, *, schedule_delay: bool = True) -> PutResult: ...
    def put_messages(self, msgs: Sequence[MessageExt]) -> PutResult: ...  # one topic/queue, atomic, no DELAY

    # -- read --
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
    ) -> GetResult: ...
    def get_consume_queue_units(
        self, topic: str, queue_id: int, offset: int, max_units: int
    ) -> list[tuple[int, int, int]]: ...  # (commitlog offset, size, tagsCode) within one CQ file
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int: ...
    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool: ...
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int: ...
    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...  # -1 if none
    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def get_max_phy_offset(self) -> int: ...
    def select_one_message_by_offset(self, commit_log_offset: int) -> memoryview | None: ...
    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...
    def query_message(
        self, topic: str, key: str, max_num: int, begin_timestamp: int = 0, end_timestamp: int = 1 << 62
    ) -> QueryResult: ...  # by KEYS token or UNIQ_KEY
    def topics(self) -> set[str]: ...  # topics with a ConsumeQueue
    def queue_ids(self, topic: str) -> list[int]: ...

    # -- misc --
    def register_arrival_listener(
        self, listener: ArrivalListener, watched: Container[tuple[str, int]] | None = None
    ) -> None: ...  # with ``watched``: only for puts to the (topic, queueId) keys it holds right now
    def delete_topics(self, topics: Collection[str]) -> int: ...  # drops ConsumeQueues; offsets stay
    def clean_expired_consume_queues(self) -> int: ...  # queues wholly below the CommitLog
    def put_totals(self) -> tuple[int, int]: ...  # (messages, bytes) appended since open
    def topic_put_totals(self) -> dict[str, int]: ...  # messages appended per topic since open
    def runtime_info(self) -> dict[str, str]: ...


def open_store(config: StoreConfig) -> MessageStore:
    """Open (create if needed) and recover the store under ``config.store_path_root_dir``."""
    from rmqgate.store.message_store import DefaultMessageStore

    return DefaultMessageStore.open(config)
