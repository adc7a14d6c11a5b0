"""An in-memory MessageStore (store/api.py semantics, no files): a test double for processor tests.

Records are real CommitLog records (``encode_message``) in one growing bytearray; ConsumeQueues are
lists of (physical offset, size, tagsCode, store timestamp); metadata lives in dicts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from rmqgate.store.api import (
    SCHEDULE_TOPIC,
    DispatchRequest,
    GetMessageStatus,
    GetResult,
    PutMessageStatus,
    PutResult,
    QueryResult,
    StoreConfig,
    TagsFilter,
)
from rmqgate.wire.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    MessageExt,
    decode_message,
    encode_message,
    encode_offset_msg_id,
    patch_record,
    tags_code,
)

G = GetMessageStatus


class MemoryMetaStore:
    def __init__(self) -> None:
        self.dbs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, int]] = {}
        self.offsets: dict[str, dict[int, int]] = {}
        self.delay: dict[int, int] = {}

    def _bump(self, db: str) -> None:
        v = self.versions.setdefault(db, {"counter": 0, "timestamp": 0})
        v["counter"] += 1
        v["timestamp"] = int(time.time() * 1000)

    def get(self, db: str, key: str) -> Any | None:
        return self.dbs.get(db, {}).get(key)

    def put(self, db: str, key: str, value: Any) -> None:
        self.dbs.setdefault(db, {})[key] = value
        self._bump(db)

    def put_many(self, db: str, items: dict[str, Any], *, replace: bool = False) -> None:
        d = self.dbs.setdefault(db, {})
        if replace:
            d.clear()
        d.update(items)
        self._bump(db)

    def delete(self, db: str, key: str) -> bool:
        found = self.dbs.get(db, {}).pop(key, None) is not None
        if found:
            self._bump(db)
        return found

    def items(self, db: str) -> Iterator[tuple[str, Any]]:
        return iter(list(self.dbs.get(db, {}).items()))

    def data_version(self, db: str) -> dict[str, int]:
        return dict(self.versions.get(db, {"counter": 0, "timestamp": 0}))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.setdefault(f"{topic}@{group}", {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.offsets.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offset_table(self) -> dict[str, dict[int, int]]:
        return {k: dict(v) for k, v in self.offsets.items()}

    def remove_offsets(self, *, topic: str | None = None, group: str | None = None) -> None:
        for key in list(self.offsets):
            t, _, g = key.partition("@")
            if (topic is None or t == topic) and (group is None or g == group):
                del self.offsets[key]

    def persist_offsets(self) -> None:
        pass

    def set_delay_offset(self, level: int, offset: int) -> None:
        self.delay[level] = offset

    def delay_offsets(self) -> dict[int, int]:
        return dict(self.delay)


class MemoryMessageStore:
    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig(store_path_root_dir="")
        self.meta = MemoryMetaStore()
        self.log = bytearray()
        self.queues: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        self.index: dict[str, list[int]] = {}
        self.listeners: list[Callable[[DispatchRequest], None]] = []
        self.lock = threading.Lock()
        self.store_host = bytes(int(p) for p in self.config.store_host.split("."))
        self.delay_levels = len(self.config.message_delay_level.split())

    def shutdown(self) -> None:
        pass

    def register_arrival_listener(self, listener: Callable[[DispatchRequest], None]) -> None:
        self.listeners.append(listener)

    # -- write --
    def put_message(self, msg: MessageExt) -> PutResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: Sequence[MessageExt]) -> PutResult:
        if len(bytes(msgs[0].body)) > self.config.max_message_size:
            return PutResult(PutMessageStatus.MESSAGE_ILLEGAL)
        now = int(time.time() * 1000)
        ids = []
        dispatched = []
        with self.lock:
            first_offset = -1
            for msg in msgs:
                delay = int(msg.properties.get(PROPERTY_DELAY, "0") or 0)
                if delay > 0:
                    delay = min(delay, self.delay_levels)
                    msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
                    msg.properties[PROPERTY_REAL_QID] = str(msg.queue_id)
                    msg.properties_raw = None
                    msg.topic, msg.queue_id = SCHEDULE_TOPIC, delay - 1
                msg.store_host, msg.store_port, msg.store_timestamp = (
                    self.store_host,
                    self.config.store_port,
                    now,
                )
                cq = self.queues.setdefault((msg.topic, msg.queue_id), [])
                phys = len(self.log)
                record = encode_message(msg)
                patch_record(record, 0, len(cq), phys, now)
                self.log += record
                tc = tags_code(msg.tags)
                cq.append((phys, len(record), tc, now))
                if first_offset < 0:
                    first_offset = len(cq) - 1
                ids.append(encode_offset_msg_id(self.store_host, self.config.store_port, phys))
                for key in [*(msg.keys or "").split(" "), msg.uniq_key or ""]:
                    if key:
                        self.index.setdefault(f"{msg.topic}#{key}", []).append(phys)
                dispatched.append(
                    DispatchRequest(
                        msg.topic,
                        msg.queue_id,
                        phys,
                        len(record),
                        tc,
                        now,
                        len(cq) - 1,
                        msg.keys,
                        msg.uniq_key,
                        msg.sys_flag,
                        0,
                    )
                )
        for d in dispatched:
            for listener in self.listeners:
                listener(d)
        last = msgs[-1]
        result = PutResult(
            PutMessageStatus.PUT_OK,
            ",".join(ids),
            last.queue_id,
            first_offset,
            dispatched[0].commit_log_offset,
            0,
            len(msgs),
            now,
            last.topic,
        )
        if self.config.flush_disk_type == "SYNC_FLUSH":
            fut: Future[PutMessageStatus] = Future()
            fut.set_result(PutMessageStatus.PUT_OK)
            result.durable = fut
        return result

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
    ) -> GetResult:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return GetResult(G.NO_MATCHED_LOGIC_QUEUE, 0 if offset == 0 else offset, 0, 0)
        max_off = len(cq)
        if max_off == 0:
            return GetResult(G.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        if offset < 0:
            return GetResult(G.OFFSET_TOO_SMALL, 0, 0, max_off)
        if offset == max_off:
            return GetResult(G.OFFSET_OVERFLOW_ONE, offset, 0, max_off)
        if offset > max_off:
            return GetResult(G.OFFSET_OVERFLOW_BADLY, max_off, 0, max_off)
        res = GetResult(G.NO_MATCHED_MESSAGE, offset, 0, max_off)
        limit = max_bytes or self.config.max_transfer_bytes_on_message_in_memory
        pos = offset
        view = memoryview(self.log)
        while pos < max_off and len(res.buffers) < max_msgs:
            phys, size, tc, _ = cq[pos]
            pos += 1
            if tags_filter is not None:
                ok = tags_filter(tc) if callable(tags_filter) else tc in tags_filter
                if not ok:
                    continue
            if res.buffers and res.buffer_total_size + size > limit:
                pos -= 1
                break
            res.buffers.append(view[phys : phys + size])
            res.queue_offsets.append(pos - 1)
            res.buffer_total_size += size
        res.next_begin_offset = pos
        if res.buffers:
            res.status = G.FOUND
        return res

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), ()))

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get((topic, queue_id), [])
        return cq[offset][0] if 0 <= offset < len(cq) else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.queues.get((topic, queue_id), [])
        for i, unit in enumerate(cq):
            if unit[3] >= timestamp:
                return i
        return len(cq)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq[0][3] if cq else -1

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get((topic, queue_id), [])
        return cq[offset][3] if 0 <= offset < len(cq) else -1

    def get_min_phy_offset(self) -> int:
        return 0

    def get_max_phy_offset(self) -> int:
        return len(self.log)

    def select_one_message_by_offset(self, commit_log_offset: int) -> memoryview | None:
        if not 0 <= commit_log_offset < len(self.log) - 4:
            return None
        size = int.from_bytes(self.log[commit_log_offset : commit_log_offset + 4], "big")
        return memoryview(self.log)[commit_log_offset : commit_log_offset + size]

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        buf = self.select_one_message_by_offset(commit_log_offset)
        return decode_message(buf) if buf is not None else None

    def query_message(
        self, topic: str, key: str, max_num: int, begin_timestamp: int = 0, end_timestamp: int = 1 << 62
    ) -> QueryResult:
        res = QueryResult()
        for phys in self.index.get(f"{topic}#{key}", [])[-max_num:]:
            buf = self.select_one_message_by_offset(phys)
            if buf is not None:
                res.buffers.append(buf)
                res.index_last_update_phyoffset = phys
        res.index_last_update_timestamp = int(time.time() * 1000)
        return res

    def topics(self) -> set[str]:
        return {t for t, _ in self.queues}

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.queues if t == topic)

    def delete_topics(self, topics: Collection[str]) -> int:
        n = 0
        for key in list(self.queues):
            if key[0] in topics:
                del self.queues[key]
                n += 1
        for topic in topics:
            self.meta.remove_offsets(topic=topic)
        return n

    def runtime_info(self) -> dict[str, str]:
        return {"commitLogMaxOffset": str(len(self.log)), "storeType": "memory"}
