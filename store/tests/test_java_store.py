"""Golden test: open the store written by the stock Java 4.9.8 broker (corpus) and find what the
manifest lists — messages, offsets, tags, keys via the Java-written IndexFile — and the config."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tarfile
import time
from pathlib import Path

import pytest

from rmqgate.store.api import GetMessageStatus, StoreConfig
from rmqgate.store.config_io import export_config, import_config
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire import fastjson
from rmqgate.wire.message import MessageExt, decode_message, java_string_hash

JAVA_CONFIG = dict(
    mapped_file_size_commitlog=1048576,
    mapped_file_size_consume_queue=6000,
    max_hash_slot_num=5000,
    max_index_num=20000,
)


@pytest.fixture()
def java_store(corpus: Path, tmp_path: Path) -> Path:
    with tarfile.open(corpus / "java-4.9.8-store-clean.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "storeA"


@pytest.fixture(scope="module")
def manifest(corpus: Path) -> dict:
    return json.loads((corpus / "java-4.9.8-store-clean.manifest.json").read_text())


def _pull_all(store: DefaultMessageStore, topic: str, qid: int, start: int, **kw) -> list[MessageExt]:
    out = []
    offset = start
    while True:
        res = store.get_messages(topic, qid, offset, 32, **kw)
        if res.status is not GetMessageStatus.FOUND and res.next_begin_offset == offset:
            return out
        out += [decode_message(b) for b in res.buffers]
        assert res.queue_offsets == [m.queue_offset for m in out[len(out) - len(res.buffers) :]]
        offset = res.next_begin_offset


def test_messages_and_offsets_match_manifest(java_store: Path, manifest: dict) -> None:
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:
        assert store.last_exit_ok
        assert store.topics() >= set(manifest)
        total = 0
        for topic, queues in manifest.items():
            assert {int(q) for q in queues} <= set(store.queue_ids(topic))
            for q, recs in queues.items():
                qid = int(q)
                assert store.get_min_offset_in_queue(topic, qid) == recs[0]["offset"]
                assert store.get_max_offset_in_queue(topic, qid) == recs[-1]["offset"] + 1
                got = _pull_all(store, topic, qid, recs[0]["offset"])
                assert len(got) == len(recs)
                for r, m in zip(recs, got, strict=True):
                    assert (m.queue_offset, m.commit_log_offset, m.sys_flag) == (
                        r["offset"],
                        r["phys"],
                        r["sysflag"],
                    )
                    assert hashlib.sha1(m.body).hexdigest() == r["sha1"]
                    assert m.properties.get("KEYS") == r["keys"] and m.properties.get("TAGS") == r["tags"]
                    assert m.topic == topic and m.queue_id == qid
                    total += 1
                # the id a Java broker returned for it resolves to the same record
                last = store.look_message_by_offset(recs[-1]["phys"])
                assert last is not None and last.queue_offset == recs[-1]["offset"]
        assert total == sum(len(r) for q in manifest.values() for r in q.values())
    finally:
        store.shutdown()


def test_opening_java_store_takes_over_its_config(java_store: Path) -> None:
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:
        assert store.meta.get("topics", "LabSync_mwr6oik8oup")["writeQueueNums"] == 4
        assert store.meta.query_offset("CG_sync_mwr6oixrwxd", "LabSync_mwr6oik8oup", 3) == 25
        assert store.meta.get("subscription_groups", "CG_order_mwr6ol9ziuo")["retryMaxTimes"] == 16
        store.meta.commit_offset("CG_sync_mwr6oixrwxd", "LabSync_mwr6oik8oup", 3, 26)
    finally:
        store.shutdown()
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:  # imported once: later opens keep what rmqgate changed
        assert store.meta.query_offset("CG_sync_mwr6oixrwxd", "LabSync_mwr6oik8oup", 3) == 26
    finally:
        store.shutdown()


def test_a_first_import_that_failed_is_tried_again_and_takes_the_bak(
    java_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """topics.json cut short by a crash, its .bak intact (ConfigManager.loadBak): the import takes
    the .bak. An import that did not finish is done again on the next open; a Java broker that ran
    on the store later is reported."""
    config = java_store / "config"
    good = (config / "topics.json").read_text()
    (config / "topics.json.bak").write_text(good)
    (config / "topics.json").write_text(good[: len(good) // 2])
    offsets = (config / "consumerOffset.json").read_text()
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):  # neither readable
        (config / name).write_text('{"offsetTable":{')
    with pytest.raises(ValueError):
        DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    (config / "consumerOffset.json").write_text(offsets)
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:  # the second open imports again (the first one's import did not finish)
        assert store.meta.get("topics", "LabSync_mwr6oik8oup")["writeQueueNums"] == 4  # from the .bak
        assert store.meta.query_offset("CG_sync_mwr6oixrwxd", "LabSync_mwr6oik8oup", 3) == 25
    finally:
        store.shutdown()
    later = time.time() + 60
    os.utime(config / "topics.json", (later, later))  # a Java broker wrote it after rmqgate's metadata
    with caplog.at_level(logging.WARNING):
        store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    store.shutdown()
    assert "topics.json changed after this store's metadata" in caplog.text
    assert "rmqgate store import-config" in caplog.text


def test_tag_filter_and_time_lookup_on_java_store(java_store: Path, manifest: dict) -> None:
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:
        topic = "LabTag_mwr6olvscyc"
        for q, recs in manifest[topic].items():
            want = [r for r in recs if r["tags"] == "TagC"]
            got = _pull_all(store, topic, int(q), 0, tags_filter={java_string_hash("TagC")})
            assert [m.commit_log_offset for m in got] == [r["phys"] for r in want]
            first = store.get_earliest_message_time(topic, int(q))
            assert first > 0
            assert store.get_offset_in_queue_by_time(topic, int(q), first) == 0
    finally:
        store.shutdown()


def test_lookup_by_key_uses_java_index(java_store: Path, manifest: dict) -> None:
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    try:
        assert store.index.files and store.index.files[0].index_count > 1  # the Java-written file
        checked = 0
        for topic, queues in manifest.items():
            for recs in queues.values():
                for r in recs[:: max(1, len(recs) // 5)]:
                    for key in r["keys"].split():
                        res = store.query_message(topic, key, 64)
                        phys = [decode_message(b).commit_log_offset for b in res.buffers]
                        assert r["phys"] in phys, (topic, key)
                        checked += 1
        assert checked > 100
        m = store.look_message_by_offset(manifest["StoreTopic0"]["0"][0]["phys"])
        assert m is not None
        res = store.query_message("StoreTopic0", m.properties["UNIQ_KEY"], 4)
        assert [decode_message(b).commit_log_offset for b in res.buffers] == [m.commit_log_offset]
    finally:
        store.shutdown()


def test_append_after_java_then_restart(java_store: Path, manifest: dict) -> None:
    cfg = StoreConfig(str(java_store), **JAVA_CONFIG)
    store = DefaultMessageStore.open(cfg, start_services=False)
    topic = "StoreTopic1"
    before = store.get_max_offset_in_queue(topic, 2)
    res = store.put_message(
        MessageExt(
            topic,
            body=b"after java",
            queue_id=2,
            born_timestamp=int(time.time() * 1000),
            properties={"KEYS": "rmq-after", "TAGS": "T9"},
        )
    )
    assert res.queue_offset == before
    store.shutdown()
    store = DefaultMessageStore.open(cfg, start_services=False)
    try:
        assert store.get_max_offset_in_queue(topic, 2) == before + 1
        got = store.get_messages(topic, 2, before, 1)
        assert decode_message(got.buffers[0]).body == b"after java"
        assert [decode_message(b).body for b in store.query_message(topic, "rmq-after", 4).buffers] == [
            b"after java"
        ]
        # Java's index entries still resolve too
        r = manifest[topic]["2"][0]
        assert r["phys"] in [
            decode_message(b).commit_log_offset
            for b in store.query_message(topic, r["keys"].split()[0], 8).buffers
        ]
    finally:
        store.shutdown()


def test_import_export_java_config(java_store: Path, tmp_path: Path) -> None:
    store = DefaultMessageStore.open(StoreConfig(str(tmp_path / "rmq")), start_services=False)
    try:
        counts = import_config(store.meta, java_store / "config")
        src_topics = fastjson.loads((java_store / "config" / "topics.json").read_text())
        assert counts["topics.json"] == len(src_topics["topicConfigTable"])
        assert store.meta.get("topics", "LabTag_mwr6olvscyc")["readQueueNums"] == 4
        assert store.meta.query_offset("CG_order_mwr6ol9ziuo", "LabOrder_mwr6okxptx9", 2) == 40
        assert store.meta.data_version("topics") == src_topics["dataVersion"]
        out = tmp_path / "out"
        export_config(store.meta, out)
        export_config(store.meta, out)  # second write keeps the first as .bak
        names = ("topics.json", "consumerOffset.json", "subscriptionGroup.json", "delayOffset.json")
        for name in (*names, "consumerFilter.json"):
            mine = fastjson.loads((out / name).read_text())
            theirs = fastjson.loads((java_store / "config" / name).read_text())
            assert mine == theirs, name
            assert (out / (name + ".bak")).read_text() == (out / name).read_text()
        text = (out / "consumerOffset.json").read_text()
        assert "{0:60,1:60,2:40,3:40\n\t\t}" in text  # fastjson's bare integer keys, PrettyFormat tabs
    finally:
        store.shutdown()


def test_wrong_settings_are_refused_not_applied(java_store: Path) -> None:
    before = {p: p.stat().st_size for p in java_store.rglob("*") if p.is_file()}
    for wrong in (
        dict(JAVA_CONFIG, mapped_file_size_commitlog=2 * 1048576),
        dict(JAVA_CONFIG, max_hash_slot_num=4000),
    ):
        with pytest.raises(ValueError, match="size"):
            DefaultMessageStore.open(StoreConfig(str(java_store), **wrong), start_services=False)
    after = {p: p.stat().st_size for p in java_store.rglob("*") if p.is_file() and p in before}
    assert after == before  # nothing was resized
    store = DefaultMessageStore.open(StoreConfig(str(java_store), **JAVA_CONFIG), start_services=False)
    store.shutdown()  # and the lock was released by the failed opens
