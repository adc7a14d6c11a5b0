"""Client management (heartbeat, consumer list, notify, unregister) and mqadmin's broker admin codes."""

from __future__ import annotations

import re
import socket

import pytest

from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    dumps,
    heartbeat_body,
    java_hash,
    loads,
    wait_until,
)
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.frame import encode_frame

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]


def cpp_heartbeat_body(client_id: str, group: str, topic: str) -> bytes:
    """HeartbeatData as the C++ core writes it: enums as integers."""
    return dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": 0,  # CONSUME_FROM_LAST_OFFSET
                    "consumeType": 1,  # CONSUME_PASSIVELY
                    "groupName": group,
                    "messageModel": 1,  # CLUSTERING
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "codeSet": [java_hash("TagA")],
                            "expressionType": "TAG",
                            "subString": "TagA",
                            "subVersion": 1,
                            "tagsSet": ["TagA"],
                            "topic": topic,
                        }
                    ],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [],
        }
    )


def consumer_list(c, group):
    return c.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


@pytest.mark.parametrize("style", ["names", "integers"])
@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_heartbeat_registers_consumer(cluster, uniq, make_topic, ser, style):
    topic = make_topic(uniq())
    group, client_id = uniq("g"), uniq("client")
    lang = LanguageCode.JAVA if style == "names" else LanguageCode.CPP
    with cluster.broker_client(serialize_type=ser, language=lang) as c:
        if style == "names":
            body = heartbeat_body(client_id, consumers=[{"group": group, "topics": {topic: "TagA"}}])
        else:
            body = cpp_heartbeat_body(client_id, group, topic)
        resp = c.invoke(RequestCode.HEART_BEAT, body=body)
        assert resp.code == ResponseCode.SUCCESS, resp
        assert resp.serialize_type == ser
        assert resp.version >= 232, "clients refuse SQL92/non-tag filtering below V4_1_0 (PROTOCOL.md §1.5)"
        resp = consumer_list(c, group)
        assert resp.code == ResponseCode.SUCCESS
        assert loads(resp.body)["consumerIdList"] == [client_id]
        resp = c.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        assert resp.code == ResponseCode.SUCCESS
        conn = loads(resp.body)
        assert [x["clientId"] for x in conn["connectionSet"]] == [client_id]
        assert conn["consumeType"] == "CONSUME_PASSIVELY" and conn["messageModel"] == "CLUSTERING"
        assert conn["subscriptionTable"][topic]["subString"] == "TagA"


def test_heartbeat_creates_retry_topic(cluster, uniq, broker):
    group = uniq("g")
    assert broker.heartbeat(uniq("client"), consumers=[{"group": group, "topics": {}}]).code == 0
    resp = broker.invoke(RequestCode.GET_ALL_TOPIC_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    table = loads(resp.body)["topicConfigTable"]
    assert f"%RETRY%{group}" in table
    assert table[f"%RETRY%{group}"]["perm"] & 6 == 6


def test_consumer_list_of_unknown_group(cluster, uniq, broker):
    assert consumer_list(broker, uniq("nogroup")).code == ResponseCode.SYSTEM_ERROR
    resp = broker.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": uniq("nogroup")})
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE


def test_notify_consumer_ids_changed_and_unregister(cluster, uniq, make_topic):
    topic = make_topic(uniq())
    group = uniq("g")
    a_id, b_id = uniq("clientA"), uniq("clientB")
    consumers = [{"group": group, "topics": {topic: "*"}}]
    with cluster.broker_client() as a, cluster.broker_client() as b:
        assert a.heartbeat(a_id, consumers=consumers).code == 0
        assert b.heartbeat(b_id, consumers=consumers).code == 0
        note = a.wait_server_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, timeout=10)
        assert note.ext_fields["consumerGroup"] == group
        assert sorted(loads(consumer_list(a, group).body)["consumerIdList"]) == sorted([a_id, b_id])
        resp = b.invoke(RequestCode.UNREGISTER_CLIENT, {"clientID": b_id, "consumerGroup": group})
        assert resp.code == ResponseCode.SUCCESS
        assert loads(consumer_list(a, group).body)["consumerIdList"] == [a_id]
    # closing the channel drops the consumer too
    with cluster.broker_client() as c:
        gone = wait_until(lambda: consumer_list(c, group).code == ResponseCode.SYSTEM_ERROR, timeout=10)
        assert gone, "consumer still listed after its connection closed"


def test_producer_connection_list(cluster, uniq, broker):
    group, client_id = uniq("pg"), uniq("producer")
    assert broker.heartbeat(client_id, producer_groups=[group]).code == ResponseCode.SUCCESS
    resp = broker.invoke(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
    assert resp.code == ResponseCode.SUCCESS
    conns = loads(resp.body)["connectionSet"]
    assert [c["clientId"] for c in conns] == [client_id]
    assert conns[0]["language"] == "JAVA"
    resp = broker.invoke(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": uniq("nopg")})
    assert resp.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_create_list_delete_topic(cluster, uniq, ser):
    topic = uniq()
    with cluster.broker_client(serialize_type=ser) as c, cluster.namesrv_client() as ns:
        assert c.create_topic(topic, 5).code == ResponseCode.SUCCESS
        table = loads(c.invoke(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        assert table[topic]["readQueueNums"] == 5 and table[topic]["writeQueueNums"] == 5
        assert wait_until(lambda: ns.route(topic).code == ResponseCode.SUCCESS, timeout=40, interval=0.2)
        # updating changes the queue count
        assert c.create_topic(topic, 2).code == ResponseCode.SUCCESS
        table = loads(c.invoke(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        assert table[topic]["writeQueueNums"] == 2
        assert c.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}).code == ResponseCode.SUCCESS
        table = loads(c.invoke(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
        assert topic not in table
        # mqadmin deleteTopic also removes it from the name server
        assert ns.invoke(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}).code == ResponseCode.SUCCESS
        assert ns.route(topic).code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize("bad", ["has space", "semi;colon", "", "T" * 128])
def test_create_topic_with_invalid_name(cluster, broker, bad):
    assert broker.create_topic(bad).code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("which", ["cluster-name", "SCHEDULE_TOPIC_XXXX", "TBW102", "rmq_sys_prefix"])
def test_create_system_topic_is_refused(cluster, broker, which):
    """AdminBrokerProcessor.updateAndCreateTopic: TopicValidator.isSystemTopic -> SYSTEM_ERROR."""
    topic = {"cluster-name": cluster.cluster_name, "rmq_sys_prefix": "rmq_sys_compat"}.get(which, which)
    # the config a wrongly accepted request would write is the built-in one (TBW102: 8/8, perm 7), so a
    # server that fails this test does not break topic auto-creation for the rest of the suite
    queues, perm = {"TBW102": (8, 7), "SCHEDULE_TOPIC_XXXX": (18, 6)}.get(topic, (4, 6))
    resp = broker.create_topic(topic, queues, perm=perm)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "system" in (resp.remark or "").lower()


def test_subscription_groups(cluster, uniq, broker):
    group = uniq("sg")
    config = {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 5,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    resp = broker.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=dumps(config))
    assert resp.code == ResponseCode.SUCCESS
    resp = broker.invoke(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    table = loads(resp.body)["subscriptionGroupTable"]
    assert table[group]["retryMaxTimes"] == 5
    resp = broker.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group})
    assert resp.code == ResponseCode.SUCCESS
    table = loads(broker.invoke(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
    assert group not in table


def test_broker_runtime_info_has_what_mqadmin_reads(cluster, broker):
    resp = broker.invoke(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert resp.code == ResponseCode.SUCCESS
    table = loads(resp.body)["table"]
    # ClusterListSubCommand reads these
    for key in (
        "brokerVersionDesc",
        "msgPutTotalTodayNow",
        "msgGetTotalTodayNow",
        "putTps",
        "getTransferedTps",
        "msgPutTotalYesterdayMorning",
        "msgGetTotalYesterdayMorning",
        "msgPutTotalTodayMorning",
        "msgGetTotalTodayMorning",
        "commitLogDiskRatio",
    ):
        assert key in table, key
    assert all(isinstance(v, str) for v in table.values())


def test_broker_runtime_totals_count_puts_and_pulled_messages(cluster, uniq, make_topic, broker, dispatched):
    """msgPutTotalTodayNow / msgGetTotalTodayNow (mqadmin clusterList's #InTotalToday) move with
    messages stored and messages handed to pulls. (Other clients of the broker may add to them.)"""
    topic = make_topic(uniq(), queues=1)

    def totals() -> tuple[int, int]:
        table = loads(broker.invoke(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
        return int(table["msgPutTotalTodayNow"]), int(table["msgGetTotalTodayNow"])

    put0, get0 = totals()
    for i in range(5):
        assert broker.send_message(topic, b"%d" % i, queue_id=0).code == ResponseCode.SUCCESS
    dispatched(topic, 0, 5)
    resp = broker.pull(uniq("g"), topic, 0, 0, max_nums=3, sys_flag=PULL_SUBSCRIPTION, subscription="*")
    assert resp.code == ResponseCode.SUCCESS
    put1, get1 = totals()
    assert put1 - put0 >= 5
    assert get1 - get0 >= 3
    table = loads(broker.invoke(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert len(table["putTps"].split(" ")) == 3  # 10 s, 60 s and 600 s figures


def test_view_broker_stats_data(cluster, uniq, make_topic, broker):
    """mqadmin statsAll / the dashboard's topic charts: TOPIC_PUT_NUMS of a topic written to, over the
    last minute, hour and day (rmqgate snapshots every 10 s, so the item shows up within that)."""
    topic = make_topic(uniq(), queues=1)
    for i in range(3):
        assert broker.send_message(topic, b"%d" % i).code == ResponseCode.SUCCESS

    def view(name: str, key: str):
        return broker.invoke(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})

    assert wait_until(lambda: view("TOPIC_PUT_NUMS", topic).code == ResponseCode.SUCCESS, timeout=25)
    data = loads(view("TOPIC_PUT_NUMS", topic).body)
    assert set(data) == {"statsMinute", "statsHour", "statsDay"}
    assert all(set(data[k]) == {"sum", "tps", "avgpt"} for k in data)
    resp = view("TOPIC_PUT_NUMS", uniq("never"))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "not exist" in resp.remark


def test_topic_stats_and_consume_stats(cluster, uniq, make_topic, broker, dispatched):
    topic = make_topic(uniq(), queues=2)
    group = uniq("g")
    for _ in range(3):
        broker.send_message(topic, b"s", queue_id=1)
    dispatched(topic, 1, 3)
    resp = broker.invoke(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
    assert resp.code == ResponseCode.SUCCESS
    # offsetTable keys are MessageQueue objects (fastjson), so read the values textually
    text = resp.body.decode()
    assert sorted(int(x) for x in re.findall(r'"maxOffset"\s*:\s*(\d+)', text)) == [0, 3]
    assert broker.invoke(RequestCode.GET_TOPIC_STATS_INFO, {"topic": uniq("none")}).code == 17

    broker.invoke(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": 1, "commitOffset": 2},
    )
    resp = broker.invoke(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
    assert resp.code == ResponseCode.SUCCESS
    text = resp.body.decode()
    assert sorted(int(x) for x in re.findall(r'"brokerOffset"\s*:\s*(\d+)', text)) == [0, 3]
    assert "2" in re.findall(r'"consumerOffset"\s*:\s*(\d+)', text)
    assert '"consumeTps"' in text


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_query_topic_consume_by_who(cluster, uniq, make_topic, ser):
    """mqadmin topicList -c: the groups holding an offset on the topic; without a topic, an error."""
    topic = make_topic(uniq())
    group = uniq("g")
    with cluster.broker_client(serialize_type=ser) as c:
        resp = c.invoke(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 1},
        )
        assert resp.code == ResponseCode.SUCCESS
        resp = c.invoke(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        assert resp.code == ResponseCode.SUCCESS
        assert loads(resp.body)["groupList"] == [group]
        resp = c.invoke(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": uniq("none")})
        assert (resp.code, loads(resp.body)["groupList"]) == (ResponseCode.SUCCESS, [])
        resp = c.invoke(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark


def test_5x_heartbeat_fields_accepted(cluster, uniq, make_topic):
    """5.3.3 clients (header version 479) add heartbeatFingerprint / isWithoutSub to HeartbeatData."""
    topic = make_topic(uniq())
    group, client_id = uniq("g"), uniq("client5")
    body = loads(heartbeat_body(client_id, consumers=[{"group": group, "topics": {topic: "*"}}]))
    body["heartbeatFingerprint"] = 123456789
    body["isWithoutSub"] = False
    with cluster.broker_client(version=479) as c:
        resp = c.invoke(RequestCode.HEART_BEAT, body=dumps(body))
        assert resp.code == ResponseCode.SUCCESS
        assert loads(consumer_list(c, group).body)["consumerIdList"] == [client_id]


def test_slow_reader_does_not_stall_others(cluster):
    """A client that pipelines requests and never reads its answers must not block other clients."""
    with cluster.broker_client() as hog, cluster.broker_client() as other:
        hog.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        frame = encode_frame(hog.command(RequestCode.GET_ALL_TOPIC_CONFIG))
        hog.sock.setblocking(False)
        pending = b""
        for _ in range(20):
            try:
                for _ in range(100):
                    pending += frame
                    sent = hog.sock.send(pending)
                    pending = pending[sent:]
            except BlockingIOError:
                pass  # the server stopped reading from us: backpressure, fine
            assert other.invoke(RequestCode.GET_BROKER_RUNTIME_INFO, timeout=10).code == ResponseCode.SUCCESS


def broker_config(broker) -> dict[str, str]:
    resp = broker.invoke(RequestCode.GET_BROKER_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    lines = resp.body.decode().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def update_broker_config(broker, text: str):
    return broker.invoke(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode())


def test_update_broker_config_applies_at_once(cluster, uniq, make_topic, broker):
    """mqadmin updateBrokerConfig: maxMessageSize limits the next send; restored, it no longer does."""
    topic = make_topic(uniq(), queues=1)
    before = broker_config(broker)["maxMessageSize"]
    try:
        assert update_broker_config(broker, "maxMessageSize=1024\n").code == ResponseCode.SUCCESS
        assert broker_config(broker)["maxMessageSize"] == "1024"
        assert broker.send_message(topic, bytes(2000)).code == ResponseCode.MESSAGE_ILLEGAL
    finally:
        assert update_broker_config(broker, f"maxMessageSize={before}\n").code == ResponseCode.SUCCESS
    assert broker.send_message(topic, bytes(2000)).code == ResponseCode.SUCCESS


def test_update_broker_config_permission_is_registered(cluster, uniq, make_topic, broker):
    """A new brokerPermission goes to the name server at once: routes say read-only (4)."""
    topic = make_topic(uniq(), queues=1)

    def perm() -> int:
        with cluster.namesrv_client() as ns:
            route = loads(ns.route(topic).body)
        return next(q["perm"] for q in route["queueDatas"] if q["brokerName"] == cluster.broker_name)

    try:
        assert update_broker_config(broker, "brokerPermission=4").code == ResponseCode.SUCCESS
        assert wait_until(lambda: perm() == 4, timeout=15), perm()
    finally:
        assert update_broker_config(broker, "brokerPermission=6").code == ResponseCode.SUCCESS
    assert wait_until(lambda: perm() == 6, timeout=15), perm()


def test_update_broker_config_black_list(cluster, broker):
    resp = update_broker_config(broker, "brokerConfigPath=/tmp/elsewhere")
    assert resp.code == ResponseCode.NO_PERMISSION
    assert "black list" in resp.remark
    assert "brokerConfigPath=/tmp/elsewhere" not in resp.remark


@pytest.mark.rmqgate_only
def test_update_broker_config_is_all_or_nothing(cluster, broker):
    """A value that does not convert refuses the update, naming it (Java skips it silently)."""
    before = broker_config(broker)
    resp = update_broker_config(broker, "defaultTopicQueueNums=3\nmaxMessageSize=lots\n")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "maxMessageSize" in resp.remark
    after = broker_config(broker)
    assert (after["defaultTopicQueueNums"], after["maxMessageSize"]) == (
        before["defaultTopicQueueNums"],
        before["maxMessageSize"],
    )
