"""IndexFile/IndexService details: key hashing as RocketMQ's indexKeyHashMethod, chains, capacity."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqgate.store.index_file import IndexFile, IndexService, index_key_hash
from rmqgate.store.layout import INDEX_ENTRY
from rmqgate.wire.message import java_string_hash
from rmqgate.wire.message_const import MessageSysFlag


@given(st.text(min_size=1, max_size=40), st.text(max_size=80))
def test_key_hash_is_abs_java_hash_of_topic_hash_key(topic: str, key: str) -> None:
    svc = IndexService(Path("/nonexistent"), 7, 7, java_string_hash)
    h = java_string_hash(f"{topic}#{key}")
    assert svc.key_hash(f"{topic}#{key}") == (0 if h == -(2**31) else abs(h))


def test_key_hash_is_abs_of_java_hash_with_min_value_zero() -> None:
    svc = IndexService(Path("/nonexistent"), 7, 7, lambda s: {"a": -5, "b": -0x80000000}.get(s, 9))
    assert (svc.key_hash("a"), svc.key_hash("b"), svc.key_hash("c")) == (5, 0, 9)


def test_chains_collisions_and_rollover(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, 3, 10, java_string_hash)  # 3 slots: every chain collides
    for i in range(25):
        svc.build_index("T", f"k{i % 5} all", None, 1000 + i, 1_700_000_000_000 + i * 1000)
    assert len(svc.files) == 6  # 50 entries, 9 per file (index numbers start at 1)
    offsets, last_ts, last_phy = svc.query_offset("T", "k2", 64, 0, 1 << 62)
    assert sorted(offsets) == [1002, 1007, 1012, 1017, 1022]
    assert (last_ts, last_phy) == (1_700_000_000_000 + 24_000, 1024)
    assert len(svc.query_offset("T", "all", 64, 0, 1 << 62)[0]) == 25
    assert svc.query_offset("T", "all", 4, 0, 1 << 62)[0] == [1024, 1023, 1022, 1021]  # newest first
    # time window: only entries stored within [begin, end] (second resolution)
    window = svc.query_offset("T", "all", 64, 1_700_000_010_000, 1_700_000_012_000)[0]
    assert sorted(window) == [1010, 1011, 1012]
    assert svc.query_offset("U", "k2", 64, 0, 1 << 62)[0] == []  # other topic, same key
    svc.close()
    again = IndexService(tmp_path, 3, 10, java_string_hash)
    assert again.load(True, 0) is None and len(again.files) == 6
    assert sorted(again.query_offset("T", "k2", 64, 0, 1 << 62)[0]) == [1002, 1007, 1012, 1017, 1022]
    again.close()


def test_keys_of_one_message_written_together_equal_one_by_one(tmp_path: Path) -> None:
    """build_index writes a message's entries, then the header, then the slots; the bytes must be
    those of putting each key alone (same-slot keys of one message chain to each other)."""
    together = IndexService(tmp_path / "a", 3, 9, java_string_hash)
    alone = IndexService(tmp_path / "b", 3, 9, java_string_hash)
    ts = 1_700_000_000_000
    for i in range(12):
        keys = f"k{i} k{i + 1} k{i % 2} x order-{i % 3:020d}-é"
        uniq = f"7F00000100012A9F{i:016X}"  # long ids: hashed from cached seeds of their heads
        together.build_index("T", keys, uniq, 100 + i, ts + i * 1500)
        f = alone._last_file()
        for k in [uniq, *keys.split(" ")]:
            while not f.put_key(alone.key_hash(f"T#{k}"), 100 + i, ts + i * 1500):
                f = alone._last_file()
    assert len(together.files) == len(alone.files) > 2
    for a, b in zip(together.files, alone.files, strict=True):
        a._write_header()
        b._write_header()
        assert bytes(a.buf) == bytes(b.buf)
    together.close()
    alone.close()


@given(st.text(min_size=1, max_size=30), st.text(max_size=60))
def test_key_hash_from_utf8_bytes_and_cached_seeds_is_the_hash_of_the_joined_key(
    topic: str, key: str
) -> None:
    svc = IndexService(Path("/nonexistent"), 7, 7, java_string_hash)
    want = svc.key_hash(f"{topic}#{key}")
    try:
        raw_topic, raw_key = topic.encode(), key.encode()
    except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
        raw_topic = raw_key = None
    for _ in range(2):  # the second time from the cached seeds
        assert svc._topic_key_hash(topic, key) == want
        if raw_key is not None:
            assert svc._topic_key_hash(raw_topic, raw_key) == want


@functools.cache
def _min_value_key(topic: str) -> str:
    """An ASCII key whose "topic#key" hashes to Integer.MIN_VALUE (indexKeyHashMethod's 0)."""
    seed = java_string_hash(f"{topic}#")
    for n in range(100_000):
        head = f"K{n:08d}"
        # the last four characters, each 32 + a digit in 0..94, weighted 31**3 .. 1
        rest = (0x80000000 - java_string_hash(head, seed) * 923521 - 32 * 30784) & 0xFFFFFFFF
        tail = []
        for weight in (29791, 961, 31, 1):
            c = min(94, rest // weight)
            tail.append(32 + c)
            rest -= c * weight
        if rest == 0:
            return head + bytes(tail).decode()
    raise AssertionError("no key found")


@given(
    st.lists(
        st.tuples(st.sampled_from(["T", "Topic2", "é"]), st.text(max_size=40) | st.sampled_from(["M"])),
        min_size=1,
        max_size=12,
    )
)
def test_uniq_keys_of_a_batch_are_hashed_as_the_joined_keys(pairs: list[tuple[str, str]]) -> None:
    """The batch's UNIQ_KEY hashes (ASCII bytes from cached seeds, the rest the general way) are
    indexKeyHashMethod of "topic#key", MIN_VALUE included, across topics within one batch."""
    pairs = [(t, _min_value_key(t) if k == "M" else k) for t, k in pairs]
    records = []
    want = []
    for i, (topic, key) in enumerate(pairs):
        try:
            raw = key.encode()
        except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
            continue
        if raw:
            records.append((i * 10, 0, 1_700_000_000_000, topic.encode(), None, raw))
            want.append(index_key_hash(f"{topic}#{key}"))
    with tempfile.TemporaryDirectory() as tmp:
        svc = IndexService(Path(tmp), 7, 64, java_string_hash)
        svc.build_index_records(records, 0)
        got = []
        for f in svc.files:
            for idx in range(1, f.index_count):
                got.append(INDEX_ENTRY.unpack_from(f.buf, f.entries_pos + idx * INDEX_ENTRY.size)[0])
        svc.close()
    assert got == want


def test_records_indexed_in_batches_equal_messages_indexed_key_by_key(tmp_path: Path) -> None:
    """build_index_records (what the dispatcher feeds from scanned bytes) writes the bytes that putting
    each key alone writes; rolled-back messages and messages below the indexed end are skipped."""
    batched = IndexService(tmp_path / "a", 5, 13, java_string_hash)
    alone = IndexService(tmp_path / "b", 5, 13, java_string_hash)
    ts = 1_700_000_000_000
    records = []
    for i in range(40):
        keys = f"k{i} k{i % 3}  order-{i % 4:020d}-é" if i % 5 else ""
        uniq = f"7F00000100012A9F{i:016X}" if i % 7 else None
        sys_flag = MessageSysFlag.TRANSACTION_ROLLBACK if i % 11 == 3 else MessageSysFlag.TRANSACTION_COMMIT
        records.append(
            (100 + i * 10, sys_flag, ts + i * 700, b"Topic", keys.encode() or None, uniq and uniq.encode())
        )
        if sys_flag == MessageSysFlag.TRANSACTION_ROLLBACK or not (keys.strip() or uniq):
            continue
        f = alone._last_file()
        for k in [uniq, *keys.split(" ")] if uniq else keys.split(" "):
            if k:
                while not f.put_key(alone.key_hash(f"Topic#{k}"), 1100 + i * 10, ts + i * 700):
                    f = alone._last_file()
    for chunk in range(0, 40, 6):
        batched.build_index_records(records[chunk : chunk + 6], 1000)
    batched.build_index_records(records[30:34], 1000)  # a re-dispatch after recovery: nothing new
    assert len(batched.files) == len(alone.files) > 3
    for a, b in zip(batched.files, alone.files, strict=True):
        a._write_header()
        b._write_header()
        assert bytes(a.buf) == bytes(b.buf)
    assert (
        batched.query_offset("Topic", "k2", 64, 0, 1 << 62)[0]
        == alone.query_offset("Topic", "k2", 64, 0, 1 << 62)[0]
    )
    batched.close()
    alone.close()


def test_malformed_utf8_keys_are_indexed_as_java_decodes_them(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (another writer's record) index as the text Java's decoder makes of
    them, with U+FFFD for what does not decode, instead of stopping the dispatcher."""
    svc = IndexService(tmp_path, 7, 20, java_string_hash)
    svc.build_index_records([(0, 0, 1_700_000_000_000, b"T\xff", b"ok bad\xfe\xff", b"U\xc3")], 500)
    for key in ("ok", "bad\ufffd\ufffd", "U\ufffd"):
        assert svc.query_offset("T\ufffd", key, 8, 0, 1 << 62)[0] == [500], key
    svc.close()


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs, not even a close."""


@pytest.mark.parametrize("slot_writes_before_kill", [0, 2, 5, None])
def test_a_dispatcher_killed_mid_batch_finds_every_key_after_resuming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slot_writes_before_kill: int | None
) -> None:
    """Killed after the batch's entries and header count, before, among or (None) after its slot
    writes but before the end offset: resuming from the file's end offset, as the dispatcher process
    does, indexes the batch again and every key is found (a kill used to lose all but the last)."""
    import rmqgate.store.index_file as index_file

    ts = 1_700_000_000_000
    before = [(i * 100, 0, ts + i, b"T", f"old{i} k{i % 2}".encode(), None) for i in range(4)]
    batch = [(400 + i * 100, 0, ts + 4 + i, b"T", f"new{i} k{i % 2}".encode(), None) for i in range(5)]
    svc = IndexService(tmp_path / "index", 64, 1000, java_string_hash)
    svc.build_index_records(before, 0)
    real_slot_pack, real_header = index_file._slot_pack, IndexFile._write_header
    slots = headers = 0

    def slot_pack(buf, pos, value):  # type: ignore[no-untyped-def]
        nonlocal slots
        if slots == slot_writes_before_kill:
            raise _Killed
        slots += 1
        real_slot_pack(buf, pos, value)

    def write_header(self: IndexFile) -> None:
        nonlocal headers
        if headers == 1 and slot_writes_before_kill is None:  # the header with the batch's end offset
            raise _Killed
        headers += 1
        real_header(self)

    monkeypatch.setattr(index_file, "_slot_pack", slot_pack)
    monkeypatch.setattr(IndexFile, "_write_header", write_header)
    with pytest.raises(_Killed):
        svc.build_index_records(batch, 0)
    monkeypatch.undo()
    for f in svc.files:
        f.close_readonly()  # what the page cache holds, nothing written back

    svc = IndexService(tmp_path / "index", 64, 1000, java_string_hash)
    assert svc.load(True, 0) is None
    resume = svc.files[-1].end_phy_offset
    assert resume == before[-1][0]  # the killed batch is not counted as indexed
    svc.build_index_records([r for r in before + batch if r[0] >= resume], 0)
    for key, offsets in [("old0", [0]), ("old3", [300]), ("new0", [400]), ("new4", [800])]:
        assert svc.query_offset("T", key, 10, 0, 1 << 62)[0] == offsets
    assert sorted(svc.query_offset("T", "k1", 10, 0, 1 << 62)[0]) == [100, 300, 500, 700]
    svc.close()
