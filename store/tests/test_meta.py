"""LMDB metadata side-store and the ``rmqgate store`` config import/export commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rmqgate.store.meta import CONSUMER_OFFSETS, TOPICS, LmdbMetaStore
from rmqgate.tools.cli import main as rmqgate_main
from rmqgate.wire import fastjson


def test_put_get_delete_iterate_and_versions(tmp_path: Path) -> None:
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert meta.env.info()["map_size"] >= 1 << 30
        assert meta.get(TOPICS, "A") is None
        meta.put(TOPICS, "A", {"topicName": "A", "readQueueNums": 4, "perm": 6})
        v1 = meta.data_version(TOPICS)
        meta.put_many(TOPICS, {"B": {"topicName": "B"}, "C": {"topicName": "C"}})
        v2 = meta.data_version(TOPICS)
        assert v2["counter"] == v1["counter"] + 1 and v2["timestamp"] >= v1["timestamp"]
        assert [k for k, _ in meta.items(TOPICS)] == ["A", "B", "C"]
        assert meta.delete(TOPICS, "B") and not meta.delete(TOPICS, "B")
        meta.put_many(TOPICS, {"Z": {"topicName": "Z"}}, replace=True)
        assert dict(meta.items(TOPICS)) == {"Z": {"topicName": "Z"}}
    finally:
        meta.close()


def test_consumer_offsets_persist_and_survive_reopen(tmp_path: Path) -> None:
    meta = LmdbMetaStore(tmp_path / "meta")
    meta.commit_offset("g1", "T", 0, 10)
    meta.commit_offset("g1", "T", 3, 7)
    meta.commit_offset("g2", "U", 1, 5)
    assert meta.query_offset("g1", "T", 3) == 7 and meta.query_offset("g1", "T", 1) == -1
    assert meta.get(CONSUMER_OFFSETS, "T@g1") is None  # in memory until persisted
    meta.persist_offsets()
    assert meta.get(CONSUMER_OFFSETS, "T@g1") == {"0": 10, "3": 7}
    meta.commit_offset("g1", "T", 0, 11)
    meta.set_delay_offset(3, 99)
    meta.close()  # persists on close
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert meta.offset_table() == {"T@g1": {0: 11, 3: 7}, "U@g2": {1: 5}}
        assert meta.delay_offsets() == {3: 99}
        meta.remove_offsets(group="g2")
        assert meta.offset_table() == {"T@g1": {0: 11, 3: 7}}
    finally:
        meta.close()


#: empty, past max_key_size, not UTF-8 (a lone surrogate), 600 UTF-8 bytes of 300 characters
ODD_KEYS = ["", "g" * 600, "lone\ud800surrogate", "\u00e9" * 300]


def test_keys_lmdb_cannot_hold_as_they_are(tmp_path: Path) -> None:
    """Java's tables take any string as a key; LMDB only 1..511 bytes of it. Such keys still round-trip
    (the SEND of a "%RETRY%" topic auto-creates the subscription group "")."""
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        rows = {k: {"groupName": k, "n": i} for i, k in enumerate(ODD_KEYS)} | {"plain": {"n": -1}}
        meta.put_many(TOPICS, rows)
        for k, v in rows.items():
            assert meta.get(TOPICS, k) == v
        assert dict(meta.items(TOPICS)) == rows
        assert meta.delete(TOPICS, "g" * 600) and meta.get(TOPICS, "g" * 600) is None
        assert meta.get(TOPICS, "g" * 601) is None
        assert meta.delete(TOPICS, "") and not meta.delete(TOPICS, "")
    finally:
        meta.close()


def test_one_odd_offset_key_does_not_stop_the_others_persisting(tmp_path: Path) -> None:
    """Before, a topic@group LMDB refused failed every persist round (and the close), so no consumer
    offset was stored again."""
    meta = LmdbMetaStore(tmp_path / "meta")
    meta.commit_offset("g1", "T", 0, 10)
    for i, group in enumerate(ODD_KEYS):
        meta.commit_offset(group, "T", 1, i)
    meta.persist_offsets()
    meta.commit_offset("g1", "T", 0, 11)
    meta.close()
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert meta.query_offset("g1", "T", 0) == 11
        for i, group in enumerate(ODD_KEYS):
            assert meta.query_offset(group, "T", 1) == i
        assert dict(meta.items(CONSUMER_OFFSETS))[f"T@{'g' * 600}"] == {"1": 1}
    finally:
        meta.close()


def test_concurrent_writers_are_atomic(tmp_path: Path) -> None:
    meta = LmdbMetaStore(tmp_path / "meta")
    try:

        def work(n: int) -> None:
            for i in range(50):
                meta.put_many(TOPICS, {f"t{n}-{i}": {"n": n}, f"shadow{n}-{i}": {"n": n}})

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = dict(meta.items(TOPICS))
        assert len(rows) == 400
        assert meta.data_version(TOPICS)["counter"] == 200
    finally:
        meta.close()


def test_cli_import_export_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "java-config"
    src.mkdir()
    (src / "topics.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},\n\t"topicConfigTable":{\n'
        '\t\t"TopicA":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":8,\n'
        '\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicA",\n\t\t\t"topicSysFlag":0,\n'
        '\t\t\t"writeQueueNums":8\n\t\t}\n\t}\n}'
    )
    (src / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"TopicA@G":{0:12,1:3,7:900\n\t\t}\n\t}\n}'
    )
    (src / "delayOffset.json").write_text('{"offsetTable":{1:123,2:5}}')
    # subscriptionGroup.json only as the .bak a crashed Java broker can leave behind
    (src / "subscriptionGroup.json.bak").write_text(
        '{"dataVersion":{"counter":1,"timestamp":1},"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":16}}}'
    )
    store = tmp_path / "store"
    assert rmqgate_main(["store", "import-config", str(src), "--store", str(store)]) == 0
    out = tmp_path / "exported"
    assert rmqgate_main(["store", "export-config", str(out), "--store", str(store)]) == 0
    assert fastjson.loads((out / "topics.json").read_text()) == fastjson.loads(
        (src / "topics.json").read_text()
    )
    offsets = (out / "consumerOffset.json").read_text()
    assert "{0:12,1:3,7:900" in offsets and '"0"' not in offsets
    assert fastjson.loads((out / "delayOffset.json").read_text()) == {"offsetTable": {"1": 123, "2": 5}}
    assert (
        fastjson.loads((out / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]["G"][
            "retryMaxTimes"
        ]
        == 16
    )
    assert (out / "topics.json").read_text().startswith('{\n\t"dataVersion":{\n\t\t"counter":3,')
    assert rmqgate_main(["store", "stat", "--store", str(store)]) == 0
    assert rmqgate_main(["store", "import-config", str(tmp_path / "nope"), "--store", str(store)]) == 1


def test_map_grows_when_full(tmp_path: Path) -> None:
    meta = LmdbMetaStore(tmp_path / "meta", map_size=256 * 1024)
    try:
        big = {f"t{i}": {"topicName": f"t{i}", "pad": "x" * 2000} for i in range(400)}  # ~800 KiB
        meta.put_many(TOPICS, big)
        assert meta.env.info()["map_size"] > 256 * 1024
        assert len(list(meta.items(TOPICS))) == 400
    finally:
        meta.close()


def test_offsets_deleted_while_a_persist_runs_stay_deleted(tmp_path: Path) -> None:
    """A group's offsets removed while the periodic persist is writing (it gathered them before the
    delete): the delete waits for that write, so the persist cannot bring them back."""
    meta = LmdbMetaStore(tmp_path / "meta")
    meta.commit_offset("g", "T", 0, 150)
    entered, release = threading.Event(), threading.Event()
    real_write = meta._write

    def slow_write(fn):  # type: ignore[no-untyped-def]
        entered.set()
        release.wait(10)
        return real_write(fn)

    meta._write = slow_write  # type: ignore[method-assign]
    persist = threading.Thread(target=meta.persist_offsets)
    persist.start()
    assert entered.wait(10)
    meta._write = real_write  # type: ignore[method-assign]
    remove = threading.Thread(target=lambda: meta.remove_offsets(group="g"))
    remove.start()
    remove.join(0.3)
    release.set()
    persist.join(10)
    remove.join(10)
    assert meta.query_offset("g", "T", 0) == -1 and meta.get(CONSUMER_OFFSETS, "T@g") is None
    meta.close()
    meta = LmdbMetaStore(tmp_path / "meta")
    assert meta.query_offset("g", "T", 0) == -1
    meta.close()


def test_import_and_export_refuse_a_store_a_broker_runs_on(tmp_path: Path) -> None:
    """The CLI (its own process) takes the store's lock: an import under a running broker would be
    overwritten by its next persist, and a grown LMDB map would fail the broker's transactions."""
    from rmqgate.store.api import StoreConfig
    from rmqgate.store.message_store import DefaultMessageStore

    root, out = tmp_path / "store", tmp_path / "out"
    cli = [
        sys.executable,
        "-m",
        "rmqgate.tools.cli",
        "store",
        "export-config",
        str(out),
        "--store",
        str(root),
    ]
    store = DefaultMessageStore.open(StoreConfig(str(root)), start_services=False)
    try:
        busy = subprocess.run(cli, capture_output=True, text=True, timeout=120)
        assert busy.returncode == 1 and "is in use" in busy.stderr and not out.exists()
    finally:
        store.shutdown()
    assert subprocess.run(cli, capture_output=True, timeout=120).returncode == 0 and out.is_dir()


def test_offsets_committed_after_the_last_persist_survive_a_killed_process(tmp_path: Path) -> None:
    """A process killed between persists (nothing closed): every commit, delete and replacement since
    the last persist is replayed from the journal at the next open, in order, and then persisted."""
    root = tmp_path / "meta"
    script = f"""
import os
import rmqgate.store.meta as m
from rmqgate.store.meta import CONSUMER_OFFSETS, LmdbMetaStore
m._JOURNAL_SIZE = 64  # a few entries a journal: the full ones are followed by new ones
meta = LmdbMetaStore({str(root)!r})
meta.commit_offset("g", "T", 0, 10)
meta.commit_offset("gone", "T", 0, 3)
meta.persist_offsets()
meta.commit_offset("g", "T", 0, 11)
meta.commit_offset("g", "T", 1, 4)
meta.remove_offsets(group="gone")
meta.put_many(CONSUMER_OFFSETS, {{"U@reset": {{"2": 7}}}})
meta.commit_offset("h", "T", 3, 1)
meta.commit_offset("h", "T", 3, 2)
os._exit(0)  # no close, no persist: as a SIGKILL leaves it
"""
    subprocess.run([sys.executable, "-c", script], check=True)
    assert [p.name for p in root.glob("offsets.journal.*")]  # left behind
    meta = LmdbMetaStore(root)
    try:
        want = {"T@g": {0: 11, 1: 4}, "U@reset": {2: 7}, "T@h": {3: 2}}
        assert meta.offset_table() == want
        assert meta.get(CONSUMER_OFFSETS, "T@g") == {"0": 11, "1": 4}  # persisted at open
        assert meta.get(CONSUMER_OFFSETS, "T@gone") is None
    finally:
        meta.close()
    assert not list(root.glob("offsets.journal.*"))  # a clean close leaves none
    meta = LmdbMetaStore(root)
    try:
        assert meta.offset_table() == want
    finally:
        meta.close()


def test_a_commit_outlives_a_killed_process(tmp_path: Path) -> None:
    """A put is in the file when it returns: a process that dies right after it leaves the row to the
    next open. (This holds with or without an fsync per commit; the next test shows there is none.)"""
    code = (
        "import os, sys; from pathlib import Path; from rmqgate.store.meta import LmdbMetaStore, TOPICS\n"
        "m = LmdbMetaStore(Path(sys.argv[1]))\n"
        "m.put(TOPICS, 'Killed', {'topicName': 'Killed', 'perm': 6})\n"
        "os._exit(9)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "meta")], timeout=60)
    assert done.returncode == 9
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert meta.get(TOPICS, "Killed") == {"topicName": "Killed", "perm": 6}
    finally:
        meta.close()


SYNC_CALLS = ("fsync", "fdatasync", "msync", "sync_file_range", "sync", "syncfs")


def test_commits_are_not_fsynced_one_by_one(tmp_path: Path) -> None:
    """Topic puts and offset commits make no sync system call (the store service's rounds do): the
    commit loop runs under strace, and its one deliberate fsync, after the loop, shows the trace sees
    them."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (make setup installs it)")
    code = (
        "import os, sys; from pathlib import Path; from rmqgate.store.meta import LmdbMetaStore, TOPICS\n"
        "m = LmdbMetaStore(Path(sys.argv[1]))\n"
        "for i in range(30):\n"
        "    m.put(TOPICS, f'T{i}', {'topicName': f'T{i}', 'perm': 6})\n"
        "    m.commit_offset('g', 'T', i % 4, i)\n"
        "with open(sys.argv[2], 'wb') as f:\n"
        "    os.fsync(f.fileno())\n"
        "os._exit(0)\n"
    )
    trace = tmp_path / "trace"
    args = [strace, "-f", "-qq", "-e", "trace=" + ",".join(SYNC_CALLS), "-o", str(trace)]
    args += [sys.executable, "-c", code, str(tmp_path / "meta"), str(tmp_path / "marker")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    calls = [line.split(None, 1)[1] for line in trace.read_text().splitlines()]
    assert [c.split("(")[0] for c in calls] == ["fsync"], calls
    meta = LmdbMetaStore(tmp_path / "meta")
    try:
        assert len(dict(meta.items(TOPICS))) == 30
        assert meta.query_offset("g", "T", 1) == 29
    finally:
        meta.close()


def test_a_group_name_longer_than_a_journal_is_journaled_and_replayed(tmp_path: Path) -> None:
    """A commit whose line does not fit a journal gets a journal of its own; the next open replays it."""
    root = tmp_path / "meta"
    script = f"""
import os
from rmqgate.store.meta import LmdbMetaStore, _JOURNAL_SIZE
meta = LmdbMetaStore({str(root)!r})
meta.commit_offset("g" * (_JOURNAL_SIZE + 10), "T", 0, 5)
meta.commit_offset("g", "T", 1, 6)
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    meta = LmdbMetaStore(root)
    try:
        assert meta.query_offset("g" * ((1 << 20) + 10), "T", 0) == 5
        assert meta.query_offset("g", "T", 1) == 6
    finally:
        meta.close()


def test_unreadable_journal_entries_are_skipped_at_open(tmp_path: Path) -> None:
    """A journal holding lines that are not offset changes (a torn write, a damaged file) still opens:
    those lines are skipped and the readable ones replayed."""
    root = tmp_path / "meta"
    LmdbMetaStore(root).close()
    lines = [
        b'["T@g",0,7]', b"123", b"[]", b'{"a":1}', b'[1,2,3]', b'["T@g","x",1]', b'["-"]', b'["*",1]',
        b'["T@h",2,9]', b'["T@g",1,',
    ]  # fmt: skip
    (root / "offsets.journal.3").write_bytes(b"\n".join(lines) + b"\0" * 64)
    meta = LmdbMetaStore(root)
    try:
        assert meta.offset_table() == {"T@g": {0: 7}, "T@h": {2: 9}}
    finally:
        meta.close()
