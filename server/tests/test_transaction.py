"""Transactions on a real broker (sockets, store files, LMDB): half messages, END_TRANSACTION, check-back.

Check passes run on the broker's own timer (transactionCheckInterval from the config) or are called
directly where a test needs one pass at a known moment; halves are sent with a born timestamp in the
past so they are already older than transactionTimeOut.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import (
    async_test,
    captured_requests_and_pulls,
    small_broker,
    stored,
    wait_for,
)
from rmqgate.server.topics import (
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)
from rmqgate.server.transaction import CID_RMQ_SYS_TRANS
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.message import (
    MessageExt,
    decode_message,
    decode_offset_msg_id,
    format_properties,
    iter_messages,
    parse_properties,
)
from rmqgate.wire.message_const import MessageSysFlag

COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


def make_broker(root: Path, **overrides: Any) -> BrokerController:
    # checks run only when a test asks for one
    return small_broker(
        root, **{"brokerName": "broker-tx", "transactionCheckInterval": 3_600_000, **overrides}
    )


def half_request(
    topic: str,
    group: str,
    uniq: str,
    *,
    born: int | None = None,
    body: bytes = b"tx",
    immunity_s: int | None = None,
) -> RemotingCommand:
    props = {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq, "TAGS": "TagTx", "WAIT": "true"}
    if immunity_s is not None:
        props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(immunity_s)
    ext = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": str(MessageSysFlag.TRANSACTION_PREPARED),
        "g": str(born if born is not None else int(time.time() * 1000)),
        "h": "0",
        "i": format_properties(props),
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand.request(R.SEND_MESSAGE_V2, ext, body)


def end_request(
    group: str, half_qoff: int, phys: int, kind: int, uniq: str, *, from_check: bool = False
) -> RemotingCommand:
    return RemotingCommand.request(
        R.END_TRANSACTION,
        {
            "producerGroup": group,
            "tranStateTableOffset": str(half_qoff),
            "commitLogOffset": str(phys),
            "commitOrRollback": str(kind),
            "fromTransactionCheck": "true" if from_check else "false",
            "msgId": uniq,
            "transactionId": uniq,
        },
    )


async def send_half(c: RemotingClient, topic: str, group: str, uniq: str, **kw: Any) -> tuple[int, int]:
    """(half queue offset, half commit-log offset) as a client learns them from the send response."""
    resp = await c.invoke(half_request(topic, group, uniq, **kw))
    assert resp.code == ResponseCode.SUCCESS, resp
    ext = resp.ext_fields or {}
    # a check pass stops at halves stored in the millisecond it started ("fresh stored", as Java's
    # does): a test that checks right after the send must not start in that same millisecond
    await asyncio.sleep(0.002)
    return int(ext["queueOffset"]), decode_offset_msg_id(ext["msgId"])[2]


async def producer(
    broker: BrokerController, client_id: str, group: str
) -> tuple[RemotingClient, asyncio.Queue[RemotingCommand]]:
    """A producer of ``group`` on its own connection, and the broker's CHECK_TRANSACTION_STATE
    requests to it as they arrive."""
    checks: asyncio.Queue[RemotingCommand] = asyncio.Queue()
    c = await RemotingClient.connect("127.0.0.1", broker.port, on_request=checks.put)
    await heartbeat(c, client_id, group)
    return c, checks


async def heartbeat(c: RemotingClient, client_id: str, group: str) -> None:
    body = json.dumps(
        {"clientID": client_id, "consumerDataSet": [], "producerDataSet": [{"groupName": group}]}
    ).encode()
    assert (await c.invoke(RemotingCommand.request(R.HEART_BEAT, {}, body))).code == 0


@async_test
async def test_a_half_is_known_by_tran_msg_alone(tmp_path: Path) -> None:
    """SendMessageProcessor parks a message as a half when TRAN_MSG parses as true (Boolean.parseBoolean,
    any case), whatever its sysFlag says."""
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        upper = half_request("TxU", "PG", "UU")
        upper.ext_fields["i"] = upper.ext_fields["i"].replace("TRAN_MSG\x01true", "TRAN_MSG\x01TRUE")
        no_flag = half_request("TxU", "PG", "UN")
        no_flag.ext_fields["f"] = "0"
        for request in (upper, no_flag):
            assert (await c.invoke(request)).code == 0
        halves = stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)
        assert [h.properties["UNIQ_KEY"] for h in halves] == ["UU", "UN"]
        assert broker.store.get_max_offset_in_queue("TxU", 1) == 0  # nothing in the real topic
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_half_invisible_commit_visible_once(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        qoff, phys = await send_half(c, "TxT", "PG", "U1")
        half = stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)
        assert [h.properties["REAL_TOPIC"] for h in half] == ["TxT"] and half[0].properties["REAL_QID"] == "1"
        assert half[0].sys_flag & MessageSysFlag.TRANSACTION_MASK == 0
        assert broker.store.get_max_offset_in_queue("TxT", 1) == 0  # invisible
        c.invoke_oneway(end_request("PG", qoff, phys, COMMIT, "U1"))
        await wait_for(lambda: broker.store.get_max_offset_in_queue("TxT", 1) == 1)
        (real,) = stored(broker, "TxT", 1)
        assert bytes(real.body) == b"tx" and real.properties["UNIQ_KEY"] == "U1"
        # as a 4.9.8 broker stores it: Java clears these only after writing the properties string
        assert {k: real.properties.get(k) for k in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID", "WAIT", "PGROUP")} == {
            "TRAN_MSG": "true", "REAL_TOPIC": "TxT", "REAL_QID": "1", "WAIT": "true", "PGROUP": "PG",
        }  # fmt: skip
        assert real.properties["TAGS"] == "TagTx"
        assert real.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_COMMIT
        assert real.prepared_transaction_offset == phys
        (op,) = stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(qoff).encode() and op.properties["TAGS"] == "d"
        # duplicates (oneway and sync, also as a check answer) change nothing
        c.invoke_oneway(end_request("PG", qoff, phys, COMMIT, "U1"))
        dup = await c.invoke(end_request("PG", qoff, phys, COMMIT, "U1", from_check=True))
        assert dup.code == ResponseCode.SUCCESS
        dup = await c.invoke(end_request("PG", qoff, phys, ROLLBACK, "U1"))
        assert dup.code == ResponseCode.SUCCESS
        assert len(stored(broker, "TxT", 1)) == 1 and len(stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)) == 1
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_rollback_writes_only_the_op_and_bad_requests_are_refused(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        qoff, phys = await send_half(c, "TxR", "PG", "U2")
        wrong_group = await c.invoke(end_request("OTHER", qoff, phys, COMMIT, "U2"))
        assert (wrong_group.code, wrong_group.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The producer group wrong",
        )
        wrong_qoff = await c.invoke(end_request("PG", qoff + 5, phys, COMMIT, "U2"))
        assert wrong_qoff.remark == "The transaction state table offset wrong"
        missing = await c.invoke(end_request("PG", qoff, phys + 10_000_000, COMMIT, "U2"))
        assert missing.remark == "Find prepared transaction message failed"
        c.invoke_oneway(end_request("PG", qoff, phys, UNKNOWN, "U2"))  # pending: nothing happens
        ok = await c.invoke(end_request("PG", qoff, phys, ROLLBACK, "U2"))
        assert ok.code == ResponseCode.SUCCESS
        assert broker.store.get_max_offset_in_queue("TxR", 1) == 0
        (op,) = stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(qoff).encode()
        again = await c.invoke(end_request("PG", qoff, phys, COMMIT, "U2"))
        assert again.code == ResponseCode.SUCCESS and broker.store.get_max_offset_in_queue("TxR", 1) == 0
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_check_back_resolves_on_the_producer_connection(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", transactionTimeOut=300, transactionCheckInterval=1000)
    await broker.start()
    try:
        checks: asyncio.Queue[RemotingCommand] = asyncio.Queue()

        async def on_request(cmd: RemotingCommand) -> None:
            await checks.put(cmd)

        c = await RemotingClient.connect("127.0.0.1", broker.port, on_request=on_request)
        await heartbeat(c, "client-1", "PGC")
        t0 = time.monotonic()
        qoff, phys = await send_half(c, "TxC", "PGC", "U3")
        check = await asyncio.wait_for(checks.get(), 10)
        waited = time.monotonic() - t0
        assert check.code == R.CHECK_TRANSACTION_STATE and 0.25 <= waited < 5
        ext = check.ext_fields or {}
        assert ext["msgId"] == "U3" and ext["transactionId"] == "U3"
        new_qoff, new_phys = int(ext["tranStateTableOffset"]), int(ext["commitLogOffset"])
        assert new_qoff == qoff + 1 and new_phys > phys  # the re-put copy
        body = decode_message(check.body or b"", 0)
        assert body.topic == "TxC" and body.queue_id == 1 and bytes(body.body) == b"tx"
        assert body.properties["TRANSACTION_CHECK_TIMES"] == "1" and body.offset_msg_id == ext["offsetMsgId"]
        assert body.properties["WAIT"] == "false"  # as Java's check request body shows it
        c.invoke_oneway(end_request("PGC", new_qoff, new_phys, COMMIT, "U3", from_check=True))
        await wait_for(lambda: broker.store.get_max_offset_in_queue("TxC", 1) == 1)
        (real,) = stored(broker, "TxC", 1)
        assert (real.properties["TRANSACTION_CHECK_TIMES"], real.properties["WAIT"]) == ("1", "true")
        # no further checks once resolved (a pass runs every second: the END has that long to land)
        await asyncio.sleep(1.5)
        assert checks.empty()
        assert broker.store.meta.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) == 2
        await c.aclose()
    finally:
        await broker.stop()


def _java_transaction_properties(corpus: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """From the corpus capture of the official Python client against a 4.9.8 broker: one transactional
    send's properties, the same message as a consumer pulled it once committed, and a check body's."""
    pcap = corpus / "pcap-thirdparty" / "official-rocketmq-client-python-2.0.0.pcap"
    sent: dict[str, dict[str, str]] = {}
    pulled: dict[str, dict[str, str]] = {}
    checked: dict[str, str] = {}
    for item in captured_requests_and_pulls(pcap):
        if isinstance(item, RemotingCommand):
            if item.code == R.SEND_MESSAGE_V2 and "TRAN_MSG" in item.ext_field("i", ""):
                props = parse_properties(item.ext_fields["i"])
                sent[props["UNIQ_KEY"]] = props
            elif item.code == R.CHECK_TRANSACTION_STATE:
                checked = decode_message(bytes(item.body), 0).properties
        elif type(item) is MessageExt and item.sys_flag & MessageSysFlag.TRANSACTION_MASK == COMMIT:
            pulled[item.properties["UNIQ_KEY"]] = dict(item.properties)
    uniq = next(u for u, p in pulled.items() if "TRANSACTION_CHECK_TIMES" not in p)  # committed unchecked
    return sent[uniq], pulled[uniq], checked


@async_test
async def test_committed_message_properties_match_the_java_broker_in_the_corpus(
    tmp_path: Path, corpus: Path
) -> None:
    """What a consumer of the 4.9.8 broker got for a committed transaction (the half's properties kept,
    plus REAL_TOPIC, REAL_QID and CLUSTER) is what it gets from rmqgate for the same send."""
    java_sent, java_pulled, java_check = _java_transaction_properties(corpus)
    assert java_check["WAIT"] == "false" and java_pulled["WAIT"] == java_sent["WAIT"] == "true"
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        request = half_request("TxJ", java_sent["PGROUP"], "UJ")
        request.ext_fields["i"] = format_properties({**java_sent, "UNIQ_KEY": "UJ"})
        resp = await c.invoke(request)
        assert resp.code == 0, resp
        qoff, phys = int(resp.ext_fields["queueOffset"]), decode_offset_msg_id(resp.ext_fields["msgId"])[2]
        c.invoke_oneway(end_request(java_sent["PGROUP"], qoff, phys, COMMIT, "UJ"))
        await wait_for(lambda: broker.store.get_max_offset_in_queue("TxJ", 1) == 1)
        (real,) = stored(broker, "TxJ", 1)
        ours = real.properties
        assert (
            set(ours) - set(java_sent)
            == set(java_pulled) - set(java_sent)
            == {"REAL_TOPIC", "REAL_QID", "CLUSTER"}
        )
        assert set(java_sent) - set(ours) == set(java_sent) - set(java_pulled) == set()
        assert {k: v for k, v in ours.items() if k not in ("UNIQ_KEY", "REAL_TOPIC", "REAL_QID")} == {
            k: v for k, v in java_pulled.items() if k not in ("UNIQ_KEY", "REAL_TOPIC", "REAL_QID")
        }
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_end_on_superseded_half_applies_to_its_checked_copy(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", transactionTimeOut=100)
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        qoff, phys = await send_half(c, "TxS", "PG", "U4", born=int(time.time() * 1000) - 5000)
        assert await broker.transactions.check() == 0  # no producer online: re-put, nothing sent
        assert broker.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) == 2
        ok = await c.invoke(end_request("PG", qoff, phys, COMMIT, "U4"))  # the producer's late commit
        assert ok.code == ResponseCode.SUCCESS
        assert len(stored(broker, "TxS", 1)) == 1
        (op,) = stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(qoff + 1).encode()
        await asyncio.sleep(0.01)
        await broker.transactions.check()  # the copy is done: no new copy
        assert broker.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) == 2
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_check_max_moves_to_trans_check_max_time_topic(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", transactionTimeOut=100, transactionCheckMax=2)
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        await send_half(c, "TxM", "PG", "U5", born=int(time.time() * 1000) - 5000)
        for _ in range(3):
            await broker.transactions.check()
            await asyncio.sleep(0.01)
        halves = stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)
        assert [h.properties.get("TRANSACTION_CHECK_TIMES") for h in halves] == [None, "1", "2"]
        (parked,) = stored(broker, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC)
        assert parked.properties["UNIQ_KEY"] == "U5" and parked.properties["REAL_TOPIC"] == "TxM"
        assert broker.topics.get(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC) is not None
        await broker.transactions.check()
        assert len(stored(broker, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC)) == 1
        assert broker.store.get_max_offset_in_queue("TxM", 1) == 0
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_young_half_is_not_checked_and_blocks_nothing_resolved(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", transactionTimeOut=60_000)
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        await heartbeat(c, "client-y", "PG")
        qoff, phys = await send_half(c, "TxY", "PG", "U6")
        assert await broker.transactions.check() == 0
        assert broker.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) == 1  # not re-put
        assert broker.transactions.half_offset == 0
        ok = await c.invoke(end_request("PG", qoff, phys, COMMIT, "U6"))
        assert ok.code == 0
        await broker.transactions.check()
        assert broker.transactions.half_offset == 1 and broker.transactions.op_offset == 1
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_pending_half_is_checked_after_restart(tmp_path: Path) -> None:
    root = tmp_path / "s"
    broker = make_broker(root, transactionTimeOut=300)
    await broker.start()
    c = await RemotingClient.connect("127.0.0.1", broker.port)
    await send_half(c, "TxRe", "PGR", "U7")
    resolved_q, resolved_p = await send_half(c, "TxRe", "PGR", "U8")
    assert (await c.invoke(end_request("PGR", resolved_q, resolved_p, ROLLBACK, "U8"))).code == 0
    await c.aclose()
    await broker.stop()

    broker = make_broker(root, transactionTimeOut=300, transactionCheckInterval=1000)
    assert broker.transactions.done == {1}  # the op record, found again in the store
    await broker.start()
    try:
        c, checks = await producer(broker, "client-r", "PGR")
        check = await asyncio.wait_for(checks.get(), 10)
        ext = check.ext_fields or {}
        assert ext["msgId"] == "U7"
        c.invoke_oneway(
            end_request(
                "PGR",
                int(ext["tranStateTableOffset"]),
                int(ext["commitLogOffset"]),
                COMMIT,
                "U7",
                from_check=True,
            )
        )
        await wait_for(lambda: broker.store.get_max_offset_in_queue("TxRe", 1) == 1)
        (real,) = stored(broker, "TxRe", 1)
        assert real.properties["UNIQ_KEY"] == "U7"
        await asyncio.sleep(1.5)  # past another check pass
        assert checks.empty()  # U8 was rolled back before the restart: never checked
        await c.aclose()
    finally:
        await broker.stop()


def test_iter_messages_sanity_of_check_body() -> None:
    """The check body is one stored-format record (what the clients decode with MessageDecoder)."""
    from rmqgate.server.transaction import check_request

    half = MessageExt(
        RMQ_SYS_TRANS_HALF_TOPIC,
        b"payload",
        queue_id=0,
        queue_offset=7,
        commit_log_offset=4096,
        born_timestamp=1,
        store_timestamp=2,
        store_host=b"\x7f\x00\x00\x01",
        store_port=10911,
        properties={"REAL_TOPIC": "RT", "REAL_QID": "3", "UNIQ_KEY": "UK", "PGROUP": "G"},
    )
    cmd = check_request(half)
    (msg,) = list(iter_messages(cmd.body or b""))
    assert (msg.topic, msg.queue_id, msg.queue_offset, msg.commit_log_offset) == ("RT", 3, 7, 4096)
    assert cmd.ext_fields == {
        "tranStateTableOffset": "7",
        "commitLogOffset": "4096",
        "offsetMsgId": half.offset_msg_id,
        "msgId": "UK",
        "transactionId": "UK",
    }


@async_test
async def test_immune_half_does_not_hold_up_older_ones_and_can_still_be_ended(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", transactionTimeOut=100)
    await broker.start()
    try:
        c, checks = await producer(broker, "client-i", "PG")
        immune = half_request("TxI", "PG", "U9", immunity_s=60)
        resp = await c.invoke(immune)
        ext = resp.ext_fields or {}
        qoff, phys = int(ext["queueOffset"]), decode_offset_msg_id(ext["msgId"])[2]
        await send_half(c, "TxI", "PG", "U10", born=int(time.time() * 1000) - 5000)
        await asyncio.sleep(0.01)  # a pass stops at halves stored in its own millisecond
        assert await broker.transactions.check() == 1  # U10 checked although U9 sits before it
        check = await asyncio.wait_for(checks.get(), 5)
        assert check.ext_fields["msgId"] == "U10"  # type: ignore[index]
        halves = stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)
        assert [(h.properties["UNIQ_KEY"], h.properties.get("TRANSACTION_CHECK_TIMES")) for h in halves] == [
            ("U9", None), ("U10", None), ("U9", None), ("U10", "1"),
        ]  # fmt: skip
        assert halves[2].properties["TRAN_PREPARED_QUEUE_OFFSET"] == str(qoff)
        # the producer ends U9 with the offsets its send returned: the immune copy is what gets done
        assert (await c.invoke(end_request("PG", qoff, phys, COMMIT, "U9"))).code == 0
        assert [m.properties["UNIQ_KEY"] for m in stored(broker, "TxI", 1)] == ["U9"]
        (op,) = stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(halves[2].queue_offset).encode()
        await asyncio.sleep(0.01)
        await broker.transactions.check()
        last = stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)[4:]  # U9 is done: only U10 is copied (checked) again
        assert [(h.properties["UNIQ_KEY"], h.properties["TRANSACTION_CHECK_TIMES"]) for h in last] == [
            ("U10", "2")
        ]
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_ending_a_half_copied_before_a_restart_ends_its_copy(tmp_path: Path) -> None:
    """An immune half is copied by a check pass, the broker restarts (the copy map is memory only),
    then the producer commits with the offsets its send returned: the copy is committed, once, and
    nothing is left to check (it was answered SUCCESS and dropped)."""
    root = tmp_path / "s"
    broker = make_broker(root, transactionTimeOut=100)
    await broker.start()
    c = await RemotingClient.connect("127.0.0.1", broker.port)
    qoff, phys = await send_half(c, "TxR", "PG", "UR", immunity_s=60)
    await asyncio.sleep(0.01)
    await broker.transactions.check()  # immune: copied to the end of the half queue
    assert broker.transactions.half_offset == qoff + 1
    await c.aclose()
    await broker.stop()
    broker = make_broker(root, transactionTimeOut=100)
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        assert (await c.invoke(end_request("PG", qoff, phys, COMMIT, "UR"))).code == 0
        assert [m.properties["UNIQ_KEY"] for m in stored(broker, "TxR", 1)] == ["UR"]
        (op,) = stored(broker, RMQ_SYS_TRANS_OP_HALF_TOPIC)
        assert bytes(op.body) == str(qoff + 1).encode()  # the copy is done
        assert (await c.invoke(end_request("PG", qoff, phys, COMMIT, "UR"))).code == 0  # again: no-op
        assert len(stored(broker, "TxR", 1)) == 1
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_unreadable_check_times_and_immunity_do_not_stop_the_check(tmp_path: Path) -> None:
    """TRANSACTION_CHECK_TIMES and CHECK_IMMUNITY_TIME_IN_SECONDS are user properties: unreadable ones
    count as -1, as Java's getInt/getLong make them (a ValueError used to end every pass at that half,
    so no half behind it was ever checked again); a negative immunity is no immunity."""
    broker = make_broker(tmp_path / "s", transactionTimeOut=100)
    await broker.start()
    try:
        c, checks = await producer(broker, "client-b", "PG")
        past = int(time.time() * 1000) - 5000
        for uniq, prop, value in (
            ("UB1", "TRANSACTION_CHECK_TIMES", "x"),
            ("UB2", "CHECK_IMMUNITY_TIME_IN_SECONDS", "-5"),
        ):
            req = half_request("TxB", "PG", uniq, born=past)
            req.ext_fields["i"] += f"\x02{prop}\x01{value}"  # type: ignore[index]
            assert (await c.invoke(req)).code == 0
        await send_half(c, "TxB", "PG", "UB3", born=past)
        await asyncio.sleep(0.01)
        assert await broker.transactions.check() == 3
        got = sorted([(await asyncio.wait_for(checks.get(), 5)).ext_fields["msgId"] for _ in range(3)])  # type: ignore[index]
        assert got == ["UB1", "UB2", "UB3"]
        copies = {h.properties["UNIQ_KEY"]: h for h in stored(broker, RMQ_SYS_TRANS_HALF_TOPIC)[3:]}
        assert copies["UB1"].properties["TRANSACTION_CHECK_TIMES"] == "0"  # -1 + 1, as Java counts
        await c.aclose()
    finally:
        await broker.stop()


class _Conn:
    """What ProducerManager asks of a producer's connection."""

    def __init__(self, closed: bool = False, writable: bool = True) -> None:
        self.closed = closed
        self.writable = writable and not closed


def test_check_requests_go_to_the_group_producers_in_turn() -> None:
    """getAvailableChannel: each CHECK_TRANSACTION_STATE to the next producer, skipping closed ones
    and, while another is writable, those over their write-buffer mark."""
    from rmqgate.server.consumer import ClientChannelInfo, ProducerManager

    producers = ProducerManager()
    a, b, full, gone = _Conn(), _Conn(), _Conn(writable=False), _Conn(closed=True)
    for i, conn in enumerate((a, b, full, gone)):
        producers.register("pg", ClientChannelInfo(conn, f"client-{i}", 0, 409))  # type: ignore[arg-type]
    picks = [producers.any_channel("pg") for _ in range(8)]
    assert set(picks) == {a, b} and picks.count(a) >= 2 and picks.count(b) >= 2
    a.closed, b.closed, a.writable, b.writable = True, True, False, False
    assert producers.any_channel("pg") is full  # open, if over its mark, beats nothing
    full.closed = True
    assert producers.any_channel("pg") is None
    assert producers.any_channel("nobody") is None


@async_test
async def test_a_check_pass_creates_the_half_topic_as_java_does(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        assert broker.topics.get(RMQ_SYS_TRANS_HALF_TOPIC) is None
        assert await broker.transactions.check() == 0
        half = broker.topics.get(RMQ_SYS_TRANS_HALF_TOPIC)
        assert half is not None, "mqadmin topicList on a 4.9.8 broker lists the half topic after one pass"
        assert (half["readQueueNums"], half["writeQueueNums"], half["perm"]) == (1, 1, 6)
        assert broker.topics.get(RMQ_SYS_TRANS_OP_HALF_TOPIC) is None
        # nothing moved, so no offset is written: topicList -c names no group for the half topic
        assert broker.store.meta.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) < 0
        assert broker.store.meta.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_OP_HALF_TOPIC, 0) < 0
    finally:
        await broker.stop()
