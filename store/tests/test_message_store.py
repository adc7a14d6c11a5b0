"""Behaviour of DefaultMessageStore: put/get round trips, statuses, batches, segments, delay and
transaction rules, lookups, listeners, flush modes, restart, expiry with min-offset correction."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rmqgate.store.api import (
    SCHEDULE_TOPIC,
    GetMessageStatus,
    PutMessageStatus,
    StoreConfig,
    open_store,
)
from rmqgate.store.consume_queue import ConsumeQueue
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MAGIC_V1, MAGIC_V2, MessageExt, decode_message, java_string_hash
from rmqgate.wire.message_const import MessageSysFlag

G = GetMessageStatus


def cfg(root: Path, **kw) -> StoreConfig:
    base = dict(
        mapped_file_size_commitlog=16 * 1024,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=128,
        max_index_num=500,
        index_query_wait=30_000,  # a freshly spawned idle-priority dispatcher on a stalled CI machine
        delete_when="99",  # no scheduled cleanup mid-test, whatever the hour
    )
    base.update(kw)
    return StoreConfig(str(root), **base)


def msg(topic: str = "T", body: bytes = b"hello", qid: int = 0, **props: str) -> MessageExt:
    return MessageExt(
        topic,
        body=body,
        queue_id=qid,
        born_timestamp=int(time.time() * 1000),
        born_host=b"\x7f\x00\x00\x01",
        born_port=40000,
        properties=dict(props),
    )


@pytest.fixture()
def store(tmp_path: Path):
    s = DefaultMessageStore.open(cfg(tmp_path))
    yield s
    s.shutdown()


def test_put_get_round_trip_and_statuses(store: DefaultMessageStore) -> None:
    empty = store.get_messages("T", 0, 5, 32)  # like a Java broker's on-demand empty queue
    assert (empty.status, empty.next_begin_offset, empty.max_offset) == (G.NO_MESSAGE_IN_QUEUE, 0, 0)
    assert "T" not in store.topics()  # a pull does not create queues
    results = [store.put_message(msg(body=b"m%d" % i, TAGS="a", KEYS=f"k{i}")) for i in range(10)]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 10
    assert [r.queue_offset for r in results] == list(range(10))
    assert results[0].physical_offset == 0
    assert results[1].physical_offset == results[0].wrote_bytes

    got = store.get_messages("T", 0, 0, 4)
    assert got.status is G.FOUND and got.message_count == 4 and got.next_begin_offset == 4
    assert (got.min_offset, got.max_offset) == (0, 10)
    assert got.queue_offsets == [0, 1, 2, 3]
    assert all(isinstance(b, memoryview) for b in got.buffers)  # zero-copy over the mmap
    m = decode_message(got.buffers[2])
    assert (m.body, m.queue_offset, m.commit_log_offset) == (b"m2", 2, results[2].physical_offset)
    assert m.store_timestamp == results[2].store_timestamp and m.properties == {"TAGS": "a", "KEYS": "k2"}
    assert m.offset_msg_id == results[2].msg_id

    assert store.get_messages("T", 0, 10, 4).status is G.OFFSET_OVERFLOW_ONE
    over = store.get_messages("T", 0, 15, 4)
    assert over.status is G.OFFSET_OVERFLOW_BADLY and over.next_begin_offset == 10  # the max, as 4.9.8
    assert store.get_messages("T", 0, 0, 100).message_count == 10


def test_tags_filter_and_limits(store: DefaultMessageStore) -> None:
    for i in range(40):
        store.put_message(msg(body=bytes(100), TAGS="A" if i % 4 == 0 else "B"))
    code_a = java_string_hash("A")
    got = store.get_messages("T", 0, 0, 32, tags_filter={code_a})
    assert got.status is G.FOUND and got.message_count == 10 and got.next_begin_offset == 40 - 0
    assert all(decode_message(b).properties["TAGS"] == "A" for b in got.buffers)
    none = store.get_messages("T", 0, 1, 2, tags_filter=lambda code: code == 12345)
    assert none.status is G.NO_MATCHED_MESSAGE and none.next_begin_offset == 40
    capped = store.get_messages("T", 0, 0, 32, max_bytes=3 * got.buffers[0].nbytes)
    assert capped.message_count == 3 and capped.next_begin_offset == 3
    # RocketMQ's in-memory transfer cap: 32 messages per pull
    assert store.get_messages("T", 0, 0, 1000).message_count == 32


def test_properties_filter_sees_each_tag_matched_records_properties(store: DefaultMessageStore) -> None:
    for i in range(12):
        store.put_message(msg(body=bytes(50), TAGS="A" if i % 2 == 0 else "B", a=str(i)))
    seen: list[dict[str, str | None]] = []

    def only_multiples_of_four(p) -> bool:
        seen.append({"TAGS": p.get("TAGS"), "a": p.get("a"), "absent": p.get("absent")})
        return int(p.get("a")) % 4 == 0

    got = store.get_messages(
        "T", 0, 0, 32, tags_filter={java_string_hash("A")}, properties_filter=only_multiples_of_four
    )
    assert [decode_message(b).properties["a"] for b in got.buffers] == ["0", "4", "8"]
    assert got.queue_offsets == [0, 4, 8] and got.next_begin_offset == 12
    assert [s["a"] for s in seen] == ["0", "2", "4", "6", "8", "10"]  # the tag mismatches are not read
    assert all(s["TAGS"] == "A" and s["absent"] is None for s in seen)
    refused = store.get_messages("T", 0, 0, 32, properties_filter=lambda p: False)
    assert refused.status is G.NO_MATCHED_MESSAGE and refused.next_begin_offset == 12


def test_segments_roll_with_blank_records_and_cq_files(tmp_path: Path) -> None:
    store = DefaultMessageStore.open(cfg(tmp_path))
    try:
        body = os.urandom(1000)
        res = [store.put_message(msg(body=body, qid=i % 2)) for i in range(100)]
        files = store.commitlog.queue.files
        assert len(files) >= 6
        for f in files[:-1]:  # each full segment ends in a BLANK record or exactly at its end
            assert f.wrote_position == f.file_size
        assert all(
            r.physical_offset // (16 * 1024) == (r.physical_offset + r.wrote_bytes - 1) // (16 * 1024)
            for r in res
        )
        seen = []
        off = 0
        while True:
            got = store.get_messages("T", 0, off, 32)
            if got.status is not G.FOUND:
                break
            seen += [decode_message(b).commit_log_offset for b in got.buffers]
            off = got.next_begin_offset
        assert seen == [r.physical_offset for r in res if r.queue_id == 0]
        assert len(list((tmp_path / "consumequeue" / "T" / "0").iterdir())) == 1  # 50 units/file
        assert store.get_max_offset_in_queue("T", 0) == 50
    finally:
        store.shutdown()


def test_batch_is_consecutive_and_atomic(store: DefaultMessageStore) -> None:
    store.put_message(msg(qid=3))
    batch = [msg(qid=3, body=b"b%d" % i, KEYS=f"bk{i}", UNIQ_KEY=f"U{i}") for i in range(5)]
    res = store.put_messages(batch)
    assert res.status is PutMessageStatus.PUT_OK and res.queue_offset == 1 and res.msg_num == 5
    ids = res.msg_id.split(",")
    assert (
        len(ids) == 5 and ids[0] == decode_message(store.get_messages("T", 3, 1, 1).buffers[0]).offset_msg_id
    )
    got = store.get_messages("T", 3, 1, 32)
    assert [decode_message(b).body for b in got.buffers] == [b"b%d" % i for i in range(5)]
    assert [decode_message(b).queue_offset for b in got.buffers] == [1, 2, 3, 4, 5]
    mixed = store.put_messages([msg(qid=1), msg(qid=2)])
    assert mixed.status is PutMessageStatus.MESSAGE_ILLEGAL


def test_illegal_messages(store: DefaultMessageStore) -> None:
    assert store.put_message(msg(topic="")).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(msg(topic="x" * 256)).status is PutMessageStatus.MESSAGE_ILLEGAL  # a dir name
    assert store.put_message(msg(topic="a/b")).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(msg(topic="..")).status is PutMessageStatus.MESSAGE_ILLEGAL
    big = msg(body=bytes(store.config.max_message_size + 1))
    assert store.put_message(big).status is PutMessageStatus.MESSAGE_ILLEGAL
    huge_props = msg(P="v" * 40000)
    assert store.put_message(huge_props).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


def test_the_size_limit_is_the_body_the_record_may_be_64_kib_more(tmp_path: Path) -> None:
    """maxMessageSize bounds the body; 4.9.8's encoder lets the record exceed it by 64 KiB, so a
    body at the limit with 30 KB of properties is stored (an earlier 4 KiB allowance refused it)."""
    s = DefaultMessageStore.open(cfg(tmp_path, max_message_size=1024, mapped_file_size_commitlog=1 << 20))
    try:
        res = s.put_message(msg(body=bytes(1024), P="v" * 30_000))
        assert res.status is PutMessageStatus.PUT_OK and res.wrote_bytes > 1024 + 30_000
        batch = s.put_messages([msg(body=bytes(1024), P="w" * 30_000), msg(body=b"x")])
        assert batch.status is PutMessageStatus.PUT_OK and batch.msg_num == 2
        assert s.put_message(msg(body=bytes(1025))).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert decode_message(s.get_messages("T", 0, 0, 1).buffers[0]).properties["P"] == "v" * 30_000
    finally:
        s.shutdown()


def test_delay_redirects_to_schedule_topic(store: DefaultMessageStore) -> None:
    res = store.put_message(msg(topic="Real", qid=2, DELAY="3", TAGS="x"))
    assert res.topic == SCHEDULE_TOPIC and res.queue_id == 2
    got = store.get_messages(SCHEDULE_TOPIC, 2, 0, 1)
    m = decode_message(got.buffers[0])
    assert m.properties["REAL_TOPIC"] == "Real" and m.properties["REAL_QID"] == "2"
    unit = store.consume_queues[(SCHEDULE_TOPIC, 2)].get_unit(0)
    assert unit[2] == res.store_timestamp + 10_000  # tagsCode = deliver time for level 3 (10s)
    clamped = store.put_message(msg(topic="Real", DELAY="99"))
    assert clamped.queue_id == 17
    assert store.get_max_offset_in_queue("Real", 2) == 0


def test_transaction_prepared_and_rollback(store: DefaultMessageStore) -> None:
    prep = msg(topic="Tx", KEYS="pk")
    prep.sys_flag = MessageSysFlag.TRANSACTION_PREPARED
    r1 = store.put_message(prep)
    rb = msg(topic="Tx", KEYS="rk")
    rb.sys_flag = MessageSysFlag.TRANSACTION_ROLLBACK
    r2 = store.put_message(rb)
    r3 = store.put_message(msg(topic="Tx", KEYS="nk"))
    assert r1.queue_offset == 0 and r2.queue_offset == 0 and r3.queue_offset == 0
    assert store.get_max_offset_in_queue("Tx", 0) == 1  # only the normal one is in the ConsumeQueue
    assert (
        store.look_message_by_offset(r1.physical_offset).sys_flag & 0xC == MessageSysFlag.TRANSACTION_PREPARED
    )
    assert len(store.query_message("Tx", "pk", 8).buffers) == 1
    assert store.query_message("Tx", "rk", 8).buffers == []  # ROLLBACK is not indexed


def test_lookups_by_offset_key_time(store: DefaultMessageStore) -> None:
    res = []
    for i in range(30):
        res.append(store.put_message(msg(KEYS=f"order-{i} grp{i % 3}", UNIQ_KEY=f"UNIQ{i}")))
        time.sleep(0.002)
    view = store.select_one_message_by_offset(res[7].physical_offset)
    assert view is not None and decode_message(view).properties["UNIQ_KEY"] == "UNIQ7"
    assert store.select_one_message_by_offset(10**9) is None
    assert [
        decode_message(b).properties["UNIQ_KEY"] for b in store.query_message("T", "UNIQ12", 4).buffers
    ] == ["UNIQ12"]
    grp = store.query_message("T", "grp1", 100)
    assert sorted(decode_message(b).queue_offset for b in grp.buffers) == list(range(1, 30, 3))
    assert len(store.query_message("T", "grp1", 3).buffers) <= 3
    assert store.query_message("T", "order-5", 4, end_timestamp=res[0].store_timestamp - 5000).buffers == []
    assert grp.index_last_update_phyoffset == res[-1].physical_offset
    ts = res[20].store_timestamp
    off = store.get_offset_in_queue_by_time("T", 0, ts)
    assert store.get_message_store_timestamp("T", 0, off) == ts
    assert store.get_earliest_message_time("T", 0) == res[0].store_timestamp
    assert store.get_commit_log_offset_in_queue("T", 0, 5) == res[5].physical_offset


def test_arrival_listener_and_delete_topic(store: DefaultMessageStore) -> None:
    seen = []
    store.register_arrival_listener(
        lambda d: seen.append((d.topic, d.queue_id, d.consume_queue_offset, d.tags_code))
    )
    store.put_message(msg(topic="L", qid=1, TAGS="t"))
    store.put_messages([msg(topic="L", qid=1), msg(topic="L", qid=1)])
    assert seen == [("L", 1, 0, java_string_hash("t")), ("L", 1, 1, 0), ("L", 1, 2, 0)]
    store.meta.commit_offset("g", "L", 1, 2)
    assert store.delete_topics({"L"}) == 1
    assert "L" not in store.topics() and store.meta.query_offset("g", "L", 1) == 2  # kept, as Java's
    assert store.get_messages("L", 1, 0, 1).status is G.NO_MESSAGE_IN_QUEUE


def test_arrival_listener_with_watched_keys_hears_only_those_queues(store: DefaultMessageStore) -> None:
    seen: list[tuple[str, int, int]] = []
    watched: dict[tuple[str, int], str] = {("W", 2): "a parked pull"}  # a live view, as the broker's
    store.register_arrival_listener(
        lambda d: seen.append((d.topic, d.queue_id, d.consume_queue_offset)), watched
    )
    store.put_message(msg(topic="W", qid=1))
    store.put_message(msg(topic="W", qid=2, KEYS="k1"))
    store.put_messages([msg(topic="W", qid=3), msg(topic="W", qid=3)])
    store.put_messages([msg(topic="W", qid=2), msg(topic="W", qid=2)])
    assert seen == [("W", 2, 0), ("W", 2, 1), ("W", 2, 2)]
    del watched[("W", 2)]
    watched[("W", 1)] = "another"
    store.put_message(msg(topic="W", qid=2))
    store.put_message(msg(topic="W", qid=1))
    assert seen[3:] == [("W", 1, 1)]


def test_restart_keeps_messages_offsets_and_meta(tmp_path: Path) -> None:
    c = cfg(tmp_path)
    s = open_store(c)
    for i in range(60):
        s.put_message(msg(qid=i % 3, body=b"%d" % i))
    s.meta.put("topics", "T", {"topicName": "T", "readQueueNums": 3})
    s.meta.commit_offset("grp", "T", 1, 7)
    s.shutdown()
    assert not (tmp_path / "abort").exists()
    s = open_store(c)
    try:
        assert s.last_exit_ok
        assert [s.get_max_offset_in_queue("T", q) for q in range(3)] == [20, 20, 20]
        r = s.put_message(msg(qid=1))
        assert r.queue_offset == 20  # queue offsets continue after a restart
        assert s.meta.get("topics", "T")["readQueueNums"] == 3
        assert s.meta.query_offset("grp", "T", 1) == 7
    finally:
        s.shutdown()


def test_sync_flush_group_commit_from_asyncio(tmp_path: Path) -> None:
    s = open_store(cfg(tmp_path, flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20))

    async def writer(n: int) -> list[PutMessageStatus]:
        out = []
        for i in range(n):
            r = s.put_message(msg(body=b"x" * 100, qid=i % 4))
            assert isinstance(r.durable, asyncio.Future)  # committed with this loop round's other puts
            out.append(await asyncio.wrap_future(r.durable))
            assert s.commitlog.queue.flushed_where >= r.physical_offset + r.wrote_bytes
        return out

    async def main() -> list[list[PutMessageStatus]]:
        return await asyncio.gather(*(writer(20) for _ in range(16)))

    try:
        results = asyncio.run(main())
        assert all(st is PutMessageStatus.PUT_OK for rs in results for st in rs)
        fs = s._flush_service
        # the writers run in lockstep: each loop round holds one put of every writer, one commit each
        assert fs is not None and fs.flush_count == 20
        assert s.commitlog.queue.flushed_where == s.commitlog.get_max_offset()
    finally:
        s.shutdown()


def test_sync_flush_failure_answers_flush_disk_timeout(tmp_path: Path) -> None:
    from concurrent.futures import Future

    s = open_store(cfg(tmp_path, flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20))
    queue = s.commitlog.queue

    def failing_flush() -> int:
        raise OSError(5, "Input/output error")

    async def put_two() -> list[PutMessageStatus]:
        rs = [s.put_message(msg(body=b"a")), s.put_message(msg(body=b"b"))]
        return [await asyncio.wrap_future(r.durable) for r in rs if r.durable is not None]

    try:
        queue.flush = failing_flush  # type: ignore[method-assign]
        assert asyncio.run(put_two()) == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 2  # from a loop
        r = s.put_message(msg(body=b"c"))
        assert isinstance(r.durable, Future)  # from a thread: the commit thread answers the same
        assert r.durable.result(timeout=10) is PutMessageStatus.FLUSH_DISK_TIMEOUT
        del queue.flush  # the disk is back: the next commit covers everything written
        assert asyncio.run(put_two()) == [PutMessageStatus.PUT_OK] * 2
        assert queue.flushed_where == s.commitlog.get_max_offset()
    finally:
        s.shutdown()


def test_sync_flush_from_plain_threads(tmp_path: Path) -> None:
    from concurrent.futures import Future, ThreadPoolExecutor

    s = open_store(cfg(tmp_path, flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20))

    def put(i: int) -> PutMessageStatus:
        r = s.put_message(msg(body=b"t%d" % i))
        assert isinstance(r.durable, Future)  # no running loop in this thread
        st = r.durable.result(timeout=10)
        assert s.commitlog.queue.flushed_where >= r.physical_offset + r.wrote_bytes
        return st

    try:
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(put, range(200))) == {PutMessageStatus.PUT_OK}
    finally:
        s.shutdown()


def test_sync_flush_stages_a_round_and_shows_it_once_written(tmp_path: Path) -> None:
    """Under SYNC_FLUSH a loop round's records go to a write buffer and reach the segment with the
    round's commit (pwrite, then the sync): until then nothing points at them, neither the
    ConsumeQueue nor a lookup by offset nor the CommitLog's readable end, and the file holds none of
    their bytes. A round larger than the buffer, with batches and segment rolls, comes back whole."""
    c = cfg(tmp_path, flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20)
    s = open_store(c)
    sent: list[bytes] = []

    async def one_round() -> None:
        end, queued = s.commitlog.get_max_offset(), s.get_max_offset_in_queue("T", 0)
        r = s.put_message(msg(body=b"staged", qid=0))
        sent.append(b"staged")
        assert r.status is PutMessageStatus.PUT_OK and r.physical_offset == end
        assert s.commitlog.get_max_offset() == end
        assert s.get_max_offset_in_queue("T", 0) == queued
        assert s.select_one_message_by_offset(r.physical_offset) is None
        f = s.commitlog.queue.files[-1]
        at = r.physical_offset - f.file_from_offset
        assert bytes(f.buf[at : at + r.wrote_bytes]) == bytes(r.wrote_bytes)  # not in the file yet
        assert await asyncio.wrap_future(r.durable) is PutMessageStatus.PUT_OK
        assert s.commitlog.get_max_offset() == end + r.wrote_bytes
        assert s.get_max_offset_in_queue("T", 0) == queued + 1
        found = s.select_one_message_by_offset(r.physical_offset)
        assert found is not None and decode_message(found).body == b"staged"

    async def big_round() -> list[PutMessageStatus]:
        durable = []
        for i in range(6000):  # ~6 MB in one round: past the 4 MiB buffer, over six 1 MiB segments
            body = os.urandom(900 + i % 200)
            if i % 10 == 0:
                r = s.put_messages([msg(body=body, qid=i % 3), msg(body=body[::-1], qid=i % 3)])
                sent.extend((body, body[::-1]))
            else:
                r = s.put_message(msg(body=body, qid=i % 3))
                sent.append(body)
            assert r.status is PutMessageStatus.PUT_OK
            durable.append(r.durable)
        return [await asyncio.wrap_future(d) for d in durable]

    try:
        asyncio.run(one_round())
        assert set(asyncio.run(big_round())) == {PutMessageStatus.PUT_OK}
        assert len(s.commitlog.queue.files) >= 6
        assert s.commitlog.queue.flushed_where == s.commitlog.get_max_offset()
    finally:
        s.shutdown()
    s = DefaultMessageStore.open(c, start_services=False)
    try:
        records = [
            decode_message(f.buf, pos, check_crc=True)
            for f in s.commitlog.queue.files
            for pos in _record_positions(f.buf, f.wrote_position)
        ]
        assert [r.body for r in records] == sent
        for q in range(3):
            got = [r for r in records if r.queue_id == q]
            assert s.get_max_offset_in_queue("T", q) == len(got)
            units: list[tuple[int, int, int]] = []
            while len(units) < len(got):  # (one ConsumeQueue file at a time)
                more = s.get_consume_queue_units("T", q, len(units), len(got) - len(units))
                assert more
                units += more
            assert [u[0] for u in units] == [r.commit_log_offset for r in got]
    finally:
        s.shutdown()


def test_sync_flush_shutdown_writes_what_is_staged(tmp_path: Path) -> None:
    """Puts accepted but not yet committed when the store shuts down are written by the shutdown,
    as RocketMQ's shutdown commits its write buffer: after a restart they are there."""
    c = cfg(tmp_path, flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20)
    s = open_store(c)

    async def put_and_shut_down() -> None:
        for i in range(5):
            assert s.put_message(msg(body=b"last-%d" % i)).status is PutMessageStatus.PUT_OK
        s.shutdown()  # before this round's commit runs

    asyncio.run(put_and_shut_down())
    s = DefaultMessageStore.open(c, start_services=False)
    try:
        assert s.last_exit_ok
        got = s.get_messages("T", 0, 0, 10)
        assert [decode_message(b).body for b in got.buffers] == [b"last-%d" % i for i in range(5)]
    finally:
        s.shutdown()


def test_async_flush_reaches_disk(tmp_path: Path) -> None:
    s = open_store(cfg(tmp_path, flush_interval_commitlog=20, flush_commitlog_least_pages=0))
    try:
        s.put_message(msg())
        deadline = time.monotonic() + 5
        while s.commitlog.queue.flushed_where < s.commitlog.get_max_offset() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.commitlog.queue.flushed_where == s.commitlog.get_max_offset()
    finally:
        s.shutdown()


def test_clean_expired_consume_queues_drops_the_queues_wholly_below_the_commitlog(tmp_path: Path) -> None:
    """cleanExpiredConsumerQueue: a queue whose every message went with expired CommitLog files is
    destroyed (its next message is offset 0 again, as in Java); a queue with a message still in the
    CommitLog stays, and so does SCHEDULE_TOPIC_XXXX's; consumer offsets stay."""
    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=1), start_services=False)
    try:
        for i in range(40):
            s.put_message(msg("Old", body=os.urandom(900), qid=i % 2))
        s.meta.commit_offset("g", "Old", 1, 20)
        for _ in range(20):
            s.put_message(msg("Filler", body=os.urandom(900)))
        s.put_message(msg("Old", body=b"late", qid=0))
        s.put_message(msg("Live"))
        s.put_message(msg("Filler"))
        assert s.clean_expired_consume_queues() == 0  # nothing expired yet
        s.clean_expired_files(force=True, now_ms=int(time.time() * 1000) + 2 * 3_600_000)
        assert len(s.commitlog.queue.files) == 1  # only the segment being written is left
        assert s.clean_expired_consume_queues() == 1
        assert ("Old", 1) not in s.consume_queues and ("Old", 0) in s.consume_queues
        assert not (tmp_path / "consumequeue" / "Old" / "1").exists()
        assert ("Live", 0) in s.consume_queues and s.meta.query_offset("g", "Old", 1) == 20
        assert s.put_message(msg("Old", qid=1)).queue_offset == 0
    finally:
        s.shutdown()


def test_expired_segments_cleanup_moves_min_offsets(tmp_path: Path) -> None:
    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=1, delete_when="99"), start_services=False)
    try:
        res = [s.put_message(msg(body=os.urandom(900), qid=i % 2)) for i in range(120)]
        n_files = len(s.commitlog.queue.files)
        assert n_files >= 7
        now = int(time.time() * 1000)
        assert s.clean_expired_files(now_ms=now) == 0  # not the hour in delete_when, not forced
        assert s.clean_expired_files(force=True, now_ms=now) == 0  # younger than 1 hour
        deleted = s.clean_expired_files(force=True, now_ms=now + 2 * 3_600_000)
        assert deleted == min(10, n_files - 1)  # the segment being written always stays
        min_phy = s.get_min_phy_offset()
        assert min_phy == s.commitlog.queue.files[0].file_from_offset > 0
        for q in (0, 1):
            lo = s.get_min_offset_in_queue("T", q)
            first_kept = next(r for r in res if r.queue_id == q and r.physical_offset >= min_phy)
            assert lo == first_kept.queue_offset
            assert s.get_messages("T", q, 0, 8).status is G.OFFSET_TOO_SMALL
            got = s.get_messages("T", q, lo, 1)
            assert (
                got.status is G.FOUND
                and decode_message(got.buffers[0]).commit_log_offset == first_kept.physical_offset
            )
        assert len(list((tmp_path / "consumequeue" / "T" / "0").iterdir())) == 1
        assert s.look_message_by_offset(res[0].physical_offset) is None
    finally:
        s.shutdown()


def test_long_topic_v2_record_and_ipv6_store_host(tmp_path: Path) -> None:
    c = cfg(tmp_path, store_host="::1", store_port=10911)
    s = open_store(c)
    long_topic = "L" * 200
    try:
        r = s.put_message(msg(topic=long_topic, body=b"v2", TAGS="t"))
        assert r.status is PutMessageStatus.PUT_OK and len(r.msg_id) == 56  # IPv6 offsetMsgId
        m = decode_message(s.get_messages(long_topic, 0, 0, 1).buffers[0])
        assert m.magic == MAGIC_V2 and m.topic == long_topic and m.body == b"v2"
        assert m.sys_flag & MessageSysFlag.STOREHOST_V6 and m.store_host == bytes(15) + b"\x01"
        short = s.put_message(msg(topic="S", body=b"v1"))
        assert decode_message(s.select_one_message_by_offset(short.physical_offset)).magic == MAGIC_V1
        units = s.get_consume_queue_units(long_topic, 0, 0, 8)
        assert units == [(r.physical_offset, r.wrote_bytes, java_string_hash("t"))]
    finally:
        s.shutdown()
    s = open_store(c)  # recovery validates v2 records too
    try:
        assert s.get_max_offset_in_queue(long_topic, 0) == 1 and s.get_max_offset_in_queue("S", 0) == 1
        assert s.get_max_phy_offset() == short.physical_offset + short.wrote_bytes
    finally:
        s.shutdown()


def test_concurrent_writers_readers_and_cleanup(tmp_path: Path) -> None:
    import threading

    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=0))
    stop = threading.Event()
    errors: list[BaseException] = []

    def guard(fn):
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                stop.set()

        return run

    def writer(qid: int) -> None:
        for i in range(400):
            assert s.put_message(msg(qid=qid, body=b"%d" % i * 50)).status is PutMessageStatus.PUT_OK

    def reader() -> None:
        offsets = {0: 0, 1: 0}
        while not stop.is_set():
            for q in (0, 1):
                got = s.get_messages("T", q, offsets[q], 32)
                for b in got.buffers:
                    m = decode_message(b)
                    assert m.queue_id == q and m.queue_offset >= offsets[q]
                offsets[q] = max(offsets[q], got.next_begin_offset)

    def cleaner() -> None:
        while not stop.is_set():
            s.clean_expired_files(force=True)
            time.sleep(0.001)

    writers = [threading.Thread(target=guard(lambda q=q: writer(q))) for q in (0, 1)]
    others = [threading.Thread(target=guard(reader)), threading.Thread(target=guard(cleaner))]
    for t in writers + others:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in others:
        t.join()
    try:
        assert not errors, errors
        assert [s.get_max_offset_in_queue("T", q) for q in (0, 1)] == [400, 400]
        assert s.get_min_phy_offset() > 0  # segments really were deleted underneath the readers
        for q in (0, 1):
            lo = s.get_min_offset_in_queue("T", q)
            got = s.get_messages("T", q, lo, 1)
            if lo < 400:  # the oldest message still stored is served from the corrected min offset
                assert got.status is G.FOUND and decode_message(got.buffers[0]).queue_offset == lo
            else:  # everything of this queue lay in deleted segments
                assert got.status is G.OFFSET_OVERFLOW_ONE
    finally:
        s.shutdown()


def test_offset_by_time_picks_exact_or_closest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmqgate.store.put_message as pm

    times = iter([1000, 2000, 2000, 2000, 5000, 9000])
    monkeypatch.setattr(pm, "_time_ns", lambda: next(times) * 1_000_000)
    s = DefaultMessageStore.open(cfg(tmp_path), start_services=False)
    try:
        for _ in range(6):
            s.put_message(msg())
        by_time = lambda t: s.get_offset_in_queue_by_time("T", 0, t)  # noqa: E731
        assert by_time(2000) == 1  # the first of equal store times
        assert by_time(500) == 0  # older than everything
        assert by_time(99_999) == 5  # newer than everything: the newest message (4.9)
        assert by_time(3000) == 3 and by_time(4500) == 4  # closest neighbour
        assert s.get_offset_in_queue_by_time("nope", 0, 1) == 0
    finally:
        s.shutdown()


def test_disk_full_refuses_writes_and_cleans_forcibly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collections

    import rmqgate.store.message_store as ms

    Usage = collections.namedtuple("Usage", "total used free")
    usage = {"used": 50}
    monkeypatch.setattr(ms.shutil, "disk_usage", lambda _p: Usage(100, usage["used"], 100 - usage["used"]))
    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=72, delete_when="99"), start_services=False)
    try:
        for _ in range(60):
            s.put_message(msg(body=os.urandom(900)))
        assert s.clean_expired_files() == 0  # 50%: nothing to do
        future = time.time() + 60  # age must not matter (it once did, by a millisecond)
        for f in (tmp_path / "commitlog").iterdir():
            os.utime(f, (future, future))
        usage["used"] = 95
        deleted = s.clean_expired_files()  # over 85%: delete even young segments (max 10 a round)
        assert deleted > 0 and s.get_min_phy_offset() > 0
        assert s.put_message(msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE  # over 90%
        usage["used"] = 60
        s.clean_expired_files()
        assert s.put_message(msg()).status is PutMessageStatus.PUT_OK
        for _ in range(60):
            s.put_message(msg(body=os.urandom(900)))
        s.config.disk_max_used_space_ratio = 99  # read as 95, as Java's getDiskMaxUsedSpaceRatio clamps it
        usage["used"] = 96
        before = s.get_min_phy_offset()
        assert s.clean_expired_files() > 0 and s.get_min_phy_offset() > before
    finally:
        s.shutdown()


def test_consume_queues_are_cleaned_only_when_the_commitlog_min_offset_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CleanConsumeQueueService's rule: a cleanup round that deleted no CommitLog segment scans no
    ConsumeQueue (each scan walks a queue's first file, every 10 s, for every queue)."""
    scans: list[str] = []
    delete_expired_files = ConsumeQueue.delete_expired_files

    def counted(cq: ConsumeQueue, min_phy: int) -> int:
        scans.append(cq.topic)
        return delete_expired_files(cq, min_phy)

    monkeypatch.setattr(ConsumeQueue, "delete_expired_files", counted)
    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=0, delete_when="99"), start_services=False)
    try:
        for i in range(60):
            s.put_message(msg(body=os.urandom(900), qid=i % 2))
        s.clean_expired_files()
        assert scans == ["T", "T"]  # the first round after the start
        s.clean_expired_files()
        assert scans == ["T", "T"]  # nothing deleted, no scan
        assert s.clean_expired_files(force=True) > 0
        assert scans == ["T"] * 4 and s.get_min_offset_in_queue("T", 0) > 0
    finally:
        s.shutdown()


def test_put_result_msg_id_follows_the_store_port(store: DefaultMessageStore) -> None:
    """The broker sets store_port once it listens: ids must name the port written in the record."""
    for port in (0, 10911, 0x8C0B):
        store.config.store_port = port
        res = store.put_message(msg(body=b"p%d" % port))
        rec = decode_message(store.select_one_message_by_offset(res.physical_offset), 0)
        assert rec.store_port == port
        assert res.msg_id == rec.offset_msg_id
        assert res.msg_id.endswith(f"{res.physical_offset:016X}")


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_commitlog_warmer_zeroes_ahead_without_touching_records(tmp_path: Path, flush: str) -> None:
    """The warmer zeroes each new segment's unwritten rest while single puts, batches and segment
    rolls go on (under SYNC_FLUSH while the flush thread commits the staged records to the same
    segment): every record must come back intact, in order, with its ConsumeQueue unit."""
    s = DefaultMessageStore.open(cfg(tmp_path, mapped_file_size_commitlog=256 * 1024, flush_disk_type=flush))
    assert s._warmer is not None and s._warmer.is_alive()
    rnd = os.urandom
    sent: list[tuple[int, bytes]] = []
    try:
        for i in range(3000):
            body = rnd(50 + (i * 7919) % 3000)
            if i % 10 == 0:
                res = s.put_messages([msg(body=body, qid=i % 3), msg(body=body[::-1], qid=i % 3)])
                sent += [(res.physical_offset, body), (-1, body[::-1])]
            else:
                res = s.put_message(msg(body=body, qid=i % 3))
                sent.append((res.physical_offset, body))
            assert res.status is PutMessageStatus.PUT_OK
        if res.durable is not None:  # SYNC_FLUSH: the staged records reach the segment in this commit
            assert res.durable.result(timeout=60) is PutMessageStatus.PUT_OK
        deadline = time.monotonic() + 5
        while s._warmer.warmed_to <= s.get_max_phy_offset() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s._warmer.warmed_to > s.get_max_phy_offset()  # it runs ahead of the appends
        last = s.commitlog.queue.files[-1]
        assert os.stat(last.path).st_blocks * 512 > last.wrote_position  # zeroed ahead: not sparse there
    finally:
        s.shutdown()
    s = DefaultMessageStore.open(cfg(tmp_path, mapped_file_size_commitlog=256 * 1024), start_services=False)
    try:
        records = [
            decode_message(f.buf, pos, check_crc=True)
            for f in s.commitlog.queue.files
            for pos in _record_positions(f.buf, f.wrote_position)
        ]
        assert [r.body for r in records] == [b for _, b in sent]
        assert all(p in (-1, r.commit_log_offset) for (p, _), r in zip(sent, records, strict=True))
        for q in range(3):
            got = [r for r in records if r.queue_id == q]
            assert s.get_max_offset_in_queue("T", q) == len(got)
            assert [r.queue_offset for r in got] == list(range(len(got)))
    finally:
        s.shutdown()


def test_commitlog_warmer_sleeps_until_appends_near_its_end(tmp_path: Path) -> None:
    """The warmer runs when an append comes within commitlog_warm_ahead of the warmed end, not on a
    timer: an idle store leaves it asleep (each wake-up takes the GIL from the appending thread)."""
    ahead = 256 * 1024
    s = DefaultMessageStore.open(
        cfg(tmp_path, mapped_file_size_commitlog=16 * 1024 * 1024, commitlog_warm_ahead=ahead)
    )
    warmer = s._warmer
    assert warmer is not None
    passes: list[float] = []
    chunk = warmer._warm_one_chunk
    warmer._warm_one_chunk = lambda: passes.append(time.monotonic()) or chunk()  # type: ignore[method-assign]
    try:
        body = os.urandom(1000)

        def warmed_past(offset: int) -> None:
            deadline = time.monotonic() + 30
            while warmer.warmed_to <= offset + ahead and time.monotonic() < deadline:
                time.sleep(0.01)
            assert warmer.warmed_to > offset + ahead

        s.put_message(msg(body=body))
        warmed_past(s.get_max_phy_offset())
        time.sleep(0.05)
        idle_from = len(passes)
        time.sleep(0.6)  # a 10 ms timer would have run ~60 passes; the 1 s safety timeout at most one
        assert len(passes) - idle_from <= 1
        while s.get_max_phy_offset() < 2 * 1024 * 1024:  # appends well past the first warmed range
            assert s.put_message(msg(body=body)).status is PutMessageStatus.PUT_OK
        warmed_past(s.get_max_phy_offset())  # woken by the appends, it kept ahead of them
    finally:
        s.shutdown()


def _record_positions(buf: memoryview, end: int) -> list[int]:
    out, pos = [], 0
    while pos < end:
        total = int.from_bytes(buf[pos : pos + 4], "big")
        if total <= 0 or int.from_bytes(buf[pos + 4 : pos + 8], "big") == 0xCBD43194:
            break
        out.append(pos)
        pos += total
    return out


def test_put_totals_count_appends_since_open(tmp_path: Path) -> None:
    """StoreStatsService's putMessageTimesTotal / SizeTotal, from the queue offsets and CommitLog end:
    since this open, batches count per message, and deleting a topic takes nothing back."""
    s = DefaultMessageStore.open(cfg(tmp_path))
    try:
        assert s.put_totals() == (0, 0)
        sizes = [s.put_message(msg(qid=i % 2)).wrote_bytes for i in range(5)]
        sizes.append(s.put_message(msg("Other")).wrote_bytes)
        sizes.append(s.put_messages([msg(qid=1), msg(qid=1), msg(qid=1)]).wrote_bytes)
        assert s.put_totals() == (9, sum(sizes))
        assert s.topic_put_totals() == {"T": 8, "Other": 1}
        assert s.delete_topics({"Other"}) == 1
        assert s.put_totals() == (9, sum(sizes))
        assert s.topic_put_totals() == {"T": 8}
        s.put_message(msg())
        assert s.put_totals()[0] == 10
    finally:
        s.shutdown()
    s = DefaultMessageStore.open(cfg(tmp_path))
    try:
        assert s.put_totals() == (0, 0)  # what was there before this open is not counted
        assert s.topic_put_totals() == {}
        size = s.put_message(msg(qid=1)).wrote_bytes
        assert s.put_totals() == (1, size)
        assert s.topic_put_totals() == {"T": 1}
    finally:
        s.shutdown()


def test_disk_ratio_is_javas_used_over_used_and_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """commitLogDiskRatio / consumeQueueDiskRatio (brokerStatus, clusterList's #SPACE) and the
    cleaner's threshold read the partition as Java's getDiskPartitionSpaceUsedPercent does: used /
    (used + available), rounded up to a percent - df's figure. Blocks reserved for root count as
    neither (here 150 of 252 GiB: used/total would say 10%, df and Java say 24%)."""
    import collections

    import rmqgate.store.message_store as ms
    from rmqgate.store.clean import disk_used_percent

    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(ms.shutil, "disk_usage", lambda _p: Usage(252, 24, 78))
    assert disk_used_percent(tmp_path) == 24
    s = DefaultMessageStore.open(cfg(tmp_path), start_services=False)
    try:
        info = s.runtime_info()
        assert (info["commitLogDiskRatio"], info["consumeQueueDiskRatio"]) == ("0.24", "0.24")
        monkeypatch.setattr(ms.shutil, "disk_usage", lambda _p: Usage(100, 50, 50))
        assert s.runtime_info()["commitLogDiskRatio"] == "0.5"  # Double.toString of 50 / 100.0
    finally:
        s.shutdown()


def test_min_phy_offset_is_minus_one_until_the_commitlog_has_a_segment(tmp_path: Path) -> None:
    """``getMinPhyOffset`` (brokerStatus' commitLogMinOffset) of an empty CommitLog is -1, as a fresh
    Java 4.9.8 broker's brokerStatus prints it; the first put's segment starts at 0."""
    s = DefaultMessageStore.open(cfg(tmp_path), start_services=False)
    try:
        assert s.get_min_phy_offset() == -1 and s.runtime_info()["commitLogMinOffset"] == "-1"
        s.put_message(msg())
        assert s.get_min_phy_offset() == 0 and s.runtime_info()["commitLogMinOffset"] == "0"
    finally:
        s.shutdown()
