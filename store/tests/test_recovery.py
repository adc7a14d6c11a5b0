"""Recovery: torn or corrupt last records are dropped exactly; SIGKILLed SYNC_FLUSH writers lose no
acknowledged message and leave nothing half-visible; ConsumeQueues agree with the CommitLog."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqgate.store.api import GetMessageStatus, PutMessageStatus, StoreConfig
from rmqgate.store.mapped_file import MappedFile
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt, decode_message, iter_commitlog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from crash_writer import BATCH, QUEUES, TOPIC, body_for, crash_config  # noqa: E402


def small(root: Path) -> StoreConfig:
    return StoreConfig(
        str(root),
        mapped_file_size_commitlog=8 * 1024,
        mapped_file_size_consume_queue=30 * 20,
        max_hash_slot_num=64,
        max_index_num=300,
    )


def crash(store: DefaultMessageStore) -> None:
    """Stop using the store without a clean shutdown (the abort file stays)."""
    store._shutdown = True
    store._close_files()
    os.close(store._lock_fd)


def fill(root: Path, n: int, *, clean: bool) -> list:
    s = DefaultMessageStore.open(small(root), start_services=False)
    res = [
        s.put_message(MessageExt("R", body=os.urandom(300 + i), queue_id=i % 2, properties={"KEYS": f"k{i}"}))
        for i in range(n)
    ]
    if clean:
        s.shutdown()
    else:
        crash(s)
    return res


def segment_of(root: Path, phys: int, size: int = 8 * 1024) -> tuple[Path, int]:
    return root / "commitlog" / f"{phys - phys % size:020d}", phys % size


@pytest.mark.parametrize("clean", [True, False], ids=["after-clean-stop", "after-crash"])
@pytest.mark.parametrize("damage", ["torn-tail", "body-flip", "zero-size", "props-cut"])
def test_damaged_last_record_is_dropped_exactly(tmp_path: Path, clean: bool, damage: str) -> None:
    res = fill(tmp_path, 41, clean=clean)
    last = res[-1]
    path, rel = segment_of(tmp_path, last.physical_offset)
    data = bytearray(path.read_bytes())
    if damage == "torn-tail":
        data[rel + last.wrote_bytes // 2 : rel + last.wrote_bytes] = bytes(
            last.wrote_bytes - last.wrote_bytes // 2
        )
    elif damage == "body-flip":
        data[rel + 120] ^= 0x55
    elif damage == "zero-size":
        data[rel : rel + 4] = bytes(4)
    else:  # the record claims fewer bytes than its fields need
        data[rel : rel + 4] = (last.wrote_bytes - 3).to_bytes(4, "big")
    path.write_bytes(bytes(data))

    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert s.last_exit_ok is clean
        assert s.get_max_phy_offset() == last.physical_offset
        assert s.get_max_offset_in_queue("R", last.queue_id) == last.queue_offset
        other = 1 - last.queue_id
        assert s.get_max_offset_in_queue("R", other) == 20 + (other == 0)
        for r in res[:-1]:
            m = s.look_message_by_offset(r.physical_offset)
            assert m is not None and m.commit_log_offset == r.physical_offset
        assert s.look_message_by_offset(last.physical_offset) is None
        assert s.query_message("R", "k40", 4).buffers == []
        again = s.put_message(MessageExt("R", body=b"again", queue_id=last.queue_id))
        assert (again.physical_offset, again.queue_offset) == (last.physical_offset, last.queue_offset)
    finally:
        s.shutdown()
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        got = s.get_messages("R", last.queue_id, last.queue_offset, 1)
        assert decode_message(got.buffers[0]).body == b"again"
    finally:
        s.shutdown()


def test_abnormal_recovery_rebuilds_lost_consume_queue_and_index(tmp_path: Path) -> None:
    res = fill(tmp_path, 60, clean=False)
    # lose everything the ConsumeQueues and index hold (as if their pages never reached disk)
    for f in (tmp_path / "consumequeue" / "R").rglob("0000*"):
        f.write_bytes(bytes(f.stat().st_size))
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert not s.last_exit_ok
        for q in (0, 1):
            assert s.get_max_offset_in_queue("R", q) == 30
            got = s.get_messages("R", q, 0, 32)
            assert [decode_message(b).commit_log_offset for b in got.buffers] == [
                r.physical_offset for r in res if r.queue_id == q
            ][: got.message_count]
        assert len(s.query_message("R", "k59", 4).buffers) == 1
    finally:
        s.shutdown()


@pytest.mark.parametrize("clean", [True, False], ids=["after-clean-stop", "after-crash"])
def test_a_missing_middle_segment_keeps_the_segments_after_it(tmp_path: Path, clean: bool) -> None:
    """A CommitLog segment removed from the middle (outside damage): recovery goes on with the next
    segment, as Java's walks the files it has, instead of deleting every later, intact one."""
    res = fill(tmp_path, 60, clean=clean)
    segments = sorted((tmp_path / "commitlog").iterdir())
    assert len(segments) >= 4
    gone = int(segments[-2].name)
    segments[-2].unlink()
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert s.get_max_phy_offset() == res[-1].physical_offset + res[-1].wrote_bytes
        for r in (res[0], res[-1]):
            m = decode_message(s.select_one_message_by_offset(r.physical_offset))
            assert (m.queue_id, m.queue_offset) == (r.queue_id, r.queue_offset)
        lost = [r for r in res if gone <= r.physical_offset < gone + 8 * 1024]
        assert lost and all(s.select_one_message_by_offset(r.physical_offset) is None for r in lost)
        q = res[-1].queue_id
        assert s.get_max_offset_in_queue("R", q) == res[-1].queue_offset + 1
        assert s.put_message(MessageExt("R", body=b"on", queue_id=q)).queue_offset == res[-1].queue_offset + 1
    finally:
        s.shutdown()


def verify_store(root: Path, acked: set[int]) -> int:
    """Open after a kill and check the invariants; returns the number of messages present."""
    s = DefaultMessageStore.open(crash_config(str(root)), start_services=False)
    try:
        # every record in the CommitLog is intact, in order, and belongs to one queue position
        per_queue: dict[int, list[tuple[int, int, int]]] = {q: [] for q in range(QUEUES)}
        seqs: list[int] = []
        end = s.get_max_phy_offset()
        for f in s.commitlog.queue.files:
            for m in iter_commitlog(f.buf[: f.wrote_position]):
                assert m.commit_log_offset < end
                seq = int(m.properties["SEQ"])
                assert m.body == body_for(seq)  # nothing half-written is visible
                per_queue[m.queue_id].append((m.queue_offset, m.commit_log_offset, m.store_size))
                seqs.append(seq)
        assert len(seqs) == len(set(seqs))
        batches: dict[str, int] = {}
        for f in s.commitlog.queue.files:
            for m in iter_commitlog(f.buf[: f.wrote_position], with_body=False):
                if "BATCH" in m.properties:
                    batches[m.properties["BATCH"]] = batches.get(m.properties["BATCH"], 0) + 1
        assert all(n == BATCH for n in batches.values()), batches  # a batch is all there or not at all
        missing = acked - set(seqs)
        assert not missing, f"acknowledged but lost: {sorted(missing)[:10]}"
        # the ConsumeQueue of each queue lists exactly those records, in order
        for q, recs in per_queue.items():
            assert [r[0] for r in recs] == list(range(len(recs)))
            assert s.get_max_offset_in_queue(TOPIC, q) == len(recs)
            cq = s.consume_queues.get((TOPIC, q))
            units = [cq.get_unit(i) for i in range(len(recs))] if cq else []
            assert [(u[0], u[1]) for u in units] == [(r[1], r[2]) for r in recs]
            if recs:
                got = s.get_messages(TOPIC, q, len(recs) - 1, 1)
                assert got.status is GetMessageStatus.FOUND
        return len(seqs)
    finally:
        s.shutdown()


@pytest.mark.slow
def test_sigkill_sync_flush_writer_many_times(tmp_path: Path) -> None:
    seed = int(os.environ.get("RMQGATE_CRASH_SEED", "0")) or random.randrange(1 << 31)
    print(f"RMQGATE_CRASH_SEED={seed}")  # shown with a failure: the same kill points again
    rnd = random.Random(seed)
    root = tmp_path / "store"
    acked: set[int] = set()
    present = 0
    rounds = int(os.environ.get("RMQGATE_CRASH_ROUNDS", "40"))
    t_end = time.monotonic() + 45
    done = 0
    kills: list[int] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    while done < rounds and time.monotonic() < t_end:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "crash_writer.py"), str(root), str(present)],
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            assert proc.stdout is not None
            if rnd.random() < 0.2:
                time.sleep(rnd.uniform(0.1, 0.6))  # possibly while it is still recovering
            else:
                first = proc.stdout.readline()  # the store is open (recovery done)
                assert first == b"ready\n", first
                # kill at a random point: almost at once, or after many appends
                time.sleep(rnd.choice([0.0, rnd.uniform(0, 0.05), rnd.uniform(0.05, 0.3)]))
        finally:
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate()
        lines = out.split(b"\n")
        acked.update(int(x) for x in lines if x.strip() and x != b"ready")
        present = verify_store(root, acked)
        assert not list(root.rglob("*.tmp"))  # half-created segments are cleared on open
        assert present >= len(acked)
        done += 1
        kills.append(present)
    print(f"crash rounds: {done}, acknowledged: {len(acked)}, present after each restart: {kills}")
    assert done >= 5
    assert len(acked) > 100  # the runs did real work


@pytest.mark.parametrize("reboot", [False, True], ids=["process-crash", "power-loss"])
@pytest.mark.parametrize("flushed_before_crash", [True, False])
def test_index_after_crash_has_every_key_once(
    tmp_path: Path, flushed_before_crash: bool, reboot: bool
) -> None:
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    for i in range(200):  # 300 entries per index file, 2 per message: several index files
        s.put_message(MessageExt("I", body=b"%d" % i, properties={"KEYS": f"key{i}", "UNIQ_KEY": f"U{i}"}))
        if flushed_before_crash and i == 170:
            s.flush_logics()
    before = sorted(p.name for p in (tmp_path / "index").iterdir())
    crash(s)
    if reboot:  # the abort file records the boot it was written in
        (tmp_path / "abort").write_text("another-boot")
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert not s.last_exit_ok and len(before) >= 2
        after = sorted(p.name for p in (tmp_path / "index").iterdir())
        if reboot:  # index files not known flushed were dropped and rebuilt from the CommitLog
            assert not s.same_boot and after != before
        else:  # same boot: the page cache kept every mapped write, the files are reused
            assert s.same_boot and after == before
        for i in range(200):
            for key in (f"key{i}", f"U{i}"):
                got = s.query_message("I", key, 8)
                assert [decode_message(b).body for b in got.buffers] == [b"%d" % i], key
    finally:
        s.shutdown()


def test_dropped_records_never_resurface(tmp_path: Path) -> None:
    """A corrupt record cuts the log there; records behind it are gone for good, even when a later
    append of the same size lines up with their stale bytes and the store crashes again."""
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    _, b, c = (s.put_message(MessageExt("R", body=bytes([i]) * 100)) for i in range(3))
    s.shutdown()
    path, rel = segment_of(tmp_path, b.physical_offset)
    data = bytearray(path.read_bytes())
    data[rel + 100] ^= 0xFF  # corrupt b's body: b and c are cut
    path.write_bytes(bytes(data))
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    assert s.get_max_phy_offset() == b.physical_offset and s.get_max_offset_in_queue("R", 0) == 1
    d = s.put_message(MessageExt("R", body=b"\x07" * 100))
    assert d.physical_offset == b.physical_offset and d.wrote_bytes == b.wrote_bytes
    crash(s)
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert s.get_max_phy_offset() == d.physical_offset + d.wrote_bytes
        assert s.get_max_offset_in_queue("R", 0) == 2
        assert s.look_message_by_offset(c.physical_offset) is None
    finally:
        s.shutdown()


@pytest.mark.parametrize("clean", [True, False], ids=["after-clean-stop", "after-crash"])
def test_a_cut_behind_thousands_of_units_is_one_consume_queue_cut(
    tmp_path: Path, clean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corrupt second record cuts 1,999 ConsumeQueue units over 67 files. Recovery finds the cut by
    bisection and makes it once (each cut zeroes the rest of a file: one per unit took 12 ms each)."""
    config = small(tmp_path)
    config.mapped_file_size_commitlog = 512 * 1024  # one segment: normal recovery checks it too
    s = DefaultMessageStore.open(config, start_services=False)
    _, second = (s.put_message(MessageExt("R", body=b"r" * 20)) for _ in range(2))
    for _ in range(1998):
        s.put_message(MessageExt("R", body=b"r" * 20))
    s.shutdown() if clean else crash(s)
    path, rel = segment_of(tmp_path, second.physical_offset, config.mapped_file_size_commitlog)
    data = bytearray(path.read_bytes())
    data[rel + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    cuts: list[str] = []
    zero_from = MappedFile.zero_from

    def counted(f: MappedFile, pos: int) -> None:
        if "consumequeue" in str(f.path):
            cuts.append(f"{f.path.name}@{pos}")
        zero_from(f, pos)

    monkeypatch.setattr(MappedFile, "zero_from", counted)
    s = DefaultMessageStore.open(config, start_services=False)
    try:
        assert s.get_max_phy_offset() == second.physical_offset
        assert (s.get_min_offset_in_queue("R", 0), s.get_max_offset_in_queue("R", 0)) == (0, 1)
        # the queue's own recovery zeroes past its last unit once; then the one cut
        assert len(cuts) <= 2 and cuts[-1] == f"{0:020d}@20", cuts
        assert sorted(p.name for p in (tmp_path / "consumequeue" / "R" / "0").iterdir()) == [f"{0:020d}"]
        assert s.put_message(MessageExt("R", body=b"n")).queue_offset == 1
    finally:
        s.shutdown()


def test_an_idle_queue_keeps_its_offsets_over_a_crash_after_its_segments_expired(tmp_path: Path) -> None:
    """A queue written once, whose CommitLog segments then expired (its last ConsumeQueue file stays):
    after a crash its units point below the CommitLog, which proves nothing against them. They stay,
    and the next message gets the next queue offset, not 0 again (what consumers committed)."""
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    for _ in range(5):
        s.put_message(MessageExt("IDLE", body=b"x" * 300))
    for _ in range(100):
        s.put_message(MessageExt("BUSY", body=b"y" * 300))
    assert s.clean_expired_files(force=True, now_ms=int(time.time() * 1000) + 100 * 3600_000) > 0
    assert s.get_min_phy_offset() > s.get_commit_log_offset_in_queue("IDLE", 0, 4)
    crash(s)
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert not s.last_exit_ok
        assert s.get_max_offset_in_queue("IDLE", 0) == 5
        assert s.put_message(MessageExt("IDLE", body=b"z")).queue_offset == 5
    finally:
        s.shutdown()


def test_a_failed_dispatch_leaves_the_abort_file_and_the_next_start_dispatches_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConsumeQueue write that fails after the CommitLog append makes the store refuse writes; its
    shutdown keeps the abort file (Java keeps it unless writable and dispatched), so the next start
    recovers as after a crash and the message gets its unit and its index entry."""
    from rmqgate.store.consume_queue import ConsumeQueue

    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    assert s.put_message(MessageExt("F", body=b"a", properties={"KEYS": "ka"})).queue_offset == 0

    def broken(*args: object) -> bool:
        raise OSError("no space left on device")

    monkeypatch.setattr(ConsumeQueue, "put", broken)
    failed = s.put_message(MessageExt("F", body=b"b", properties={"KEYS": "kb"}))
    assert failed.status is PutMessageStatus.UNKNOWN_ERROR
    monkeypatch.undo()
    assert s.put_message(MessageExt("F", body=b"c")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    s.shutdown()
    assert (tmp_path / "abort").exists()
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert not s.last_exit_ok
        assert s.get_max_offset_in_queue("F", 0) == 2
        assert [decode_message(b).body for b in s.get_messages("F", 0, 0, 10).buffers] == [b"a", b"b"]
        assert len(s.query_message("F", "kb", 10, 0, 1 << 62).buffers) == 1
        assert s.put_message(MessageExt("F", body=b"c")).queue_offset == 2
    finally:
        s.shutdown()
    assert not (tmp_path / "abort").exists()


def test_abnormal_recovery_starts_from_checkpoint_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rmqgate.store.put_message as pm

    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))  # one second per append
    monkeypatch.setattr(pm, "_time_ns", lambda: next(clock) * 1_000_000)
    cfg = small(tmp_path)
    cfg.max_index_num = 30  # full index files are kept after a crash; only the open one is rebuilt
    s = DefaultMessageStore.open(cfg, start_services=False)
    for i in range(100):
        s.put_message(MessageExt("C", body=os.urandom(700), queue_id=i % 2, properties={"KEYS": f"c{i}"}))
    s.commitlog.queue.flush()
    s.checkpoint.physic_msg_timestamp = s._last_store_ts
    s.flush_logics()  # checkpoint: everything so far is on disk
    segments_before = len(s.commitlog.queue.files)
    for i in range(100, 110):
        s.put_message(MessageExt("C", body=os.urandom(700), queue_id=i % 2, properties={"KEYS": f"c{i}"}))
    crash(s)
    s = DefaultMessageStore.open(cfg, start_services=False)
    try:
        assert not s.last_exit_ok
        # re-dispatch began a few seconds before the checkpoint, not at the first segment
        assert 0 < s.recovered_from <= s.commitlog.queue.files[segments_before - 1].file_from_offset
        assert [s.get_max_offset_in_queue("C", q) for q in (0, 1)] == [55, 55]
        for i in (0, 50, 99, 100, 109):
            assert len(s.query_message("C", f"c{i}", 4).buffers) == 1, i
    finally:
        s.shutdown()


@pytest.mark.parametrize("clean", [True, False], ids=["after-clean-stop", "after-crash"])
def test_recovery_says_how_many_messages_and_bytes_it_dropped(
    tmp_path: Path, clean: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The CommitLog's last three records lost (zeroed, as pages never written back) while the
    ConsumeQueues list them: recovery reports those three messages and their bytes, and logs it."""
    res = fill(tmp_path, 30, clean=clean)
    lost = res[-3:]
    for r in lost:
        path, rel = segment_of(tmp_path, r.physical_offset)
        data = bytearray(path.read_bytes())
        data[rel : rel + r.wrote_bytes] = bytes(r.wrote_bytes)
        path.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, logger="rmqgate.store.recovery"):
        s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        loss = s.recovery_loss
        assert loss is not None and loss.clean is clean
        assert loss.commitlog_end == lost[0].physical_offset
        assert loss.messages == 3
        assert loss.bytes == lost[-1].physical_offset + lost[-1].wrote_bytes - lost[0].physical_offset
        assert f"dropped 3 messages, {loss.bytes} bytes" in caplog.text
    finally:
        s.shutdown()
    s = DefaultMessageStore.open(small(tmp_path), start_services=False)
    try:
        assert s.recovery_loss == (True, lost[0].physical_offset, 0, 0)
    finally:
        s.shutdown()
