"""Broker processors over real sockets: send/pull/offsets/query/admin/client management.

Every broker runs on the real store (CommitLog, ConsumeQueue and index files + LMDB in a temp dir,
with small segments so tests roll files cheaply).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.server.config import BrokerConfig
from rmqgate.server.namesrv import NamesrvController
from rmqgate.server.remoting import Channel, RemotingServer, RequestProcessor
from rmqgate.server.testing import (
    LocalBroker,
    async_test,
    captured_requests_and_pulls,
    heartbeat,
    pull_cmd,
    send_v2,
    small_store,
    stored,
    wait_for,
)
from rmqgate.server.topics import TopicConfigManager, default_group_config, topic_config
from rmqgate.store.api import open_store
from rmqgate.wire import RemotingCommand, ResponseCode, SerializeType
from rmqgate.wire.codes import LanguageCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.message import MessageExt, format_properties, iter_messages, java_string_hash
from rmqgate.wire.message_batch import BatchEntry, decode_batch, encode_batch


def test_persisted_system_topics_keep_their_config(tmp_path: Path) -> None:
    """A system topic already in the metadata (e.g. imported from a Java topics.json) keeps its config
    (Java's decode() puts the file's table over the defaults); only missing ones get the defaults."""
    config = small_store(BrokerConfig(brokerName="broker-t", listenPort=0, defaultTopicQueueNums=8), tmp_path)
    store = open_store(config.store_config())
    try:
        mine = topic_config("TBW102", 4, 4, 7)
        store.meta.put("topics", "TBW102", mine)
        topics = TopicConfigManager(config, store.meta)
        assert topics.get("TBW102") == mine and store.meta.get("topics", "TBW102") == mine
        assert topics.get("SELF_TEST_TOPIC")["readQueueNums"] == 1  # missing: the default
    finally:
        store.shutdown()


@async_test
async def test_send_autocreate_and_pull_both_serializations(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        for ser in (SerializeType.JSON, SerializeType.ROCKETMQ):
            resp = await c.invoke(send_v2("AutoT", b"m-%d" % ser, tags="TagA", ser=ser))
            assert resp.code == 0, resp.remark
            assert resp.serialize_type == ser
            assert set(resp.ext_fields) == {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
            assert (
                resp.ext_fields["queueOffset"] == str(ser)
                and resp.ext_fields["MSG_REGION"] == "DefaultRegion"
            )
            assert len(resp.ext_fields["msgId"]) == 32
        tc = b.broker.topics.get("AutoT")
        assert tc["readQueueNums"] == 4 and tc["perm"] == 6  # min(d=4, TBW102's 8), inherit bit dropped
        resp = await c.invoke(pull_cmd("AutoT", 0))
        assert resp.code == 0 and resp.remark == "FOUND"
        assert resp.ext_fields == {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": "2",
            "minOffset": "0",
            "maxOffset": "2",
        }
        msgs = list(iter_messages(resp.body))
        assert [bytes(m.body) for m in msgs] == [b"m-0", b"m-1"]
        assert msgs[0].properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in msgs[0].properties
        assert msgs[0].born_port == int(c.channel.local_addr.rsplit(":", 1)[1])
        # status mapping
        assert (await c.invoke(pull_cmd("AutoT", 2))).code == ResponseCode.PULL_NOT_FOUND
        assert (await c.invoke(pull_cmd("AutoT", 50))).code == ResponseCode.PULL_OFFSET_MOVED
        assert (await c.invoke(pull_cmd("AutoT", 0, sub="TagZ"))).code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert (await c.invoke(pull_cmd("AutoT", 0, queue_id=1))).code == ResponseCode.PULL_NOT_FOUND
        await c.aclose()


@async_test
async def test_send_validation(Broker) -> None:
    async with Broker(autoCreateTopicEnable=False, maxMessageSize=1024) as b:
        c = await b.client()
        resp = await c.invoke(send_v2("NoSuch"))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark.startswith("topic[NoSuch] not exist")
        resp = await c.invoke(send_v2("bad topic!"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
        resp = await c.invoke(send_v2("x" * 128))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "longer than topic max length" in resp.remark
        resp = await c.invoke(send_v2("SCHEDULE_TOPIC_XXXX"))
        assert resp.code == ResponseCode.NO_PERMISSION
        create = RemotingCommand.request(
            R.UPDATE_AND_CREATE_TOPIC,
            {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
             "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"},
        )  # fmt: skip
        assert (await c.invoke(create)).code == 0
        resp = await c.invoke(send_v2("T", queue_id=2))
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith(
            "request queueId[2] is illegal"
        )
        resp = await c.invoke(send_v2("T", b"x" * 2000))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in resp.remark
        resp = await c.invoke(send_v2("T", queue_id=-1))
        assert resp.code == 0 and resp.ext_fields["queueId"] in ("0", "1")
        missing = send_v2("T")
        del missing.ext_fields["b"]
        resp = await c.invoke(missing)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "'b'" in resp.remark
        resp = await c.invoke(send_v2("T", queue_id=2**32))  # Integer.parseInt refuses it
        assert resp.code == ResponseCode.SYSTEM_ERROR and "'e' = '4294967296' is out of range" in resp.remark
        pull = pull_cmd("T", 0)
        pull.ext_fields["queueOffset"] = str(2**63)
        resp = await c.invoke(pull)
        assert (
            resp.code == ResponseCode.SYSTEM_ERROR
            and "'queueOffset'" in resp.remark
            and "Long" in resp.remark
        )
        for code, ext in (
            (R.GET_MAX_OFFSET, {}),
            (R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g"}),
            (R.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "commitOffset": "1"}),
        ):
            resp = await c.invoke(RemotingCommand.request(code, {"topic": "T", "queueId": str(2**31), **ext}))
            assert resp.code == ResponseCode.SYSTEM_ERROR, (code, resp)
            assert "'queueId' = '2147483648' is out of range of a Java Integer" in resp.remark
        assert (await c.invoke(send_v2("T", queue_id=1))).code == 0  # the connection is still served
        await c.aclose()


@async_test
async def test_send_permissions_are_msg_check_s(Broker) -> None:
    """4.9.8's msgCheck: a broker without W (wipeWritePerm) refuses sends to order topics only, others
    are stored and a new topic is still created; a topic's own perm is never read on the send path."""

    def create(topic: str, perm: int) -> RemotingCommand:
        return RemotingCommand.request(
            R.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": str(perm),
             "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"},
        )  # fmt: skip

    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(create("ReadOnly", 4))).code == 0
        assert (await c.invoke(send_v2("ReadOnly"))).code == 0
        await c.aclose()
    async with Broker(brokerPermission=4) as b:
        c = await b.client()
        b.broker.topics.put(topic_config("Ordered", 1, 1, order=True), notify=False)  # (ORDER_TOPIC_CONFIG)
        assert (await c.invoke(create("Plain", 6))).code == 0
        resp = await c.invoke(send_v2("Ordered"))
        assert resp.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in resp.remark
        assert (await c.invoke(send_v2("Plain"))).code == 0
        assert (await c.invoke(send_v2("BrandNew"))).code == 0  # auto-created, as Java does
        assert [bytes(m.body) for m in stored(b.broker, "Plain")] == [b"hello"]
        await c.aclose()


@async_test
async def test_badly_typed_json_bodies_are_refused_naming_the_field(Broker, caplog) -> None:
    """A JSON body value of the wrong type gets SYSTEM_ERROR naming the field (no processor failing on
    it), and a refused subscription group is not stored: a later heartbeat of that group still works."""
    async with Broker() as b:
        c = await b.client()
        cases = [
            (R.CHECK_CLIENT_CONFIG, {"group": "G", "subscriptionData": 5}, "subscriptionData"),
            (R.CHECK_CLIENT_CONFIG, {"subscriptionData": {"topic": "T", "expressionType": []}}, "expressionType"),
            (R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {"groupName": "SGX", "retryQueueNums": "many"}, "retryQueueNums"),
            (R.LOCK_BATCH_MQ, {"consumerGroup": "G", "clientId": "c", "mqSet": 5}, "mqSet"),
            (R.HEART_BEAT, {"clientID": "c", "consumerDataSet": [{"groupName": "G", "consumeType": {}}]}, "consumeType"),
            # numbers past their Java type, which fastjson refuses as well (parseInt / parseLong error)
            (R.LOCK_BATCH_MQ, {"consumerGroup": "G", "clientId": "c",
                               "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 2**32}]},
             "mqSet[0].queueId: 4294967296 is out of range of a Java Integer"),
            (R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {"groupName": "SGX", "brokerId": str(2**63)},
             "brokerId: 9223372036854775808 is out of range of a Java Long"),
            (R.HEART_BEAT, {"clientID": "c", "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [
                {"topic": "T", "subString": "*", "codeSet": [-(2**31) - 1]}]}]}, "codeSet[0]"),
        ]  # fmt: skip
        for code, body, field in cases:
            resp = await c.invoke(RemotingCommand.request(code, body=json.dumps(body).encode()))
            assert resp.code == ResponseCode.SYSTEM_ERROR and field in (resp.remark or ""), (
                code,
                resp.remark,
            )
        assert b.broker.subscription_groups.table.get("SGX") is None
        sg = {"groupName": "SGX", "retryQueueNums": "2"}  # fastjson reads numbers given as text
        resp = await c.invoke(
            RemotingCommand.request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(sg).encode())
        )
        assert resp.code == ResponseCode.SUCCESS
        assert b.broker.subscription_groups.table["SGX"]["retryQueueNums"] == 2
        hb = {
            "clientID": "c",
            "consumerDataSet": [{"groupName": "SGX", "consumeType": 1, "subscriptionDataSet": []}],
        }
        assert (await c.invoke(RemotingCommand.request(R.HEART_BEAT, body=json.dumps(hb).encode()))).code == 0
        check = {"group": "SGX", "subscriptionData": {"topic": "T", "expressionType": "SQL92"}}
        resp = await c.invoke(RemotingCommand.request(R.CHECK_CLIENT_CONFIG, body=json.dumps(check).encode()))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "SQL92" in resp.remark
        await c.aclose()
    assert not [r for r in caplog.records if "processor failed" in r.getMessage()]


@async_test
async def test_send_v1_and_batches(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        v1 = send_v2("B", keys="K1")
        names = dict(
            a="producerGroup", b="topic", c="defaultTopic", d="defaultTopicQueueNums", e="queueId", f="sysFlag",
            g="bornTimestamp", h="flag", i="properties", j="reconsumeTimes", k="unitMode", m="batch",
        )  # fmt: skip
        v1.code = R.SEND_MESSAGE
        v1.ext_fields = {names[k]: v for k, v in v1.ext_fields.items()}
        assert (await c.invoke(v1)).code == 0
        entries = [
            BatchEntry(flag=i, body=b"b%d" % i, properties={"UNIQ_KEY": f"U{i}", "KEYS": f"BK{i}"})
            for i in range(3)
        ]
        batch = send_v2("B", encode_batch(entries))
        batch.code = R.SEND_BATCH_MESSAGE
        batch.ext_fields["m"] = "true"
        resp = await c.invoke(batch)
        assert (
            resp.code == 0
            and resp.ext_fields["queueOffset"] == "1"
            and resp.ext_fields["msgId"].count(",") == 2
        )
        cpp = send_v2("B", encode_batch(entries[:2]))  # C++ 2.1.0: 310 with m="1"
        cpp.ext_fields["m"] = "1"
        resp = await c.invoke(cpp)
        assert resp.code == 0 and resp.ext_fields["queueOffset"] == "4"
        msgs = list(iter_messages((await c.invoke(pull_cmd("B", 0))).body))
        assert [bytes(m.body) for m in msgs] == [b"hello", b"b0", b"b1", b"b2", b"b0", b"b1"]
        assert [m.properties.get("UNIQ_KEY") for m in msgs[1:4]] == ["U0", "U1", "U2"]
        assert [m.flag for m in msgs[1:4]] == [0, 1, 2]
        # 4.9.8's batch rules: a DELAY in the request's own properties (or a transaction flag) makes it
        # illegal; a message's own DELAY is stored as it is, not scheduled; %RETRY% takes batches too
        delayed_batch = send_v2(
            "B", encode_batch(entries[:1]), extra={"i": format_properties({"DELAY": "2"})}
        )
        delayed_batch.code = R.SEND_BATCH_MESSAGE
        assert (await c.invoke(delayed_batch)).code == ResponseCode.MESSAGE_ILLEGAL
        odd = [BatchEntry(body=b"d", properties={"UNIQ_KEY": "UD", "DELAY": "x"})]
        for topic in ("B", "%RETRY%BG"):
            own_delay = send_v2(topic, encode_batch(odd))
            own_delay.code = R.SEND_BATCH_MESSAGE
            assert (await c.invoke(own_delay)).code == 0
        (kept,) = list(iter_messages((await c.invoke(pull_cmd("B", 6))).body))
        assert (bytes(kept.body), kept.properties["DELAY"]) == (b"d", "x")
        await c.aclose()


def _java_batch(corpus: Path) -> tuple[RemotingCommand, dict[str, str]]:
    """From the corpus capture of a Java client's batches against a 4.9.8 broker: the first
    SEND_BATCH_MESSAGE, and each of its messages' properties string (by UNIQ_KEY) as pulled back."""
    batch: RemotingCommand | None = None
    pulled: dict[str, str] = {}
    for item in captured_requests_and_pulls(corpus / "pcap" / "c_BatchSend.pcap"):
        if isinstance(item, RemotingCommand):
            if item.code == R.SEND_BATCH_MESSAGE and batch is None:
                batch = item
        elif type(item) is MessageExt:
            pulled[item.properties["UNIQ_KEY"]] = item.properties_raw  # type: ignore[assignment]
    assert batch is not None
    return batch, pulled


@async_test
async def test_batch_messages_store_the_properties_the_java_broker_in_the_corpus_stored(
    Broker, corpus: Path
) -> None:
    """Each message of a batch is stored with its own properties string followed by the request's
    (WAIT, twice for a Java client) and CLUSTER, byte for byte as the 4.9.8 broker stored them."""
    java_batch, java_pulled = _java_batch(corpus)
    async with Broker() as b:
        c = await b.client()
        request = send_v2("JB", java_batch.body or b"", extra={"i": java_batch.ext_fields["i"]})  # type: ignore[index]
        request.code = R.SEND_BATCH_MESSAGE
        request.ext_fields["m"] = "true"  # type: ignore[index]
        resp = await c.invoke(request)
        assert resp.code == 0, resp.remark
        msgs = list(iter_messages((await c.invoke(pull_cmd("JB", 0))).body))
        await c.aclose()
    assert len(msgs) == len(decode_batch(java_batch.body or b"")) > 1
    for m in msgs:
        raw = java_pulled[m.properties["UNIQ_KEY"]]
        assert raw.count("WAIT\x01true") == 2
        assert m.properties_raw == raw


@async_test
async def test_a_5x_client_batch_stores_each_message_under_its_own_id(Broker) -> None:
    """A 5.x client's batch (DefaultMQProducer.batch) carries a UNIQ_KEY of its own in the request's
    properties besides each message's, and the send answers the messages' ids. 4.9.8 and 5.3.3 append
    the request's properties after each message's, so every message is read back and indexed under the
    batch's id; rmqgate leaves the batch's id out and appends the rest (WAIT, CLUSTER) as they do."""
    ids = [f"7F0000010001{i:020X}" for i in range(3)]
    entries = [
        BatchEntry(body=b"m%d" % i, properties={"WAIT": "true", "UNIQ_KEY": uid}) for i, uid in enumerate(ids)
    ]
    batch_id = "7F00000100010000000000000000FFFF"
    async with Broker() as b:
        c = await b.client()
        request = send_v2("B5", encode_batch(entries), uniq=batch_id)
        request.code = R.SEND_BATCH_MESSAGE
        request.ext_fields["m"] = "true"
        assert (await c.invoke(request)).code == 0
        msgs = list(iter_messages((await c.invoke(pull_cmd("B5", 0))).body))
        assert [m.properties["UNIQ_KEY"] for m in msgs] == ids  # 4.9.8: [batch_id] * 3
        for uid in ids:  # the id the client's SendResult gave finds its message in the index
            query = {**query_ext("B5", uid), "_UNIQUE_KEY_QUERY": "true"}
            for _ in range(100):  # the index is built as the messages are dispatched
                found = await c.invoke(RemotingCommand.request(R.QUERY_MESSAGE, query))
                if found.code == 0:
                    break
                await asyncio.sleep(0.05)
            assert found.code == 0, found.remark
            assert [m.properties["UNIQ_KEY"] for m in iter_messages(found.body)] == [uid]
        await c.aclose()
        cluster = b.broker.config.brokerClusterName
    for m, uid in zip(msgs, ids, strict=True):
        raw = m.properties_raw or ""
        assert batch_id not in raw and raw.count("UNIQ_KEY") == 1
        assert raw.startswith(format_properties({"WAIT": "true", "UNIQ_KEY": uid}))
        assert raw.count("WAIT\x01true") == 2 and f"CLUSTER\x01{cluster}" in raw


@async_test
async def test_long_polling_wakes_on_arrival_and_times_out(Broker) -> None:
    """A held pull's answer, woken or timed out, is written by the hold service (Java's
    executeRequestWhenWakeup), not the callback that gives it the request's serialization: JSON
    for the ROCKETMQ-header pulls here, as the corpus' Java broker answered them."""

    def binary(cmd: RemotingCommand) -> RemotingCommand:
        cmd.serialize_type = SerializeType.ROCKETMQ
        return cmd

    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(send_v2("LP"))).code == 0
        assert (await c.invoke(binary(pull_cmd("LP", 0)))).serialize_type == SerializeType.ROCKETMQ
        t0 = time.monotonic()
        timed_out = await c.invoke(binary(pull_cmd("LP", 1, sys_flag=4 | 2, suspend_ms=300)))
        assert timed_out.code == ResponseCode.PULL_NOT_FOUND and 0.25 <= time.monotonic() - t0 < 2
        assert timed_out.serialize_type == SerializeType.JSON
        parked = asyncio.ensure_future(
            c.invoke(binary(pull_cmd("LP", 1, sys_flag=4 | 2, suspend_ms=10_000)), 15)
        )
        filtered = asyncio.ensure_future(
            c.invoke(binary(pull_cmd("LP", 1, sys_flag=4 | 2, suspend_ms=3000, sub="TagB")), 15)
        )
        await wait_for(lambda: b.broker.pull_processor.hold.count == 2)
        assert not parked.done()
        other = await b.client()
        t0 = time.monotonic()
        assert (await other.invoke(send_v2("LP", b"second", tags="TagA"))).code == 0
        resp = await parked
        assert time.monotonic() - t0 < 5.0  # woken by the arrival, long before its 10 s suspend
        assert resp.code == 0 and [bytes(m.body) for m in iter_messages(resp.body)] == [b"second"]
        assert resp.serialize_type == SerializeType.JSON
        assert not filtered.done()  # TagA does not wake a TagB subscriber
        resp = await filtered
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # at its timeout: nothing matched
        await c.aclose()
        await other.aclose()


@async_test
async def test_a_slave_takes_no_puts_and_leaves_pull_offsets_alone(tmp_path: Path) -> None:
    """brokerRole=SLAVE, as Java's: its store refuses puts (SERVICE_NOT_AVAILABLE), a pull's commit
    offset is not stored, a pull past the queue is retried at its own offset instead of OFFSET_MOVED
    (unless offsetCheckInSlave), END_TRANSACTION is refused; it serves what its store holds."""
    root = str(tmp_path / "store")
    async with LocalBroker(root) as master:
        c = await master.client()
        for i in range(3):
            assert (await c.invoke(send_v2("T", f"m{i}".encode()))).code == 0
        await c.aclose()
    async with LocalBroker(root, brokerRole="SLAVE", brokerId=1) as slave:
        assert slave.broker.slave
        c = await slave.client()
        resp = await c.invoke(send_v2("T", b"refused"))
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE, resp
        resp = await c.invoke(pull_cmd("T", 0, sys_flag=1 | 4, commit=2))  # FLAG_COMMIT_OFFSET
        assert resp.code == 0 and [bytes(m.body) for m in iter_messages(resp.body)] == [b"m0", b"m1", b"m2"]
        query = {"consumerGroup": "CG", "topic": "T", "queueId": "0"}
        resp = await c.invoke(RemotingCommand.request(R.QUERY_CONSUMER_OFFSET, query))
        assert (resp.code, resp.ext_fields["offset"]) == (0, "0")  # not the 2 the pull carried
        resp = await c.invoke(pull_cmd("T", 10))
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY, resp
        assert (resp.ext_fields["nextBeginOffset"], resp.ext_fields["maxOffset"]) == ("10", "3")
        end = {"producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "0",
               "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "x"}  # fmt: skip
        resp = await c.invoke(RemotingCommand.request(R.END_TRANSACTION, end))
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, resp
        await c.aclose()
    async with LocalBroker(root, brokerRole="SLAVE", brokerId=1, offsetCheckInSlave=True) as slave:
        c = await slave.client()
        resp = await c.invoke(pull_cmd("T", 10))
        assert (resp.code, resp.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "3")
        await c.aclose()


@async_test
async def test_offsets_and_commit_side_effect(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        for i in range(3):
            await c.invoke(send_v2("OFF", b"%d" % i))
        q = RemotingCommand.request(
            R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G1", "topic": "OFF", "queueId": "0"}
        )
        assert (await c.invoke(q)).ext_fields == {"offset": "0"}  # queue still starts at 0
        upd = RemotingCommand.request(
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G1", "topic": "OFF", "queueId": "0", "commitOffset": "2"},
        )
        assert (await c.invoke(upd)).code == 0
        assert (await c.invoke(q)).ext_fields == {"offset": "2"}
        upd.ext_fields["commitOffset"] = "3"
        c.invoke_oneway(upd)
        await c.invoke(
            pull_cmd("OFF", 3, group="G1", commit=1, sys_flag=4 | 1)
        )  # commit-offset flag: stores 1
        assert (await c.invoke(q)).ext_fields == {"offset": "1"}
        base = {"topic": "OFF", "queueId": "0"}
        assert (await c.invoke(RemotingCommand.request(R.GET_MAX_OFFSET, base))).ext_fields == {"offset": "3"}
        assert (await c.invoke(RemotingCommand.request(R.GET_MIN_OFFSET, base))).ext_fields == {"offset": "0"}
        ts = int(
            (await c.invoke(RemotingCommand.request(R.GET_EARLIEST_MSG_STORETIME, base))).ext_fields[
                "timestamp"
            ]
        )
        assert abs(ts - time.time() * 1000) < 10_000
        search = RemotingCommand.request(R.SEARCH_OFFSET_BY_TIMESTAMP, {**base, "timestamp": str(ts)})
        assert (await c.invoke(search)).ext_fields == {"offset": "0"}
        await c.aclose()


def query_ext(topic: str, key: str) -> dict[str, str]:
    """QUERY_MESSAGE's header over all time."""
    return {"topic": topic, "key": key, "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(1 << 60)}


@async_test
async def test_query_and_view(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        resp = await c.invoke(send_v2("Q", b"findme", keys="order-1 order-2", uniq="UNIQ1"))
        msg_id = resp.ext_fields["msgId"]
        offset = int(msg_id[16:], 16)
        view = await c.invoke(RemotingCommand.request(R.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
        assert view.code == 0 and bytes(next(iter_messages(view.body)).body) == b"findme"
        bad = await c.invoke(RemotingCommand.request(R.VIEW_MESSAGE_BY_ID, {"offset": "999999"}))
        assert bad.code == ResponseCode.SYSTEM_ERROR
        qext = query_ext("Q", "order-2")
        found = await c.invoke(RemotingCommand.request(R.QUERY_MESSAGE, qext))
        assert found.code == 0 and bytes(next(iter_messages(found.body)).body) == b"findme"
        uniq = await c.invoke(
            RemotingCommand.request(R.QUERY_MESSAGE, {**qext, "key": "UNIQ1", "_UNIQUE_KEY_QUERY": "true"})
        )
        assert uniq.code == 0
        none = await c.invoke(RemotingCommand.request(R.QUERY_MESSAGE, {**qext, "key": "nope"}))
        assert none.code == ResponseCode.QUERY_NOT_FOUND
        assert none.ext_fields == {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
        for body in (b"again", b"third"):  # more messages with key order-2: oldest first (sorted)
            await c.invoke(send_v2("Q", body, keys="order-2"))
        found = await c.invoke(RemotingCommand.request(R.QUERY_MESSAGE, qext))
        assert [bytes(m.body) for m in iter_messages(found.body)] == [b"findme", b"again", b"third"]
        assert int(found.ext_fields["indexLastUpdatePhyoffset"]) > offset
        # answers Java writes itself go out in JSON, whatever the request's serialization
        binary = RemotingCommand.request(
            R.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, serialize_type=SerializeType.ROCKETMQ
        )
        assert (await c.invoke(binary)).serialize_type == SerializeType.JSON
        # an unknown code is answered by the default processor, through the usual callback
        binary.code = 4242
        unknown = await c.invoke(binary)
        assert (unknown.code, unknown.remark) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 4242 not supported",
        )
        assert unknown.serialize_type == SerializeType.ROCKETMQ
        await c.aclose()


@async_test
async def test_a_query_waiting_for_the_index_does_not_stall_other_requests(Broker) -> None:
    async with Broker() as b:
        dispatcher = b.store._index_process
        assert dispatcher is not None and dispatcher.proc is not None
        b.store.config.index_query_wait = 30_000
        c = await b.client()
        other = await b.client()
        os.kill(dispatcher.proc.pid, signal.SIGSTOP)  # the index falls behind what is stored
        try:
            assert (await c.invoke(send_v2("QW", keys="late"))).code == 0
            qext = query_ext("QW", "late")
            query = asyncio.ensure_future(c.invoke(RemotingCommand.request(R.QUERY_MESSAGE, qext), 60))
            await asyncio.sleep(0.2)  # the query is waiting for the index by now
            offset = await other.invoke(
                RemotingCommand.request(R.GET_MAX_OFFSET, {"topic": "QW", "queueId": "0"})
            )
            assert offset.code == 0 and not query.done()  # answered while the query still waits
        finally:
            os.kill(dispatcher.proc.pid, signal.SIGCONT)
        found = await query
        assert found.code == 0 and bytes(next(iter_messages(found.body)).body) == b"hello"
        await c.aclose()
        await other.aclose()


@async_test
async def test_a_corrected_pull_offset_is_recorded_in_offset_moved_event(Broker) -> None:
    """PULL_OFFSET_MOVED on a master also stores an OffsetMovedEvent in OFFSET_MOVED_EVENT queue 0
    (PullMessageProcessor.generateOffsetMovedEvent): TAGS and KEYS the group, the moved offsets."""
    async with Broker() as b:
        c = await b.client()
        for _ in range(3):
            await c.invoke(send_v2("OM"))
        resp = await c.invoke(pull_cmd("OM", 110, group="GOM"))
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.ext_fields["nextBeginOffset"] == "3"
        (event,) = stored(b.broker, "OFFSET_MOVED_EVENT")
        assert event.properties["TAGS"] == event.properties["KEYS"] == "GOM"
        assert list(event.properties) == ["KEYS", "DELAY", "TAGS"]  # Java's HashMap order
        assert json.loads(event.body) == {
            "consumerGroup": "GOM",
            "messageQueue": {"brokerName": "broker-t", "queueId": 0, "topic": "OM"},
            "offsetNew": 3,
            "offsetRequest": 110,
        }
        assert (await c.invoke(pull_cmd("OM", 1, group="GOM"))).code == ResponseCode.SUCCESS
        assert len(stored(b.broker, "OFFSET_MOVED_EVENT")) == 1  # found messages move nothing
        await c.aclose()


@async_test
async def test_heartbeat_consumer_list_and_notify(Broker) -> None:
    async with Broker() as b:
        notices: list[RemotingCommand] = []

        async def on_request(cmd: RemotingCommand) -> None:
            notices.append(cmd)

        c1 = await b.client(on_request=on_request)
        resp = await c1.invoke(heartbeat("cid-1", "G", "HT"))
        assert resp.code == 0 and resp.version == 409 and resp.ext_fields is None
        assert b.broker.topics.get("%RETRY%G")["readQueueNums"] == 1
        lst = await c1.invoke(RemotingCommand.request(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}))
        assert json.loads(lst.body) == {"consumerIdList": ["cid-1"]}
        c2 = await b.client()
        assert (await c2.invoke(heartbeat("cid-2", "G", "HT", ints=True))).code == 0  # C++ enum ordinals
        await wait_for(lambda: len(notices) >= 2)
        assert [n.code for n in notices] == [R.NOTIFY_CONSUMER_IDS_CHANGED] * 2
        assert notices[-1].ext_fields == {"consumerGroup": "G"} and notices[-1].is_oneway
        lst = await c1.invoke(RemotingCommand.request(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}))
        assert sorted(json.loads(lst.body)["consumerIdList"]) == ["cid-1", "cid-2"]
        # pulling with the heartbeat's subscription (no subscription flag): a stale subVersion gives 25
        await c1.invoke(send_v2("HT"))
        pull = pull_cmd("HT", 0, group="G", sys_flag=0)
        pull.ext_fields["subVersion"] = "100"
        assert (await c1.invoke(pull)).code == 0
        pull.ext_fields["subVersion"] = "200"
        assert (await c1.invoke(pull)).code == ResponseCode.SUBSCRIPTION_NOT_LATEST
        assert (
            await c1.invoke(pull_cmd("HT", 0, group="nobody", sys_flag=0))
        ).code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        conns = await c1.invoke(
            RemotingCommand.request(R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
        )
        assert len(json.loads(conns.body)["connectionSet"]) == 2
        await c2.aclose()  # closing a client's connection drops it and notifies the rest
        await wait_for(lambda: len(notices) >= 3)
        lst = await c1.invoke(RemotingCommand.request(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}))
        assert json.loads(lst.body) == {"consumerIdList": ["cid-1"]}
        assert len(notices) == 3
        unreg = RemotingCommand.request(
            R.UNREGISTER_CLIENT, {"clientID": "cid-1", "consumerGroup": "G", "producerGroup": "PG"}
        )
        assert (await c1.invoke(unreg)).code == 0
        lst = await c1.invoke(RemotingCommand.request(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}))
        assert lst.code == ResponseCode.SYSTEM_ERROR
        await c1.aclose()


class _SilentNamesrv(RequestProcessor):
    """A name server that takes REGISTER_BROKER and never answers."""

    codes = (R.REGISTER_BROKER, R.UNREGISTER_BROKER)

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return None


@async_test
async def test_client_management_as_4_9_8_does_it(Broker) -> None:
    """A heartbeat creating %RETRY% answers at once (the registration is oneway in Java, so a slow name
    server must not outlast the client's 3 s heartbeat timeout); an UNREGISTER_CLIENT from a non-member
    still tells the members; system groups are created even without autoCreateSubscriptionGroup; the
    pull remarks are Java's text."""
    namesrv = RemotingServer("127.0.0.1", 0, [_SilentNamesrv()])
    await namesrv.start()
    try:
        b = Broker(namesrvAddr=f"127.0.0.1:{namesrv.port}", autoCreateSubscriptionGroup=False)
        b.config.registerBrokerTimeoutMills = 3000
        b.broker.subscription_groups.put(default_group_config("G"))
        await b.broker.start()  # its first registration times out
        try:
            notices: list[RemotingCommand] = []

            async def on_request(cmd: RemotingCommand) -> None:
                notices.append(cmd)

            c1 = await b.client(on_request=on_request)
            t0 = time.monotonic()
            assert (await c1.invoke(heartbeat("cid-1", "G", "HT"))).code == 0
            assert time.monotonic() - t0 < 1.0 and b.broker.topics.get("%RETRY%G") is not None
            await wait_for(lambda: len(notices) == 1)
            c3 = await b.client()
            unreg = RemotingCommand.request(R.UNREGISTER_CLIENT, {"clientID": "cid-3", "consumerGroup": "G"})
            assert (await c3.invoke(unreg)).code == 0
            await wait_for(lambda: len(notices) == 2)
            assert notices[-1].ext_fields == {"consumerGroup": "G"}
            assert (await c1.invoke(heartbeat("cid-1", "CID_RMQ_SYS_X", "HT"))).code == 0
            assert b.broker.subscription_groups.find("CID_RMQ_SYS_X") is not None
            assert b.broker.topics.get("%RETRY%CID_RMQ_SYS_X") is not None
            unknown = await c1.invoke(pull_cmd("HT", 0, group="NOPE"))
            assert unknown.remark == (
                "subscription group [NOPE] does not exist, \nSee http://rocketmq.apache.org/docs/faq/ "
                "for further details."
            )
            missing = await c1.invoke(pull_cmd("NO_SUCH_TOPIC", 0, group="G"))
            assert missing.remark.startswith("topic[NO_SUCH_TOPIC] not exist, apply first please! \nSee ")
            await c1.aclose()
            await c3.aclose()
        finally:
            await b.broker.stop()
    finally:
        await namesrv.stop()


@async_test
async def test_a_heartbeat_without_a_group_or_topic_gets_system_error_and_registers_nothing(Broker) -> None:
    """4.9.8 answers SYSTEM_ERROR (an NPE in its maps) for a consumer or producer without groupName and
    a subscription without topic; nothing of such a heartbeat is registered. An empty name is valid."""
    b = Broker()
    await b.broker.start()
    try:
        c = await b.client()
        consumer = {"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}
        bad = [
            {"clientID": "c1", "consumerDataSet": [{"subscriptionDataSet": []}]},
            {
                "clientID": "c1",
                "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"subString": "*"}]}],
            },
            {"clientID": "c1", "consumerDataSet": [consumer], "producerDataSet": [{"groupName": None}]},
        ]
        for body in bad:
            r = await c.invoke(RemotingCommand.request(R.HEART_BEAT, body=json.dumps(body).encode()))
            assert r.code == ResponseCode.SYSTEM_ERROR and "heartbeat: a " in r.remark, r
        assert b.broker.consumers.find("G") is None and b.broker.consumers.find("") is None
        assert b.broker.topics.get("%RETRY%") is None and b.broker.topics.get("%RETRY%G") is None
        assert not b.broker.producers.groups
        empty = {"clientID": "c1", "consumerDataSet": [{"groupName": "", "subscriptionDataSet": []}]}
        r = await c.invoke(RemotingCommand.request(R.HEART_BEAT, body=json.dumps(empty).encode()))
        assert r.code == ResponseCode.SUCCESS and b.broker.consumers.find("") is not None
        await c.aclose()
    finally:
        await b.broker.stop()


@async_test
async def test_notify_consumer_ids_changed_disabled_for_every_change(Broker) -> None:
    """notifyConsumerIdsChangedEnable=false: no NOTIFY_CONSUMER_IDS_CHANGED when a consumer joins,
    unregisters or disconnects (Java's listener checks it for every CHANGE)."""
    async with Broker(notifyConsumerIdsChangedEnable=False) as b:
        notices: list[RemotingCommand] = []

        async def on_request(cmd: RemotingCommand) -> None:
            notices.append(cmd)

        c1 = await b.client(on_request=on_request)
        assert (await c1.invoke(heartbeat("cid-1", "G", "NT"))).code == 0
        c2 = await b.client()
        assert (await c2.invoke(heartbeat("cid-2", "G", "NT"))).code == 0
        c3 = await b.client()
        assert (await c3.invoke(heartbeat("cid-3", "G", "NT"))).code == 0
        unreg = RemotingCommand.request(R.UNREGISTER_CLIENT, {"clientID": "cid-2", "consumerGroup": "G"})
        assert (await c2.invoke(unreg)).code == 0
        await c3.aclose()
        lst = RemotingCommand.request(R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})

        async def members() -> list[str]:
            return json.loads((await c1.invoke(lst)).body)["consumerIdList"]

        deadline = time.monotonic() + 30
        while await members() != ["cid-1"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # the close was handled before that answer; a notice for c1 would have been written before it
        assert await members() == ["cid-1"] and notices == []
        await c1.aclose()


@async_test
async def test_admin_codes_and_unknown(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        await c.invoke(send_v2("ADM"))
        await c.invoke(heartbeat("cid", "AG", "ADM"))
        upd = RemotingCommand.request(
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "AG", "topic": "ADM", "queueId": "0", "commitOffset": "1"},
        )
        await c.invoke(upd)
        topics = json.loads((await c.invoke(RemotingCommand.request(R.GET_ALL_TOPIC_CONFIG))).body)
        assert {"ADM", "TBW102", "%RETRY%AG"} <= set(topics["topicConfigTable"])
        stats = await c.invoke(RemotingCommand.request(R.GET_TOPIC_STATS_INFO, {"topic": "ADM"}))
        assert (
            b'"maxOffset":1' in stats.body
            and b'{{"brokerName":"broker-t","queueId":0,"topic":"ADM"}:' in stats.body
        )
        cs = await c.invoke(
            RemotingCommand.request(R.GET_CONSUME_STATS, {"consumerGroup": "AG", "topic": "ADM"})
        )
        assert b'"brokerOffset":1,"consumerOffset":1' in cs.body
        offs = json.loads(
            (await c.invoke(RemotingCommand.request(R.GET_ALL_CONSUMER_OFFSET))).body.replace(
                b"{0:", b'{"0":'
            )
        )
        assert offs["offsetTable"]["ADM@AG"] == {"0": 1}
        rt = json.loads((await c.invoke(RemotingCommand.request(R.GET_BROKER_RUNTIME_INFO))).body)
        assert rt["table"]["brokerVersion"] == "409"
        sg = RemotingCommand.request(
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"SG1","retryMaxTimes":3}'
        )
        assert (await c.invoke(sg)).code == 0
        groups = json.loads(
            (await c.invoke(RemotingCommand.request(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))).body
        )
        assert groups["subscriptionGroupTable"]["SG1"]["retryMaxTimes"] == 3
        prod = await c.invoke(
            RemotingCommand.request(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})
        )
        assert json.loads(prod.body)["connectionSet"][0]["clientId"] == "cid"
        assert (await c.invoke(RemotingCommand.request(R.DELETE_TOPIC_IN_BROKER, {"topic": "ADM"}))).code == 0
        assert b.broker.topics.get("ADM") is None
        for topic, remark in (  # deleteTopic validates like updateAndCreateTopic
            ("TBW102", "The topic[TBW102] is conflict with system topic."),
            ("broker-t", "The topic[broker-t] is conflict with system topic."),
            (
                "bad topic",
                "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            ),
        ):
            refused = await c.invoke(RemotingCommand.request(R.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
            assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, remark)
        assert b.broker.topics.get("TBW102") is not None
        create = {"topic": "NL\n", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1"}
        create |= {"perm": "6", "topicFilterType": "SINGLE_TAG", "order": "false"}
        newline = await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_TOPIC, create))
        assert (newline.code, newline.remark) == (  # a trailing newline is no topic character
            ResponseCode.SYSTEM_ERROR,
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        )
        bogus = await c.invoke(
            RemotingCommand.request(
                R.UPDATE_AND_CREATE_TOPIC, {**create, "topic": "BG", "topicFilterType": "BOGUS"}
            )
        )
        assert (bogus.code, bogus.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "topicFilterType = [BOGUS] value invalid",
        )
        unknown = await c.invoke(RemotingCommand.request(4242, {}))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in unknown.remark
        await c.aclose()
        # a producer group whose connections closed is still known: an empty connection set (Java)
        c = await b.client()
        deadline = time.monotonic() + 30
        while b.broker.producers.groups["PG"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        prod = await c.invoke(
            RemotingCommand.request(R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PG"})
        )
        assert prod.code == 0 and json.loads(prod.body) == {"connectionSet": []}
        await c.aclose()


@async_test
async def test_a_read_only_broker_registers_every_topic_read_only(Broker) -> None:
    """brokerPermission=4: the registration carries perm 4 for every topic (registerBrokerAll), so
    producers' routes skip the broker instead of meeting NO_PERMISSION."""
    namesrv = RemotingServer("127.0.0.1", 0, NamesrvController().processors())
    await namesrv.start()
    try:
        async with Broker(brokerPermission=4, namesrvAddr=f"127.0.0.1:{namesrv.port}"):
            c = await RemotingClient.connect("127.0.0.1", namesrv.port)
            route = await c.invoke(RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))
            assert route.code == 0
            assert [q["perm"] for q in json.loads(route.body)["queueDatas"]] == [4]
            await c.aclose()
    finally:
        await namesrv.stop()


@async_test
async def test_the_name_servers_order_topic_table_sets_and_clears_order_topics(Broker) -> None:
    """Each registration's answer carries the name server's ORDER_TOPIC_CONFIG table (mqadmin
    updateOrderConf); the broker marks exactly the topics it names as order topics, and an emptied
    table clears the last one (updateOrderTopicConfig), as on a Java broker."""
    namesrv = RemotingServer("127.0.0.1", 0, NamesrvController().processors())
    await namesrv.start()
    try:
        async with Broker(namesrvAddr=f"127.0.0.1:{namesrv.port}") as b:
            topics = b.broker.topics
            topics.put(topic_config("OT", 4, 4))
            topics.put(topic_config("PT", 4, 4))
            await b.broker.register_all()
            assert not topics.get("OT")["order"]  # no table on the name server yet: nothing changes
            c = await RemotingClient.connect("127.0.0.1", namesrv.port)
            key = {"namespace": "ORDER_TOPIC_CONFIG", "key": "OT"}
            put = RemotingCommand.request(R.PUT_KV_CONFIG, {**key, "value": "broker-t:4"})
            assert (await c.invoke(put)).code == 0
            await b.broker.register_all()
            assert (topics.get("OT")["order"], topics.get("PT")["order"]) == (True, False)
            assert b.store.meta.get(TopicConfigManager.DB, "OT")["order"] is True  # persisted
            assert (await c.invoke(RemotingCommand.request(R.DELETE_KV_CONFIG, key))).code == 0
            await b.broker.register_all()
            assert not topics.get("OT")["order"]
            await c.aclose()
    finally:
        await namesrv.stop()


class _RecordingNamesrv(RequestProcessor):
    """A name server that only records what brokers send (and keeps no routes)."""

    codes = (R.REGISTER_BROKER, R.UNREGISTER_BROKER)

    def __init__(self) -> None:
        self.got: list[int] = []

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        self.got.append(request.code)
        return request.response(ResponseCode.SUCCESS, ext_fields={})


@async_test
async def test_stop_unregisters_even_after_the_name_server_connection_dropped(Broker) -> None:
    """UNREGISTER_BROKER goes out on a new connection when the old one is gone (unregisterBrokerAll);
    a name server that kept the route would otherwise keep it until its 120 s expiry."""
    recorder = _RecordingNamesrv()
    namesrv = RemotingServer("127.0.0.1", 0, [recorder])
    await namesrv.start()
    try:
        b = Broker(namesrvAddr=f"127.0.0.1:{namesrv.port}")
        async with b:
            assert recorder.got == [R.REGISTER_BROKER]
            for client in b.broker._namesrv_clients.values():
                client.close()
        assert recorder.got == [R.REGISTER_BROKER, R.UNREGISTER_BROKER]
    finally:
        await namesrv.stop()


@async_test
async def test_lite_pull_and_5x_fields_and_locks(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        for i in range(5):
            await c.invoke(send_v2("L5", b"x" * 100 + b"%d" % i))
        lite = pull_cmd("L5", 0, code=R.LITE_PULL_MESSAGE)
        lite.ext_fields["maxMsgBytes"] = "300"
        lite.version = 479
        resp = await c.invoke(lite)
        assert resp.code == 0 and 1 <= len(list(iter_messages(resp.body))) < 5
        body = {"consumerGroup": "OG", "clientId": "c1", "onlyThisBroker": True,
                "mqSet": [{"topic": "L5", "brokerName": "broker-t", "queueId": 0}]}  # fmt: skip
        lock = RemotingCommand.request(R.LOCK_BATCH_MQ, body=json.dumps(body).encode())
        resp = await c.invoke(lock)
        assert json.loads(resp.body)["lockOKMQSet"] == [
            {"brokerName": "broker-t", "queueId": 0, "topic": "L5"}
        ]
        body["clientId"] = "c2"
        resp = await c.invoke(RemotingCommand.request(R.LOCK_BATCH_MQ, body=json.dumps(body).encode()))
        assert json.loads(resp.body)["lockOKMQSet"] == []
        body["clientId"] = "c1"
        assert (
            await c.invoke(RemotingCommand.request(R.UNLOCK_BATCH_MQ, body=json.dumps(body).encode()))
        ).code == 0
        body["clientId"] = "c2"
        resp = await c.invoke(RemotingCommand.request(R.LOCK_BATCH_MQ, body=json.dumps(body).encode()))
        assert len(json.loads(resp.body)["lockOKMQSet"]) == 1
        await c.aclose()


def test_tag_hash_matches_java() -> None:
    assert java_string_hash("TagA") == 2598919


@async_test
async def test_sync_flush_send(Broker) -> None:
    async with Broker(flushDiskType="SYNC_FLUSH") as b:
        c = await b.client()
        resp = await c.invoke(send_v2("SF"))
        assert resp.code == 0 and resp.ext_fields["queueOffset"] == "0"
        # every group commit fails from here: a send waits for its commit unless WAIT is not "true"
        b.store._flush_service._flush_to = lambda target: -1
        assert (await c.invoke(send_v2("SF"))).code == ResponseCode.FLUSH_DISK_TIMEOUT
        no_wait = send_v2("SF")
        no_wait.ext_fields["i"] = format_properties({"WAIT": "false"})
        resp = await c.invoke(no_wait)
        assert resp.code == 0 and resp.ext_fields["queueOffset"] == "2"  # isWaitStoreMsgOK false
        await c.aclose()


@pytest.mark.parametrize("ser", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["JSON", "ROCKETMQ"])
@pytest.mark.parametrize(
    ("region", "prefix"),
    [
        ('Reg"ion%1', b"7F00000100002A9F"),
        ("Région", b"00000000000000000000FFFF7F00000100002A9F"),
        ("queueId-slot-5e1f", b"7F00000100002A9F"),  # the JSON template's marker: no JSON template
    ],
    ids=["ipv4", "ipv6-non-ascii", "no-json-template"],
)
def test_fast_send_response_matches_generic_encoding(ser: int, region: str, prefix: bytes) -> None:
    """The pre-encoded SEND success frame is byte-identical to the generic encoding of the same
    response in the request's serialization (the generic path's extFields order for ROCKETMQ)."""
    from types import SimpleNamespace

    from rmqgate.server.send import SendMessageProcessor
    from rmqgate.store.api import PutMessageStatus, PutResult
    from rmqgate.wire import decode_frame, encode_frame

    broker = SimpleNamespace(
        store=None, topics=SimpleNamespace(table={}), config=BrokerConfig(regionId=region)
    )
    proc = SendMessageProcessor(broker)  # type: ignore[arg-type]
    req = send_v2("T")
    req.opaque = 123456
    req.serialize_type = ser
    result = PutResult(
        PutMessageStatus.PUT_OK, None, 3, 1 << 40, physical_offset=0x8EE24ED2, msg_id_prefix=prefix
    )
    assert result.msg_id == prefix.decode() + "000000008EE24ED2"
    fast = proc.response(req, result)
    # pre-encoded but where the JSON template cannot be made: the generic response, still JSON
    assert isinstance(fast, bytes) is (ser == SerializeType.ROCKETMQ or "slot" not in region)
    ext = {
        "msgId": result.msg_id,
        "queueId": "3",
        "queueOffset": str(1 << 40),
        "MSG_REGION": region,
        "TRACE_ON": "true",
    }
    if ser == SerializeType.JSON:  # fastjson writes the map's keys sorted
        ext = dict(sorted(ext.items()))
    generic = req.response(0, None, ext)
    if isinstance(fast, bytes):
        assert fast == encode_frame(generic)
        fast = decode_frame(fast)
    assert fast == generic and fast.serialize_type == ser


@async_test
async def test_periodic_hold_check_wakes_unmatched_pull(Broker) -> None:
    """checkHoldRequest: a parked TagB pull is re-run once non-matching messages pass its offset (20)."""
    async with Broker() as b:
        hold = b.broker.pull_processor.hold
        hold.unbind()
        hold.bind(asyncio.get_running_loop(), 0.2)
        c = await b.client()
        assert (await c.invoke(send_v2("PC", tags="TagB"))).code == 0
        parked = asyncio.ensure_future(
            c.invoke(pull_cmd("PC", 1, sys_flag=4 | 2, suspend_ms=10_000, sub="TagB"), 15)
        )
        await asyncio.sleep(0.1)
        assert not parked.done()
        t0 = time.monotonic()
        assert (await c.invoke(send_v2("PC", tags="TagA"))).code == 0
        resp = await parked
        assert time.monotonic() - t0 < 2.0
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["nextBeginOffset"] == "2"
        await c.aclose()


@async_test
async def test_check_transaction_state_goes_to_a_producer(Broker) -> None:
    async with Broker() as b:
        got: list[RemotingCommand] = []

        async def on_request(cmd: RemotingCommand) -> None:
            if cmd.code != R.NOTIFY_CONSUMER_IDS_CHANGED:
                got.append(cmd)

        c = await b.client(on_request=on_request)
        assert (await c.invoke(heartbeat("cid-p", "G", "TX"))).code == 0  # also registers producer group PG
        assert not b.broker.check_transaction_state("nobody", {}, b"")
        ext = {"tranStateTableOffset": "1", "commitLogOffset": "2", "msgId": "U", "transactionId": "U"}
        assert b.broker.check_transaction_state("PG", ext, b"half")
        for _ in range(50):
            if got:
                break
            await asyncio.sleep(0.02)
        (cmd,) = got
        assert (
            cmd.code == R.CHECK_TRANSACTION_STATE
            and cmd.is_oneway
            and cmd.ext_fields == ext
            and cmd.body == b"half"
        )
        assert cmd.opaque > 0
        await c.aclose()


@async_test
async def test_consumer_running_info_is_relayed_to_the_client(Broker) -> None:
    async with Broker() as b:
        directly: list[RemotingCommand] = []

        async def on_request(cmd: RemotingCommand) -> RemotingCommand | None:
            if cmd.code == R.GET_CONSUMER_RUNNING_INFO:
                answer = cmd.response(0, "from the consumer", {"x": "y"}, b'{"properties":{"x":"1"}}')
                answer.language, answer.version = LanguageCode.CPP, 333
                return answer
            if cmd.code == R.CONSUME_MESSAGE_DIRECTLY:
                directly.append(cmd)
                return cmd.response(0, None, None, b'{"consumeResult":"CR_SUCCESS"}')
            return None

        consumer = await b.client(on_request=on_request)
        assert (await consumer.invoke(heartbeat("cid-r", "RG", "RT"))).code == 0
        admin = await b.client()
        ask = RemotingCommand.request(
            R.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "RG", "clientId": "cid-r"}
        )
        ask.serialize_type = SerializeType.ROCKETMQ
        resp = await admin.invoke(ask, 5)
        assert resp.code == 0 and resp.body == b'{"properties":{"x":"1"}}' and resp.opaque == ask.opaque
        # the consumer's own answer, as AdminBrokerProcessor returns it; only opaque, flag and
        # serialization are the request's
        assert (resp.language, resp.version, resp.remark, resp.ext_fields) == (
            LanguageCode.CPP,
            333,
            "from the consumer",
            {"x": "y"},
        )
        assert resp.is_response and resp.serialize_type == SerializeType.ROCKETMQ
        # consumeMessageDirectly: the consumer gets the stored message and the broker's name
        msg_id = (await admin.invoke(send_v2("RT", b"direct"))).ext_fields["msgId"]
        direct = {"consumerGroup": "RG", "clientId": "cid-r", "msgId": msg_id}
        resp = await admin.invoke(RemotingCommand.request(R.CONSUME_MESSAGE_DIRECTLY, direct), 5)
        assert resp.code == 0 and resp.body == b'{"consumeResult":"CR_SUCCESS"}'
        (got,) = directly
        assert got.ext_fields["brokerName"] == "broker-t" and got.ext_fields["msgId"] == msg_id
        assert [bytes(m.body) for m in iter_messages(got.body)] == [b"direct"]
        ask.ext_fields["clientId"] = "nobody"
        resp = await admin.invoke(ask, 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "not online" in resp.remark
        await consumer.aclose()
        await admin.aclose()


@async_test
async def test_client_channel_expires_without_heartbeat(Broker) -> None:
    async with Broker(channelExpiredTimeout=300) as b:
        c = await b.client()
        assert (await c.invoke(heartbeat("cid-x", "XG", "XT"))).code == 0
        assert b.broker.consumers.find("XG") is not None and "PG" in b.broker.producers.groups
        for _ in range(100):
            if c.closed:
                break
            await asyncio.sleep(0.05)
        assert c.closed  # no heartbeat for 0.3 s: the broker closed the connection
        assert b.broker.consumers.find("XG") is None
        assert b.broker.producers.groups["PG"] == {}  # the group stays, with no connection (Java)


@async_test
async def test_query_offset_not_found_when_the_queue_start_is_out_of_memory(Broker) -> None:
    """No committed offset and min offset 0, but message 0 lies further behind the CommitLog end than
    accessMessageInMemoryMaxRatio allows (here 0%): 22, so the client starts at consumeFromWhere."""
    async with Broker(accessMessageInMemoryMaxRatio=0) as b:
        c = await b.client()
        await c.invoke(send_v2("QD"))
        ext = {"consumerGroup": "QG", "topic": "QD", "queueId": "0"}
        assert (await c.invoke(RemotingCommand.request(R.QUERY_CONSUMER_OFFSET, ext))).code == (
            ResponseCode.QUERY_NOT_FOUND
        )
        await c.aclose()


@async_test
async def test_query_offset_not_found_for_5x_set_zero_false(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        await c.invoke(send_v2("QZ"))
        ext = {"consumerGroup": "QG", "topic": "QZ", "queueId": "0", "setZeroIfNotFound": "false"}
        resp = await c.invoke(RemotingCommand.request(R.QUERY_CONSUMER_OFFSET, ext, version=479))
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        assert resp.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        await c.aclose()


@async_test
async def test_retry_send_past_max_reconsume_goes_to_dlq(Broker) -> None:
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(heartbeat("cid-d", "DG", "DT"))).code == 0  # creates %RETRY%DG
        ok = send_v2("%RETRY%DG", b"retry-1", extra={"j": "1", "l": "3"})
        resp = await c.invoke(ok)
        assert resp.code == 0 and b.broker.topics.get("%DLQ%DG") is None
        dead = send_v2("%RETRY%DG", b"dead", extra={"j": "3", "l": "3"})
        resp = await c.invoke(dead)
        assert resp.code == 0 and resp.ext_fields["queueId"] == "0"
        dlq = b.broker.topics.get("%DLQ%DG")
        # read-write, as 4.9.4+ creates it (write-only DLQs could not be consumed or shown)
        assert dlq is not None and dlq["perm"] == 6 and dlq["writeQueueNums"] == 1
        pulled = await c.invoke(pull_cmd("%DLQ%DG", 0, group="DG"))
        assert pulled.code == 0 and [bytes(m.body) for m in iter_messages(pulled.body)] == [b"dead"]
        # the client's fallback send carries DELAY=3+n: to the DLQ too, after that delay (4.9.8
        # re-applies the request's properties after handleRetryAndDLQ cleared the level)
        late = send_v2(
            "%RETRY%DG",
            b"late",
            queue_id=-1,
            extra={"j": "3", "l": "3", "i": format_properties({"DELAY": "3"})},
        )
        resp = await c.invoke(late)
        assert resp.code == 0 and resp.ext_fields["queueId"] == "0"  # the retry queue picked, not 2
        (parked,) = iter_messages(
            b.store.select_one_message_by_offset(int(resp.ext_fields["msgId"][16:], 16))
        )
        assert (parked.topic, parked.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
        assert parked.properties["REAL_TOPIC"] == "%DLQ%DG" and parked.properties["DELAY"] == "3"
        await c.aclose()
