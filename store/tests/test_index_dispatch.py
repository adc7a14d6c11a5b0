"""The index dispatcher process: it indexes what the store commits, survives its own death and the
store's, quits when its store closes, and leaves index files equal to inline indexing's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqgate.store.api import StoreConfig
from rmqgate.store.layout import INDEX_ENTRY, INDEX_HEADER, INDEX_HEADER_SIZE, INDEX_SLOT
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt, decode_message, iter_commitlog

HERE = Path(__file__).resolve().parent


def cfg(root: Path, **kw: object) -> StoreConfig:
    base: dict[str, object] = dict(
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=128,
        max_index_num=500,
        index_query_wait=30_000,  # a freshly spawned idle-priority dispatcher on a stalled CI machine
        delete_when="99",  # no scheduled cleanup mid-test, whatever the hour
    )
    base.update(kw)
    return StoreConfig(str(root), **base)  # type: ignore[arg-type]


def msg(i: int) -> MessageExt:
    return MessageExt(
        "IdxT",
        body=b"body-%d" % i,
        queue_id=i % 3,
        properties={"KEYS": f"k{i} g{i % 7}", "UNIQ_KEY": f"U{i:08d}", "TAGS": "t"},
    )


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie whose parent died is reaped by init; one of ours would stay one
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def index_contents(root: Path, slots: int = 128) -> list[tuple[bytes, list[tuple[int, ...]]]]:
    """Per index file: its hash slots and its entries without their time diffs (store times differ)."""
    out = []
    for p in sorted((root / "index").iterdir()):
        data = p.read_bytes()
        entries_pos = INDEX_HEADER_SIZE + slots * INDEX_SLOT.size
        count = INDEX_HEADER.unpack_from(data, 0)[5]
        entries = [INDEX_ENTRY.unpack_from(data, entries_pos + i * INDEX_ENTRY.size) for i in range(count)]
        out.append((data[INDEX_HEADER_SIZE:entries_pos], [(h, phy, prev) for h, phy, _, prev in entries]))
    return out


def test_dispatcher_indexes_everything_and_matches_inline_indexing(tmp_path: Path) -> None:
    s = DefaultMessageStore.open(cfg(tmp_path / "proc"))
    proc = s._index_process
    assert proc is not None and proc.proc is not None
    res = [s.put_message(msg(i)) for i in range(600)]  # 3 entries each, 500 per file: several files
    for i in (0, 299, 599):
        (b,) = s.query_message("IdxT", f"k{i}", 8).buffers
        assert decode_message(b).body == b"body-%d" % i
        assert len(s.query_message("IdxT", f"U{i:08d}", 8).buffers) == 1
    assert len(s.query_message("IdxT", "g3", 200).buffers) == 64  # capped by max_msgs_num_batch
    assert s.runtime_info()["dispatchBehindBytes"] == "0"
    pid = proc.proc.pid
    s.shutdown()
    assert proc.proc.returncode == 0 and wait_gone(pid)

    inline = DefaultMessageStore.open(cfg(tmp_path / "inline"), start_services=False)
    for i in range(600):
        inline.put_message(msg(i))
    inline.shutdown()
    # the same slots and entries in as many files (names are creation times, times differ)
    got, want = index_contents(tmp_path / "proc"), index_contents(tmp_path / "inline")
    assert len(got) == len(want) >= 3
    assert got == want
    reopened = DefaultMessageStore.open(cfg(tmp_path / "proc"), start_services=False)
    try:
        (b,) = reopened.query_message("IdxT", "U00000123", 8).buffers
        assert decode_message(b).commit_log_offset == res[123].physical_offset
    finally:
        reopened.shutdown()


def test_killed_dispatcher_is_restarted_and_catches_up(tmp_path: Path) -> None:
    s = DefaultMessageStore.open(cfg(tmp_path))
    try:
        proc = s._index_process
        assert proc is not None and proc.proc is not None
        for i in range(200):
            s.put_message(msg(i))
        killed = proc.proc  # the service thread may restart it (and replace proc.proc) at any moment
        first = killed.pid
        os.kill(first, signal.SIGKILL)
        assert killed.wait(10) == -signal.SIGKILL
        for i in range(200, 400):
            s.put_message(msg(i))
        for i in range(0, 400, 37):  # a query restarts it and waits for it to catch up
            assert len(s.query_message("IdxT", f"U{i:08d}", 8).buffers) == 1, i
        assert proc.restarts == 1 and proc.proc.pid != first
    finally:
        s.shutdown()


def test_a_dead_dispatcher_is_restarted_once_however_many_threads_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service thread's tick and querying threads all check the dispatcher: one restart. A
    slow log write between a thread's check and its restart once let a second thread restart too."""
    import threading

    import rmqgate.store.index_dispatch as index_dispatch

    monkeypatch.setattr(index_dispatch._log, "warning", lambda *_a: time.sleep(0.05))
    s = DefaultMessageStore.open(cfg(tmp_path))
    try:
        proc = s._index_process
        assert proc is not None and proc.proc is not None
        killed = proc.proc
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        proc._spawned_at -= 2.0  # past the once-a-second restart gate
        gate = threading.Barrier(8)

        def notice() -> None:
            gate.wait()
            proc.ensure_running()

        threads = [threading.Thread(target=notice) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert proc.restarts == 1
        s.put_message(msg(1))
        assert len(s.query_message("IdxT", "U00000001", 8).buffers) == 1
    finally:
        s.shutdown()


def test_dispatcher_quits_when_its_store_is_closed_without_shutdown(tmp_path: Path) -> None:
    s = DefaultMessageStore.open(cfg(tmp_path))
    proc = s._index_process
    assert proc is not None and proc.proc is not None
    s.put_message(msg(1))
    # as a crash would: the store's threads and files gone without shutdown, its lock released
    s._shutdown = True
    for thread in (s._service, s._warmer, s._flush_service):
        assert thread is not None
        thread.stop()
    s._close_files()
    os.close(s._lock_fd)
    assert wait_gone(proc.proc.pid)
    s2 = DefaultMessageStore.open(cfg(tmp_path), start_services=False)  # inline: takes the writer lock
    try:
        assert len(s2.query_message("IdxT", "k1", 8).buffers) == 1
    finally:
        s2.shutdown()


def test_store_killed_mid_stream_leaves_every_present_message_indexed_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    code = f"""
import sys, time
sys.path.insert(0, {str(HERE)!r})
from test_index_dispatch import cfg, msg
from rmqgate.store.message_store import DefaultMessageStore
from pathlib import Path
s = DefaultMessageStore.open(cfg(Path({str(root)!r})))
print(s._index_process.proc.pid, flush=True)
i = 0
while True:
    s.put_message(msg(i))
    i += 1
"""
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None
        dispatcher = int(writer.stdout.readline())
        time.sleep(0.8)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert wait_gone(dispatcher)  # orphaned, it flushes and exits by itself
    s = DefaultMessageStore.open(cfg(root), start_services=False)
    try:
        assert not s.last_exit_ok and s.same_boot
        present = [m for f in s.commitlog.queue.files for m in iter_commitlog(f.buf[: f.wrote_position])]
        assert len(present) > 100
        for m in present[:: max(1, len(present) // 60)] + present[-3:]:
            uniq = m.properties["UNIQ_KEY"]
            got = s.query_message("IdxT", uniq, 8).buffers
            assert [decode_message(b).commit_log_offset for b in got] == [m.commit_log_offset], uniq
    finally:
        s.shutdown()


def test_expired_commitlog_segments_take_their_index_files_along(tmp_path: Path) -> None:
    s = DefaultMessageStore.open(cfg(tmp_path, file_reserved_time=0))
    try:
        for i in range(900):
            s.put_message(msg(i))
        s.query_message("IdxT", "k1", 1)  # everything indexed
        before = len(list((tmp_path / "index").iterdir()))
        assert before >= 5
        s.clean_expired_files(force=True, now_ms=int(time.time() * 1000) + 3_600_000)
        deadline = time.monotonic() + 10
        while len(list((tmp_path / "index").iterdir())) >= before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list((tmp_path / "index").iterdir())) < before
        assert s.query_message("IdxT", "k899", 8).buffers  # the newest is still found
    finally:
        s.shutdown()
