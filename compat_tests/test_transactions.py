"""Transactions: half messages, END_TRANSACTION, CHECK_TRANSACTION_STATE, check max, restart.

Real client: rocketmq-client-python 2.0.0 (TransactionMQProducer on the C++ core, installed into
.venv-clients/rocketmq-client-python200 with the librocketmq.so of rocketmq-python-cvs) — commit,
rollback, and UNKNOWN resolved by the broker's check-back. The raw wire client drives the same flows
step by step, answering the check on its producer connection with fromTransactionCheck=true.

Runs on its own server, `rmqgate serve --conf` or the Java pair with --target java
(flows.py FEATURE_CONF: transactionTimeOut
1000 ms, transactionCheckInterval 1000 ms, transactionCheckMax 5).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests.flows import (
    FeatureServer,
    feature_server,
    feature_server_fixture,
    no_leftover_clients,  # noqa: F401 - autouse fixture
    tx_produce,
)
from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    WireClient,
    decode_messages,
    stored_messages,
    wait_until,
)
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.message import decode_message, decode_offset_msg_id

pytestmark = pytest.mark.slow

PREPARED = 0x4
COMMIT, ROLLBACK, UNKNOWN = 0x8, 0xC, 0x0


flow_server = feature_server_fixture("tx")


def bodies(server: FeatureServer, topic: str, queues: int = 4) -> list[str]:
    return sorted(
        bytes(m.body).decode() for ms in stored_messages(server.broker, topic, queues).values() for m in ms
    )


def send_half(c: WireClient, topic: str, group: str, body: bytes, queue_id: int = 0) -> tuple[int, int, str]:
    """(half queue offset, half commit-log offset, UNIQ_KEY) as a producer learns them."""
    resp = c.send_message(
        topic, body, group=group, queue_id=queue_id, sys_flag=PREPARED,
        properties={"TRAN_MSG": "true", "PGROUP": group}, tags="TagTx",
    )  # fmt: skip
    assert resp.code == ResponseCode.SUCCESS, resp
    ext = resp.ext_fields or {}
    return int(ext["queueOffset"]), decode_offset_msg_id(ext["msgId"])[2], ext.get("msgId", "")


def end(
    c: WireClient,
    group: str,
    qoff: int,
    phys: int,
    kind: int,
    msg_id: str,
    *,
    from_check: bool,
    oneway: bool = True,
) -> Any:
    ext = {
        "producerGroup": group, "tranStateTableOffset": qoff, "commitLogOffset": phys,
        "commitOrRollback": kind, "fromTransactionCheck": from_check, "msgId": msg_id, "transactionId": msg_id,
    }  # fmt: skip
    if oneway:
        c.oneway(RequestCode.END_TRANSACTION, ext)
        return None
    return c.invoke(RequestCode.END_TRANSACTION, ext)


def visible(c: WireClient, topic: str, queue_id: int) -> list[Any]:
    resp = c.pull("tx_reader", topic, queue_id, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*")
    return decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []


def test_cpp_transaction_producer_commit_rollback_and_check_back(
    request: pytest.FixtureRequest, tmp_path: Path, uniq: Any, client_home: Path
) -> None:
    """The C++ 2.0 producer's group is known to the broker only from its heartbeat, which may come
    seconds after the halves (its first one at start knows no broker): the checks before it find no
    producer and still count, so this server allows many (not transactionCheckMax 5)."""
    server = feature_server(request.config, tmp_path / "srv", "transactionCheckMax=1000\n").start()
    try:
        _cpp_transaction_flow(server, uniq, client_home)
    finally:
        server.stop()


def _cpp_transaction_flow(flow_server: FeatureServer, uniq: Any, client_home: Path) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    plan = [
        {"body": "commit-1", "local": "commit"},
        {"body": "rollback-1", "local": "rollback"},
        {"body": "unknown-commit", "local": "unknown", "check": "commit"},
        {"body": "unknown-rollback", "local": "unknown", "check": "rollback"},
    ]
    res = tx_produce(
        {
            "namesrv": flow_server.namesrv,
            "topic": topic,
            "group": uniq("pg"),
            "messages": plan,
            "linger_s": 60,  # it leaves as soon as both checks are answered
        },
        client_home,
        timeout=120,
    ).result()
    assert [r["status"] for r in res["results"]] == [0, 0, 0, 0]  # SEND_OK for every half
    sent_at = {r["body"]: r["at"] for r in res["results"]}
    checks = res["checks"]
    assert {c["body"] for c in checks} == {"unknown-commit", "unknown-rollback"}  # only the unresolved
    for check in checks:
        assert check["topic"] == topic  # the half restored to its real topic
        assert int(check["transaction_check_times"]) >= 1
        waited = check["at"] - sent_at[check["body"]]
        # transactionTimeOut and transactionCheckInterval 1 s (6 s and 60 s by default); the upper
        # bound leaves room for the producer's heartbeat, every 30 s
        assert 0.9 <= waited < 45, f"checked {waited:.2f} s after the send (transactionTimeOut 1 s)"
    assert wait_until(lambda: bodies(flow_server, topic) == ["commit-1", "unknown-commit"], timeout=30)
    by_body = {
        bytes(m.body).decode(): m for ms in stored_messages(flow_server.broker, topic).values() for m in ms
    }
    ids = {r["body"]: r["msg_id"] for r in res["results"]}
    for body in ("commit-1", "unknown-commit"):
        m = by_body[body]
        assert m.properties["UNIQ_KEY"] == ids[body]  # same message id as the send returned
        # a 4.9.8 broker delivers the half's properties (the corpus' official-python capture shows it)
        assert m.properties["TRAN_MSG"] == "true" and m.properties["REAL_TOPIC"] == topic
        assert m.sys_flag & 0xC == COMMIT
    time.sleep(2.5)  # resolved halves are not checked again
    assert bodies(flow_server, topic) == ["commit-1", "unknown-commit"]


def test_raw_half_invisible_then_check_back_on_the_producer_connection(
    flow_server: FeatureServer, uniq: Any
) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("pg")
    with WireClient(flow_server.broker) as producer, WireClient(flow_server.broker) as reader:
        assert producer.heartbeat(uniq("client"), producer_groups=[group]).code == 0
        qoff, phys, _ = send_half(producer, topic, group, b"raw-tx", queue_id=2)
        assert visible(reader, topic, 2) == []  # invisible to consumers
        t0 = time.monotonic()
        check = producer.wait_server_request(RequestCode.CHECK_TRANSACTION_STATE, timeout=30)
        assert 0.9 <= time.monotonic() - t0 < 10
        ext = check.ext_fields or {}
        half = decode_message(check.body or b"", 0)
        assert (half.topic, half.queue_id, bytes(half.body)) == (topic, 2, b"raw-tx")
        assert ext["msgId"] == half.properties["UNIQ_KEY"] == ext["transactionId"]
        assert ext["offsetMsgId"] == half.offset_msg_id
        new_qoff, new_phys = int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"])
        assert (new_qoff, new_phys) != (qoff, phys)  # the checked copy of the half
        end(producer, group, new_qoff, new_phys, COMMIT, ext["msgId"], from_check=True)
        assert wait_until(lambda: len(visible(reader, topic, 2)) == 1, timeout=15)
        (msg,) = visible(reader, topic, 2)
        assert bytes(msg.body) == b"raw-tx" and msg.properties["UNIQ_KEY"] == ext["msgId"]
        # a rollback of the original half after the commit changes nothing, and nothing is checked
        end(producer, group, qoff, phys, ROLLBACK, ext["msgId"], from_check=False)
        time.sleep(2.5)
        assert len(visible(reader, topic, 2)) == 1
        assert producer.poll_response(-1, 0.1) is None and not [
            r for r in producer.server_requests if r.code == RequestCode.CHECK_TRANSACTION_STATE
        ]


@pytest.mark.rmqgate_only
def test_raw_duplicate_commit_is_delivered_once(flow_server: FeatureServer, uniq: Any) -> None:
    """A repeated END_TRANSACTION commit (a producer retrying it) changes nothing on rmqgate, which
    knows the half is resolved. 4.9.8's EndTransactionProcessor looks the half up by its CommitLog
    offset, which stays readable after the op message, and delivers it a second time."""
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("pg")
    with WireClient(flow_server.broker) as producer, WireClient(flow_server.broker) as reader:
        qoff, phys, msg_id = send_half(producer, topic, group, b"once", queue_id=1)
        for _ in range(2):
            resp = end(producer, group, qoff, phys, COMMIT, msg_id, from_check=False, oneway=False)
            assert resp.code == ResponseCode.SUCCESS
        assert wait_until(lambda: visible(reader, topic, 1), timeout=15)
        time.sleep(1.5)
        assert [bytes(m.body) for m in visible(reader, topic, 1)] == [b"once"]


def test_raw_commit_rollback_and_refusals(flow_server: FeatureServer, uniq: Any) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("pg")
    with WireClient(flow_server.broker) as c:
        q1, p1, id1 = send_half(c, topic, group, b"tx-commit")
        q2, p2, id2 = send_half(c, topic, group, b"tx-rollback")
        wrong = end(c, "other-group", q1, p1, COMMIT, id1, from_check=False, oneway=False)
        assert (wrong.code, wrong.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        wrong = end(c, group, q1 + 100, p1, COMMIT, id1, from_check=False, oneway=False)
        assert wrong.remark == "The transaction state table offset wrong"
        end(c, group, q1, p1, COMMIT, id1, from_check=False)
        end(c, group, q2, p2, ROLLBACK, id2, from_check=False)
        assert wait_until(lambda: bodies(flow_server, topic) == ["tx-commit"], timeout=15)
        time.sleep(2.5)  # neither is checked later
        assert bodies(flow_server, topic) == ["tx-commit"]


def test_raw_unanswered_checks_stop_at_transaction_check_max(flow_server: FeatureServer, uniq: Any) -> None:
    topic = flow_server.create_topic(uniq(), 4)
    group = uniq("pg")
    with WireClient(flow_server.broker) as producer:
        assert producer.heartbeat(uniq("client"), producer_groups=[group]).code == 0
        send_half(producer, topic, group, b"never-answered")
        times = []
        for _ in range(5):  # transactionCheckMax = 5
            check = producer.wait_server_request(RequestCode.CHECK_TRANSACTION_STATE, timeout=30)
            times.append(decode_message(check.body or b"", 0).properties["TRANSACTION_CHECK_TIMES"])
        assert times == ["1", "2", "3", "4", "5"]

        def parked() -> list[str]:
            msgs = stored_messages(flow_server.broker, "TRANS_CHECK_MAX_TIME_TOPIC", 1)[0]
            return [bytes(m.body).decode() for m in msgs if m.properties.get("PGROUP") == group]

        assert wait_until(lambda: parked() == ["never-answered"], timeout=30)
        assert producer.poll_response(-1, 2.0) is None
        assert not [r for r in producer.server_requests if r.code == RequestCode.CHECK_TRANSACTION_STATE]
        assert bodies(flow_server, topic) == []


def test_pending_halves_are_checked_after_a_restart(
    request: pytest.FixtureRequest, tmp_path: Path, uniq: Any, client_home: Path
) -> None:
    # A half is checked (and the check counted) while no producer is there, also while the broker
    # shuts down, which a Java broker takes seconds to do: allow enough checks to outlive the restart.
    server = feature_server(request.config, tmp_path / "srv", "transactionCheckMax=1000\n").start()
    try:
        topic = server.create_topic(uniq(), 4)
        group = uniq("pg")
        with WireClient(server.broker) as c:  # no heartbeat: nobody to check before the restart
            send_half(c, topic, group, b"pending-across-restart")
            q, p, i = send_half(c, topic, group, b"rolled-back-before-restart")
            end(c, group, q, p, ROLLBACK, i, from_check=False)
            time.sleep(0.2)
        assert server.stop() == 0
        server.start()
        with WireClient(server.broker) as producer:
            assert producer.heartbeat(uniq("client"), producer_groups=[group]).code == 0
            check = producer.wait_server_request(RequestCode.CHECK_TRANSACTION_STATE, timeout=45)
            half = decode_message(check.body or b"", 0)
            assert bytes(half.body) == b"pending-across-restart"
            ext = check.ext_fields or {}
            end(
                producer, group, int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"]), COMMIT,
                ext["msgId"], from_check=True,
            )  # fmt: skip
            assert wait_until(lambda: bodies(server, topic) == ["pending-across-restart"], timeout=15)
            time.sleep(2.5)
            assert not [
                r for r in producer.server_requests
                if r.code == RequestCode.CHECK_TRANSACTION_STATE
                and bytes(decode_message(r.body or b"", 0).body) == b"rolled-back-before-restart"
            ]  # fmt: skip
        assert bodies(server, topic) == ["pending-across-restart"]
    finally:
        server.stop()
