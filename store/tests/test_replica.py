"""The store's replication side: a master's CommitLog read as HAConnection transfers it, appended to
a slave's store as appendToCommitLog writes it, and dispatched there to the same queue offsets."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rmqgate.store.api import PutMessageStatus, StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.store.replica import AppendRefused, CommitLogAppender, read_commit_log
from rmqgate.wire.message import RECORD_PREFIX, MessageExt

SEGMENT = 16 * 1024


def cfg(root: Path, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(
        mapped_file_size_commitlog=SEGMENT,
        mapped_file_size_consume_queue=50 * 20,
        max_hash_slot_num=128,
        max_index_num=500,
        index_dispatch_process=False,
        delete_when="99",
    )
    base.update(kw)
    return StoreConfig(str(root), **base)  # type: ignore[arg-type]


def msg(i: int, qid: int) -> MessageExt:
    return MessageExt(
        "R",
        body=b"%04d" % i * 200,
        queue_id=qid,
        born_timestamp=int(time.time() * 1000),
        born_host=b"\x7f\x00\x00\x01",
        born_port=40000,
        properties={"KEYS": f"k{i}"},
    )


@pytest.fixture()
def master(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    s = DefaultMessageStore.open(cfg(tmp_path / "m"))
    for i in range(40):  # ~34 KiB: three segments, each ended by a BLANK record
        assert s.put_message(msg(i, i % 3)).status is PutMessageStatus.PUT_OK
    yield s
    s.shutdown()


def open_slave(root: Path, **kw: object) -> DefaultMessageStore:
    return DefaultMessageStore.open(cfg(root, broker_role="SLAVE", **kw))


def replicate(master: DefaultMessageStore, appender: CommitLogAppender, start: int, batch: int) -> list[int]:
    """Transfer [start, master's end) as HAConnection does; the size of each transfer."""
    sizes = []
    offset = start
    while (data := read_commit_log(master, offset, batch)) is not None:
        appender.append(offset, data)
        sizes.append(len(data))
        offset += len(data)
    return sizes


def commitlog(store: DefaultMessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    while start < end:
        data = read_commit_log(store, start, end - start)
        assert data is not None
        out += data
        start += len(data)
    return bytes(out)


def queue(store: DefaultMessageStore, qid: int, offset: int = 0) -> list[tuple[int, bytes]]:
    got = store.get_messages("R", qid, offset, 100)
    return list(zip(got.queue_offsets, [bytes(b) for b in got.buffers], strict=True))


def test_a_transfer_stays_within_one_segment_and_the_batch_size(master: DefaultMessageStore) -> None:
    end = master.get_max_phy_offset()
    assert end > 2 * SEGMENT
    assert len(read_commit_log(master, 0, 1 << 20) or b"") == SEGMENT  # the whole first file, BLANK end too
    assert len(read_commit_log(master, SEGMENT - 100, 1 << 20) or b"") == 100
    assert len(read_commit_log(master, 10, 1000) or b"") == 1000
    assert read_commit_log(master, end, 1000) is None


def test_a_slave_appends_and_dispatches_what_the_master_holds(
    master: DefaultMessageStore, tmp_path: Path
) -> None:
    slave = open_slave(tmp_path / "s")
    try:
        sizes = replicate(master, CommitLogAppender(slave), 0, 1000)  # batches end mid-record
        assert max(sizes) == 1000 and len(slave.commitlog.queue.files) == 3
        end = master.get_max_phy_offset()
        assert slave.get_max_phy_offset() == end
        assert commitlog(slave, 0, end) == commitlog(master, 0, end)
        for qid in range(3):
            assert queue(slave, qid) == queue(master, qid)
            assert slave.get_max_offset_in_queue("R", qid) == master.get_max_offset_in_queue("R", qid)
        assert len(slave.query_message("R", "k7", 32).buffers) == 1  # the index too
        assert slave.put_totals()[0] == 40
    finally:
        slave.shutdown()


def test_appends_are_refused_off_the_commitlogs_end(master: DefaultMessageStore, tmp_path: Path) -> None:
    slave = open_slave(tmp_path / "s")
    try:
        appender = CommitLogAppender(slave)
        with pytest.raises(AppendRefused):  # an empty CommitLog begins at a segment's start only
            appender.append(100, read_commit_log(master, 100, 100) or b"")
        data = read_commit_log(master, 0, 500) or b""
        appender.append(0, data)
        for at in (0, 499, 501):
            with pytest.raises(AppendRefused):
                appender.append(at, data)
        with pytest.raises(AppendRefused):  # past the segment's end
            appender.append(500, bytes(SEGMENT))
        assert slave.get_max_phy_offset() == 500
    finally:
        slave.shutdown()


def test_an_empty_slave_can_begin_at_a_later_segment_and_restart(
    master: DefaultMessageStore, tmp_path: Path
) -> None:
    """HAConnection starts an empty slave at the master's last segment; the slave's queues begin
    at the queue offsets found there, and a reopened slave goes on from its end."""
    last = master.commitlog.queue.files[-1].file_from_offset
    slave = open_slave(tmp_path / "s")
    try:
        appender = CommitLogAppender(slave)
        replicate(master, appender, last, 700)
        assert slave.get_min_phy_offset() == last
        qmin = slave.get_min_offset_in_queue("R", 0)
        in_last = [
            q
            for q in range(master.get_max_offset_in_queue("R", 0))
            if master.get_commit_log_offset_in_queue("R", 0, q) >= last
        ]
        assert qmin > 0 and qmin == in_last[0]
        assert queue(slave, 0, qmin) == queue(master, 0, qmin)
    finally:
        slave.shutdown()
    for i in range(40, 45):
        master.put_message(msg(i, 0))
    slave = open_slave(tmp_path / "s")
    try:
        replicate(master, CommitLogAppender(slave), slave.get_max_phy_offset(), 700)
        assert queue(slave, 0, qmin) == queue(master, 0, qmin)
    finally:
        slave.shutdown()


def test_a_sync_flush_slave_answers_the_flush_of_what_it_appended(
    master: DefaultMessageStore, tmp_path: Path
) -> None:
    slave = open_slave(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    try:
        data = read_commit_log(master, 0, 5000) or b""
        fut = CommitLogAppender(slave).append(0, data)
        assert isinstance(fut, concurrent.futures.Future)
        assert fut.result(10) is PutMessageStatus.PUT_OK
        assert slave.commitlog.queue.flushed_where >= 5000
        assert queue(slave, 0) == queue(master, 0)[: len(queue(slave, 0))] and queue(slave, 0)
    finally:
        slave.shutdown()


def test_each_transfer_is_dispatched_as_one_batch_up_to_its_last_whole_record(
    master: DefaultMessageStore, tmp_path: Path
) -> None:
    """The store's reput stops where a transfer cuts a record (or a segment's BLANK end) and says so:
    the appender goes on from there; the records a transfer completes reach dispatch in one call."""
    record_ends = set()
    boundaries = {f.end_offset for f in master.commitlog.queue.files}  # (past a BLANK end)
    for qid in range(3):
        for q, record in queue(master, qid):
            phys = master.get_commit_log_offset_in_queue("R", qid, q)
            record_ends.add(phys + len(record))
            boundaries.add(phys)
    boundaries |= record_ends
    slave = open_slave(tmp_path / "s")
    batches: list[int] = []
    dispatch = slave._dispatch_entries

    def counted(entries: Sequence[Any], committed: int) -> None:
        batches.append(len(entries))
        dispatch(entries, committed)

    slave._dispatch_entries = counted  # type: ignore[method-assign]
    try:
        appender = CommitLogAppender(slave)
        offset = 0
        while (data := read_commit_log(master, offset, 1500)) is not None:
            before, calls = appender.reput_from, len(batches)
            appender.append(offset, data)
            offset += len(data)
            assert appender.reput_from == max(b for b in boundaries if b <= offset)
            completed = len([e for e in record_ends if before < e <= appender.reput_from])
            assert batches[calls:] == ([completed] if completed else [])
        assert sum(batches) == 40 and max(batches) > 1
        assert appender.reput_from == master.get_max_phy_offset()
        for qid in range(3):
            assert queue(slave, qid) == queue(master, qid)
    finally:
        slave.shutdown()


def test_a_whole_but_unreadable_record_is_skipped_and_the_rest_dispatched(
    master: DefaultMessageStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As ReputMessageService: a record whose size is sound but whose bytes do not decode is logged and
    passed over; the appender does not stop (or retry it) there."""
    data = bytearray(read_commit_log(master, 0, SEGMENT) or b"")
    first = RECORD_PREFIX.unpack_from(data, 0)[0]
    RECORD_PREFIX.pack_into(data, first, RECORD_PREFIX.unpack_from(data, first)[0], 0x12345678)
    slave = open_slave(tmp_path / "s")
    try:
        appender = CommitLogAppender(slave)
        appender.append(0, data)
        assert appender.reput_from == SEGMENT
        assert (
            f"undecodable record of {RECORD_PREFIX.unpack_from(data, first)[0]} bytes @{first}" in caplog.text
        )
        replicate(master, appender, SEGMENT, 1000)
        assert queue(slave, 0) == queue(master, 0) and queue(slave, 2) == queue(master, 2)
        assert queue(slave, 1, 1) == queue(master, 1, 1)  # (the second record was queue 1's first)
    finally:
        slave.shutdown()
