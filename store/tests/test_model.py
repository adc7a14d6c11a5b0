"""Property test: random puts, batches, clean restarts and crashes against a plain model of the queues."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.store.api import GetMessageStatus, PutMessageStatus, StoreConfig
from rmqgate.store.message_store import DefaultMessageStore
from rmqgate.wire.message import MessageExt, decode_message

TOPICS = ("A", "B" * 140)  # the second is stored as v2 records

op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(TOPICS), st.integers(0, 2), st.integers(0, 3000)),
    st.tuples(st.just("batch"), st.sampled_from(TOPICS), st.integers(0, 2), st.integers(2, 4)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("crash")),
)


def config(root: Path) -> StoreConfig:
    return StoreConfig(
        str(root),
        mapped_file_size_commitlog=8192,
        mapped_file_size_consume_queue=7 * 20,
        max_hash_slot_num=17,
        max_index_num=40,
    )


def crash(store: DefaultMessageStore) -> None:
    store._shutdown = True
    store._close_files()
    os.close(store._lock_fd)


def check(store: DefaultMessageStore, model: dict[tuple[str, int], list[tuple[bytes, str]]]) -> None:
    for (topic, qid), msgs in model.items():
        assert store.get_max_offset_in_queue(topic, qid) == len(msgs)
        got: list[tuple[bytes, str]] = []
        offset = 0
        while True:
            res = store.get_messages(topic, qid, offset, 32)
            if res.status is not GetMessageStatus.FOUND:
                assert res.status in (
                    GetMessageStatus.OFFSET_OVERFLOW_ONE,
                    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                )
                break
            for b in res.buffers:
                m = decode_message(b, check_crc=True)
                assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, len(got))
                got.append((m.body, m.properties["UNIQ_KEY"]))
            offset = res.next_begin_offset
        assert got == msgs
        if msgs:
            body, uniq = msgs[-1]
            found = store.query_message(topic, uniq, 4).buffers
            assert [decode_message(b).body for b in found] == [body]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_store_matches_model(ops: list[tuple], rnd) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        model: dict[tuple[str, int], list[tuple[bytes, str]]] = {}
        store = DefaultMessageStore.open(config(root), start_services=False)
        serial = 0
        try:
            for o in ops:
                if o[0] in ("put", "batch"):
                    _, topic, qid, arg = o
                    n = 1 if o[0] == "put" else arg
                    msgs = []
                    for _ in range(n):
                        serial += 1
                        body = rnd.randbytes(arg if o[0] == "put" else rnd.randint(0, 500))
                        msgs.append(
                            MessageExt(topic, body=body, queue_id=qid, properties={"UNIQ_KEY": f"u{serial}"})
                        )
                    res = store.put_message(msgs[0]) if n == 1 else store.put_messages(msgs)
                    assert res.status is PutMessageStatus.PUT_OK
                    q = model.setdefault((topic, qid), [])
                    assert res.queue_offset == len(q)
                    q.extend((bytes(m.body), m.properties["UNIQ_KEY"]) for m in msgs)
                elif o[0] == "restart":
                    store.shutdown()
                    store = DefaultMessageStore.open(config(root), start_services=False)
                    assert store.last_exit_ok
                else:
                    crash(store)
                    store = DefaultMessageStore.open(config(root), start_services=False)
                    assert not store.last_exit_ok
                check(store, model)
        finally:
            store.shutdown()
