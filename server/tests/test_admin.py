"""AdminBrokerProcessor over real sockets and a real store, against what 4.9.8's handlers answer."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from rmqgate.server.admin import human_readable_byte_count
from rmqgate.server.config import load_broker_conf
from rmqgate.server.testing import async_test, heartbeat, pull_cmd, send_v2, wait_for
from rmqgate.server.topics import SYSTEM_TOPICS, topic_config
from rmqgate.store.api import SCHEDULE_TOPIC
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.bodies import (
    ConsumeStatsList,
    GetConsumerStatusBody,
    MessageQueue,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
)
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import SerializeType
from rmqgate.wire.message import format_properties

JAVA_GROUPS = {  # SubscriptionGroupManager.init
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
}


def commit(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    return RemotingCommand.request(R.UPDATE_CONSUMER_OFFSET, ext)


def create_topic(topic: str, read: int, write: int, *, full: bool = True) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC as mqadmin sends it, or without ``order`` and ``defaultTopic``."""
    ext = {"topic": topic, "readQueueNums": str(read), "writeQueueNums": str(write), "perm": "6"}
    ext["topicFilterType"] = "SINGLE_TAG"
    if full:
        ext |= {"defaultTopic": "TBW102", "order": "false"}
    return RemotingCommand.request(R.UPDATE_AND_CREATE_TOPIC, ext)


def send_with(topic: str, queue_id: int = 0, **props: str) -> RemotingCommand:
    return send_v2(topic, queue_id=queue_id, extra={"i": format_properties({"WAIT": "true", **props})})


@async_test
async def test_broker_consume_stats_per_group_and_topic_over_write_queues(Broker) -> None:
    """GET_BROKER_CONSUME_STATS (mqadmin brokerConsumeStats): every subscription group, a ConsumeStats
    per topic it has offsets in, writeQueueNums queues each; isOrder keeps the order topics."""
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(create_topic("CS1", 1, 2))).code == 0
        b.broker.topics.put(topic_config("CSO", 1, 1, order=True))
        for qid, n in ((0, 3), (1, 2)):
            for _ in range(n):
                assert (await c.invoke(send_v2("CS1", queue_id=qid))).code == 0
        await c.invoke(send_v2("CSO"))
        await c.invoke(commit("CG1", "CS1", 0, 1))
        await c.invoke(commit("CG1", "CSO", 0, 1))
        sg = b'{"groupName":"CG1"}'
        assert (
            await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=sg))
        ).code == 0

        resp = await c.invoke(RemotingCommand.request(R.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        body = ConsumeStatsList.from_json(resp.body)
        assert body.broker_addr == f"127.0.0.1:{b.broker.port}"
        groups = {g: stats for entry in body.consume_stats_list for g, stats in entry.items()}
        assert set(groups) == JAVA_GROUPS | {"CG1"} and groups["TOOLS_CONSUMER"] == []
        tables = {next(iter(s.offset_table)).topic: s.offset_table for s in groups["CG1"]}
        mq = MessageQueue
        assert {q: (w.broker_offset, w.consumer_offset) for q, w in tables["CS1"].items()} == {
            mq("CS1", "broker-t", 0): (3, 1),
            mq("CS1", "broker-t", 1): (2, 0),  # a write queue past readQueueNums (1)
        }
        assert tables["CS1"][mq("CS1", "broker-t", 0)].last_timestamp > 0
        assert body.total_diff == (3 - 1) + 2 + (1 - 1)

        resp = await c.invoke(RemotingCommand.request(R.GET_BROKER_CONSUME_STATS, {"isOrder": "true"}))
        body = ConsumeStatsList.from_json(resp.body)
        groups = {g: stats for entry in body.consume_stats_list for g, stats in entry.items()}
        assert [list(s.offset_table) for s in groups["CG1"]] == [[mq("CSO", "broker-t", 0)]]
        assert body.total_diff == 0
        await c.aclose()


@async_test
async def test_consume_stats_last_timestamp_is_0_without_a_stored_message(Broker) -> None:
    """GET_CONSUME_STATS sets lastTimestamp only when the store's is > 0 (the store says -1 here)."""
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(create_topic("LT", 1, 1))).code == 0
        await c.invoke(commit("LG", "LT", 0, 5))
        ask = RemotingCommand.request(R.GET_CONSUME_STATS, {"consumerGroup": "LG", "topic": "LT"})
        resp = await c.invoke(ask)
        assert resp.code == 0
        assert b'"brokerOffset":0,"consumerOffset":5,"lastTimestamp":0' in resp.body
        await c.aclose()


@async_test
async def test_consumer_status_asks_each_consumer_of_the_group(Broker) -> None:
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (Broker2Client.getConsumeStatus): every consumer is asked
    with GET_CONSUMER_STATUS_FROM_CLIENT; clientAddr names the only one to ask."""
    async with Broker() as b:
        asked: list[tuple[str, RemotingCommand]] = []

        def consumer_answering(cid: str, offset: int):
            async def on_request(cmd: RemotingCommand) -> RemotingCommand | None:
                if cmd.code != R.GET_CONSUMER_STATUS_FROM_CLIENT:
                    return None
                asked.append((cid, cmd))
                table = {MessageQueue("ST", "broker-t", 0): offset}
                return cmd.response(0, None, None, GetConsumerStatusBody(message_queue_table=table).to_json())

            return on_request

        c1 = await b.client(on_request=consumer_answering("cid-1", 7))
        c2 = await b.client(on_request=consumer_answering("cid-2", 9))
        assert (await c1.invoke(heartbeat("cid-1", "SG", "ST"))).code == 0
        assert (await c2.invoke(heartbeat("cid-2", "SG", "ST"))).code == 0
        admin = await b.client()
        ask = {"topic": "ST", "group": "SG"}
        resp = await admin.invoke(RemotingCommand.request(R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, ask), 15)
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        body = GetConsumerStatusBody.from_json(resp.body)
        mq = MessageQueue("ST", "broker-t", 0)
        assert body.consumer_table == {"cid-1": {mq: 7}, "cid-2": {mq: 9}} and body.message_queue_table == {}
        assert {cid for cid, _ in asked} == {"cid-1", "cid-2"}
        assert all(cmd.ext_fields == {"topic": "ST", "group": "SG"} for _, cmd in asked)

        asked.clear()
        only = RemotingCommand.request(R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {**ask, "clientAddr": "cid-2"})
        body = GetConsumerStatusBody.from_json((await admin.invoke(only, 15)).body)
        assert body.consumer_table == {"cid-2": {mq: 9}} and [cid for cid, _ in asked] == ["cid-2"]

        none = {"topic": "ST", "group": "NOBODY"}
        resp = await admin.invoke(RemotingCommand.request(R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, none))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "No Any Consumer online in the consumer group: [NOBODY]",
        )
        for c in (c1, c2, admin):
            await c.aclose()


@async_test
async def test_an_old_client_is_named_by_its_version(Broker) -> None:
    """A consumer older than V3_0_7_SNAPSHOT: the remark names its version as MQVersion does."""
    async with Broker() as b:
        old = await b.client()
        hb = heartbeat("cid-old", "OG", "OT")
        hb.version = 27
        assert (await old.invoke(hb)).code == 0
        admin = await b.client()
        assert (await admin.invoke(create_topic("OT", 1, 1))).code == 0
        await admin.invoke(commit("OG", "OT", 0, 0))
        reset = {"topic": "OT", "group": "OG", "timestamp": "-1", "isForce": "true"}
        resp = await admin.invoke(RemotingCommand.request(R.INVOKE_BROKER_TO_RESET_OFFSET, reset))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "the client does not support this feature. version=V3_0_6",
        )
        status = RemotingCommand.request(
            R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": "OT", "group": "OG"}
        )
        resp = await admin.invoke(status)
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "the client does not support this feature. version=V3_0_6",
        )
        await old.aclose()
        await admin.aclose()


@async_test
async def test_missing_is_force_order_and_default_topic_are_tolerated(Broker) -> None:
    """4.9.8 only logs a missing @CFNotNull field: a topic is created without order/defaultTopic, and a
    reset without isForce is not forced."""
    async with Broker() as b:
        c = await b.client()
        resp = await c.invoke(create_topic("NoOrder", 2, 2, full=False))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "not set any response code")
        assert b.broker.topics.get("NoOrder")["writeQueueNums"] == 2
        for qid in range(2):
            for _ in range(3):
                await c.invoke(send_v2("NoOrder", queue_id=qid))
            await c.invoke(commit("RG", "NoOrder", qid, 1))
        consumer = await b.client(on_request=lambda cmd: None)
        assert (await consumer.invoke(heartbeat("cid-r", "RG", "NoOrder"))).code == 0
        reset = {"topic": "NoOrder", "group": "RG", "timestamp": "-1"}
        resp = await c.invoke(RemotingCommand.request(R.INVOKE_BROKER_TO_RESET_OFFSET, reset))
        assert resp.code == ResponseCode.SUCCESS
        # not forced: the max offset (3) is above the committed one (1), which stays
        assert resp.body.count(b"}:1") == 2
        await consumer.aclose()
        await c.aclose()


@async_test
async def test_absurd_queue_counts_are_refused(Broker) -> None:
    """A topic of 2^31 read queues would make every later consumerProgress loop over them all: refused,
    as is a negative count; the limit itself is taken."""
    async with Broker() as b:
        c = await b.client()
        for read, write in ((2147483647, 4), (4, 1 << 20), (-1, 4)):
            resp = await c.invoke(create_topic("Absurd", read, write))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "out of range" in (resp.remark or ""), resp
        assert b.broker.topics.get("Absurd") is None
        assert (await c.invoke(create_topic("Absurd", 1024, 1024))).code == ResponseCode.SUCCESS
        stats = RemotingCommand.request(R.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "Absurd"})
        assert (await c.invoke(stats)).code == ResponseCode.SUCCESS
        group = json.dumps({"groupName": "AbsurdG", "retryQueueNums": 2147483647}).encode()
        resp = await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "retryQueueNums" in (resp.remark or ""), resp
        await c.aclose()


@async_test
async def test_all_producer_info(Broker) -> None:
    """GET_ALL_PRODUCER_INFO (mqadmin producer): ProducerTableInfo, producer group -> its clients."""
    async with Broker() as b:
        p = await b.client()
        before = int(time.time() * 1000)
        assert (await p.invoke(heartbeat("cid-p", "CG", "T"))).code == 0  # (producer group PG)
        admin = await b.client()
        resp = await admin.invoke(RemotingCommand.request(R.GET_ALL_PRODUCER_INFO))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        body = json.loads(resp.body)
        (info,) = body["data"]["PG"]
        assert set(body["data"]) == {"PG"}
        assert (info["clientId"], info["language"], info["version"]) == ("cid-p", "JAVA", 409)
        assert info["remoteIP"] == "/" + p.channel.local_addr
        assert before - 1000 <= info["lastUpdateTimestamp"] <= int(time.time() * 1000) + 1000
        assert ProducerTableInfo.from_json(resp.body).data["PG"][0].client_id == "cid-p"
        await p.aclose()
        await wait_for(lambda: not b.broker.producers.groups["PG"])
        resp = await admin.invoke(RemotingCommand.request(R.GET_ALL_PRODUCER_INFO))
        assert json.loads(resp.body) == {"data": {}}  # an emptied group is left out
        await admin.aclose()


@async_test
async def test_query_consume_queue(Broker) -> None:
    """QUERY_CONSUME_QUEUE (mqadmin queryCq): the units from an index, the queue's bounds, and the
    group's subscription when it is online."""
    async with Broker() as b:
        c = await b.client()
        await c.invoke(heartbeat("cid-q", "QG", "QT", "TagA"))
        for tag in ("TagA", "TagB", "TagA"):
            assert (await c.invoke(send_v2("QT", tags=tag))).code == 0
        units = b.store.get_consume_queue_units("QT", 0, 0, 10)

        def query(**ext: str) -> RemotingCommand:
            return RemotingCommand.request(R.QUERY_CONSUME_QUEUE, {"topic": "QT", "queueId": "0", **ext})

        resp = await c.invoke(query(index="1", count="5", consumerGroup="QG"))
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        body = QueryConsumeQueueResponseBody.from_json(resp.body)
        assert (body.min_queue_index, body.max_queue_index) == (0, 3)
        assert [(d.physic_offset, d.physic_size, d.tags_code) for d in body.queue_data] == units[1:]
        assert body.subscription_data.sub_string == "TagA" and body.filter_data == "null"
        raw = json.loads(resp.body)["queueData"][0]
        assert set(raw) == {"eval", "physicOffset", "physicSize", "tagsCode"} and raw["eval"] is False

        body = QueryConsumeQueueResponseBody.from_json(
            (await c.invoke(query(count="1", consumerGroup="X"))).body
        )
        assert body.subscription_data is None and body.filter_data == "X@QT is not online!"
        assert [d.physic_offset for d in body.queue_data] == [units[0][0]]
        assert "filterData" not in json.loads((await c.invoke(query(count="1"))).body)

        resp = await c.invoke(query(index="3", count="1"))
        assert (resp.code, resp.remark, resp.body) == (
            ResponseCode.SUCCESS,
            "Index 3 of 0@QT is not exist!",
            None,
        )
        resp = await c.invoke(query(queueId="5"))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "5@QT is not exist!")
        await c.aclose()


@async_test
async def test_clean_unused_topic_and_the_other_store_maintenance_codes(Broker) -> None:
    """CLEAN_UNUSED_TOPIC destroys the ConsumeQueues of topics without a config, but not
    SCHEDULE_TOPIC_XXXX's or the transaction topics'; DELETE_EXPIRED_COMMITLOG deletes CommitLog
    files past fileReservedTime; CLEAN_EXPIRED_CONSUMEQUEUE then destroys the queues wholly below."""
    async with Broker(fileReservedTime=0, deleteWhen="99") as b:
        c = await b.client()
        for topic in ("Kept", "Gone", "Early"):
            assert (await c.invoke(send_v2(topic))).code == 0
        assert (await c.invoke(send_with("Kept", DELAY="5"))).code == 0
        half = send_with("Kept", TRAN_MSG="true", PGROUP="PG")
        assert (await c.invoke(half)).code == 0
        b.broker.topics.delete("Gone")  # a config gone, its queues left
        before = b.store.topics()
        assert {"Kept", "Gone", SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC"} <= before

        for code in (R.CLEAN_UNUSED_TOPIC, R.CLEAN_EXPIRED_CONSUMEQUEUE):
            resp = await c.invoke(RemotingCommand.request(code))
            assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        assert b.store.topics() == before - {"Gone"}

        big = b"x" * 200_000
        for _ in range(8):  # past a 1 MiB CommitLog segment
            assert (await c.invoke(send_v2("Kept", big))).code == 0
        resp = await c.invoke(RemotingCommand.request(R.DELETE_EXPIRED_COMMITLOG), 10)
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        assert b.store.get_min_phy_offset() > 0
        # Early's one message went with the first segment: its queue goes; Kept has later ones
        assert (await c.invoke(RemotingCommand.request(R.CLEAN_EXPIRED_CONSUMEQUEUE))).code == 0
        assert "Early" not in b.store.topics() and "Kept" in b.store.topics()
        await c.aclose()


@async_test
async def test_system_topic_list_is_the_validators_set(Broker) -> None:
    """GET_SYSTEM_TOPIC_LIST_FROM_BROKER: TopicValidator's static topics and those the broker added
    (cluster, broker name, trace topic, <cluster>_REPLY_TOPIC): mqadmin exportMetadata keeps the rest."""
    async with Broker(traceTopicEnable=True) as b:
        c = await b.client()
        await c.invoke(send_v2("UserTopic"))
        resp = await c.invoke(RemotingCommand.request(R.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
        got = set(json.loads(resp.body)["topicList"])
        assert got == SYSTEM_TOPICS
        assert {
            "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
            "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
            "DefaultCluster", "broker-t", "DefaultCluster_REPLY_TOPIC",
        } <= got  # fmt: skip
        topics = json.loads((await c.invoke(RemotingCommand.request(R.GET_ALL_TOPIC_CONFIG))).body)
        assert set(topics["topicConfigTable"]) - got == {"UserTopic"}
        await c.aclose()


@async_test
async def test_runtime_info_has_javas_keys(Broker) -> None:
    """GET_BROKER_RUNTIME_INFO carries every key prepareRuntimeInfo and the store's getRuntimeInfo
    write (clusterList formats the head wait times), the delay levels' offsets among them."""
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(send_with("RT", DELAY="1"))).code == 0
        await wait_for(lambda: b.store.meta.delay_offsets().get(1) == 1)
        resp = await c.invoke(RemotingCommand.request(R.GET_BROKER_RUNTIME_INFO))
        table = json.loads(resp.body)["table"]
        for key, value in {
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "sendThreadPoolQueueCapacity": "10000",
            "pullThreadPoolQueueCapacity": "100000",
            "queryThreadPoolQueueCapacity": "20000",
            "queryThreadPoolQueueSize": "0",
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": "100000",
            "startAcceptSendRequestTimeStamp": "0",
            "remainTransientStoreBufferNumbs": "2147483647",
            "putMessageFailedTimes": "0",
            "dispatchMaxBuffer": "0",
            "getMessageEntireTimeMax": "0",
            "putLatency99": "0.00",
            "putLatency999": "0.00",
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": "409",
            "scheduleMessageOffset_1": "1,1",  # delivered up to the level's queue end
        }.items():
            assert table.get(key) == value, key
        delays = {k for k in table if k.startswith("scheduleMessageOffset_")}
        assert delays == {f"scheduleMessageOffset_{level}" for level in b.store.meta.delay_offsets()}
        assert table["putMessageDistributeTime"].startswith("[<=0ms]:0 [0~10ms]:0 ")
        assert re.fullmatch(r"\[ 0 days, 0 hours, 0 minutes, \d+ seconds \]", table["runtime"]), table[
            "runtime"
        ]
        # mqadmin brokerStatus on a 4.9.8 broker lists no broker or cluster name and no flushDiskType
        assert not {"brokerName", "brokerClusterName", "flushDiskType"} & set(table)
        assert table["putMessageDistributeTime"].endswith(" [10s~]:0 ")
        capacity = re.fullmatch(
            r"Total : (.+), Free : (\d+\.\d [KMGTPE]iB|\d+ B)\.", table["commitLogDirCapacity"]
        )
        assert capacity is not None
        assert capacity[1] == human_readable_byte_count(shutil.disk_usage(b.config.storePathRootDir).total)
        assert (
            table[f"commitLogDiskRatio_{b.config.storePathRootDir}/commitlog"] == table["commitLogDiskRatio"]
        )
        await c.aclose()


def test_human_readable_byte_count_is_mixalls() -> None:
    assert [human_readable_byte_count(n) for n in (0, 1023, 1024, 1536, 10**9, 500 * 1024**3)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "953.7 MiB", "500.0 GiB",
    ]  # fmt: skip


@async_test
async def test_cid_rmq_sys_trace_is_no_group_at_start_but_made_on_use(Broker) -> None:
    """SubscriptionGroupManager starts with 7 groups; a CID_RMQ_SYS_ one is made when first used, even
    with autoCreateSubscriptionGroup off."""
    async with Broker(autoCreateSubscriptionGroup=False) as b:
        c = await b.client()
        groups = json.loads(
            (await c.invoke(RemotingCommand.request(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))).body
        )
        assert set(groups["subscriptionGroupTable"]) == JAVA_GROUPS
        await c.invoke(send_v2("TraceT"))
        resp = await c.invoke(pull_cmd("TraceT", 0, group="CID_RMQ_SYS_TRACE", suspend_ms=0))
        assert resp.code == ResponseCode.SUCCESS
        assert b.broker.subscription_groups.table["CID_RMQ_SYS_TRACE"]["groupName"] == "CID_RMQ_SYS_TRACE"
        resp = await c.invoke(pull_cmd("TraceT", 0, group="CID_OTHER", suspend_ms=0))
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        await c.aclose()


@async_test
async def test_update_broker_config_is_written_back_to_the_broker_conf(Broker, tmp_path: Path) -> None:
    """As Configuration.persist: an update outlives a restart. The file's other keys stay as written;
    a refused update writes nothing; without a broker.conf nothing is written."""
    conf = tmp_path / "broker.conf"
    conf.write_text("# mine\nbrokerName=broker-t\nmaxMessageSize = 4194304\nnamesrvAddr=10.0.0.1:9876\n")
    async with Broker() as b:
        b.broker.config_path = str(conf)
        c = await b.client()
        update = RemotingCommand.request(
            R.UPDATE_BROKER_CONFIG, body=b"maxMessageSize=1048576\nhaListenPort=20912\n"
        )
        assert (await c.invoke(update)).code == 0
        reloaded = load_broker_conf(str(conf))
        assert (reloaded.maxMessageSize, reloaded.haListenPort) == (1048576, 20912)
        assert (reloaded.brokerName, reloaded.namesrvAddr) == ("broker-t", "10.0.0.1:9876")
        before = conf.read_text()
        refused = RemotingCommand.request(R.UPDATE_BROKER_CONFIG, body=b"brokerConfigPath=/x\n")
        assert (await c.invoke(refused)).code == ResponseCode.NO_PERMISSION
        assert conf.read_text() == before
        b.broker.config_path = None
        assert (await c.invoke(update)).code == 0 and conf.read_text() == before
        await c.aclose()


@async_test
async def test_query_topic_consume_by_who_names_subscribers_and_groups_with_offsets(Broker) -> None:
    """QUERY_TOPIC_CONSUME_BY_WHO (mqadmin topicList -c): the groups subscribed to the topic and
    those holding an offset of it, in either header serialization."""
    async with Broker() as b:
        c = await b.client()
        assert (await c.invoke(heartbeat("cid-w", "WhoSub", "WhoT"))).code == 0
        assert (await c.invoke(heartbeat("cid-x", "OtherSub", "OtherT"))).code == 0
        assert (await c.invoke(send_v2("WhoT", b"x"))).code == 0
        assert (await c.invoke(commit("WhoOffset", "WhoT", 0, 1))).code == 0
        for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.ROCKETMQ):
            query = RemotingCommand.request(
                R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "WhoT"}, serialize_type=serialize_type
            )
            resp = await c.invoke(query)
            assert resp.code == ResponseCode.SUCCESS
            assert json.loads(resp.body) == {"groupList": ["WhoOffset", "WhoSub"]}
        await c.aclose()
