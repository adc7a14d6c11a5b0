"""Name server over the raw wire: routes, cluster info, topic lists, KV config, broker registration."""

from __future__ import annotations

import json
import re
import secrets
import zlib

import pytest

from rmqgate.compat_tests.wire_client import (
    WireClient,
    dumps,
    loads,
    register_broker_body,
    topic_config,
    wait_until,
)
from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType

SERIALIZATIONS = [
    pytest.param(SerializeType.JSON, id="json"),
    pytest.param(SerializeType.ROCKETMQ, id="rocketmq"),
]


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_route_unknown_topic_is_topic_not_exist(cluster, uniq, ser):
    with cluster.namesrv_client(serialize_type=ser) as ns:
        resp = ns.route(uniq("missing"))
    assert resp.is_response
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.serialize_type == ser


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_route_of_created_topic(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq(), queues=3)
    with cluster.namesrv_client(serialize_type=ser) as ns:
        cmd = ns.command(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=424242)
        ns.send_command(cmd)
        resp = ns.wait(424242)
    assert resp.code == ResponseCode.SUCCESS
    assert resp.opaque == 424242 and resp.is_response
    assert resp.serialize_type == ser
    route = loads(resp.body)
    queues = [q for q in route["queueDatas"] if q["brokerName"] == cluster.broker_name]
    assert len(queues) == 1
    assert queues[0]["readQueueNums"] == 3 and queues[0]["writeQueueNums"] == 3
    assert queues[0]["perm"] == 6
    brokers = {b["brokerName"]: b for b in route["brokerDatas"]}
    assert brokers[cluster.broker_name]["brokerAddrs"]["0"] == cluster.broker
    assert brokers[cluster.broker_name]["cluster"] == cluster.cluster_name


@pytest.mark.parametrize(
    ("version", "accept_standard", "quoted"),
    [
        pytest.param(409, None, True, id="java-4.9.8-quoted"),
        pytest.param(401, None, True, id="java-4.9.4-quoted"),
        pytest.param(333, None, False, id="cpp-legacy"),
        pytest.param(121, None, False, id="ali-ons-legacy"),
        pytest.param(317, "true", True, id="acceptStandardJsonOnly"),
    ],
)
def test_route_json_style_depends_on_version(cluster, uniq, make_topic, version, accept_standard, quoted):
    """PROTOCOL.md §6: quoted brokerAddrs keys for version >= 401 or acceptStandardJsonOnly."""
    topic = make_topic(uniq())
    with cluster.namesrv_client(version=version) as ns:
        resp = ns.invoke(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": accept_standard}
        )
    assert resp.code == ResponseCode.SUCCESS
    text = resp.body.decode()
    addrs = re.search(r'"brokerAddrs"\s*:\s*\{(.*?)\}', text)
    assert addrs, text
    if quoted:
        assert re.match(r'\s*"0"\s*:', addrs.group(1)), text
        assert loads(text) == json.loads(text)  # standard JSON
    else:
        assert re.match(r"\s*0\s*:", addrs.group(1)), text


def test_cluster_info_lists_the_broker(cluster, namesrv):
    info = namesrv.cluster_info()
    assert cluster.broker_name in info["clusterAddrTable"][cluster.cluster_name]
    bd = info["brokerAddrTable"][cluster.broker_name]
    assert bd["brokerAddrs"]["0"] == cluster.broker
    assert bd["cluster"] == cluster.cluster_name


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_all_topic_list_and_topics_by_cluster(cluster, uniq, make_topic, ser):
    topic = make_topic(uniq())
    with cluster.namesrv_client(serialize_type=ser) as ns:
        resp = ns.invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert resp.code == ResponseCode.SUCCESS
        assert topic in loads(resp.body)["topicList"]
        resp = ns.invoke(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster.cluster_name})
        assert resp.code == ResponseCode.SUCCESS
        assert topic in loads(resp.body)["topicList"]


@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_kv_config_put_get_delete(cluster, uniq, ser):
    namespace, key = uniq("ns"), "k1"
    with cluster.namesrv_client(serialize_type=ser) as ns:
        resp = ns.invoke(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        resp = ns.invoke(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": "v=1;x"})
        assert resp.code == ResponseCode.SUCCESS
        resp = ns.invoke(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields["value"] == "v=1;x"
        resp = ns.invoke(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})
        assert resp.code == ResponseCode.SUCCESS
        resp = ns.invoke(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
        assert resp.code == ResponseCode.QUERY_NOT_FOUND


def _fake_broker(uniq):
    """Identity of a made-up broker registering directly with the name server."""
    port = 20000 + secrets.randbelow(20000)
    return {
        "brokerName": uniq("fakebroker"),
        "brokerAddr": f"127.0.0.1:{port}",
        "clusterName": uniq("fakecluster"),
        "haServerAddr": f"127.0.0.1:{port + 1}",
        "brokerId": 0,
    }


def _register(ns: WireClient, ident, topics, *, compressed=False, crc=None, counter=1, **kw):
    body = register_broker_body(topics, counter=counter, compressed=compressed)
    ext = dict(ident, compressed=compressed, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc)
    return ns.invoke(RequestCode.REGISTER_BROKER, ext, body, **kw), body


@pytest.mark.parametrize("compressed", [False, True], ids=["json-body", "compressed-body"])
@pytest.mark.parametrize("ser", SERIALIZATIONS)
def test_register_query_unregister_broker(cluster, uniq, compressed, ser):
    ident = _fake_broker(uniq)
    topic = uniq("regtopic")
    with cluster.namesrv_client(serialize_type=ser) as ns:
        resp, _ = _register(ns, ident, {topic: topic_config(topic, 2)}, compressed=compressed)
        assert resp.code == ResponseCode.SUCCESS, resp
        route = ns.route(topic)
        assert route.code == ResponseCode.SUCCESS
        data = loads(route.body)
        assert [b["brokerAddrs"]["0"] for b in data["brokerDatas"]] == [ident["brokerAddr"]]
        assert data["queueDatas"][0]["readQueueNums"] == 2
        info = ns.cluster_info()
        assert info["clusterAddrTable"][ident["clusterName"]] == [ident["brokerName"]]

        resp = ns.invoke(
            RequestCode.UNREGISTER_BROKER,
            {k: ident[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")},
        )
        assert resp.code == ResponseCode.SUCCESS
        assert ns.route(topic).code == ResponseCode.TOPIC_NOT_EXIST


def test_query_data_version(cluster, uniq, namesrv):
    ident = _fake_broker(uniq)
    topic = uniq("dv")
    resp, body = _register(namesrv, ident, {topic: topic_config(topic)}, counter=7)
    assert resp.code == ResponseCode.SUCCESS
    registered = loads(body)["topicConfigSerializeWrapper"]["dataVersion"]
    keys = {k: ident[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}
    same = namesrv.invoke(RequestCode.QUERY_DATA_VERSION, keys, dumps(registered))
    assert same.code == ResponseCode.SUCCESS
    assert same.ext_fields["changed"] == "false"
    assert loads(same.body)["counter"] == 7
    newer = namesrv.invoke(RequestCode.QUERY_DATA_VERSION, keys, dumps(dict(registered, counter=8)))
    assert newer.code == ResponseCode.SUCCESS
    assert newer.ext_fields["changed"] == "true"
    namesrv.invoke(RequestCode.UNREGISTER_BROKER, keys)


def test_register_broker_crc_mismatch_is_rejected(cluster, uniq, namesrv):
    ident = _fake_broker(uniq)
    topic = uniq("crc")
    resp, _ = _register(namesrv, ident, {topic: topic_config(topic)}, crc=12345)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "crc" in (resp.remark or "").lower()
    assert namesrv.route(topic).code == ResponseCode.TOPIC_NOT_EXIST


def test_broker_removed_when_its_channel_closes(cluster, uniq):
    ident = _fake_broker(uniq)
    topic = uniq("chan")
    with cluster.namesrv_client() as reg:
        resp, _ = _register(reg, ident, {topic: topic_config(topic)})
        assert resp.code == ResponseCode.SUCCESS
        with cluster.namesrv_client() as ns:
            assert ns.route(topic).code == ResponseCode.SUCCESS
    with cluster.namesrv_client() as ns:
        gone = wait_until(lambda: ns.route(topic).code == ResponseCode.TOPIC_NOT_EXIST, timeout=10)
    assert gone, "route still served after the registering broker's connection closed"


def test_route_known_as_soon_as_topic_creation_is_answered(cluster, uniq, broker, namesrv):
    """Java registers with the name server *before* answering UPDATE_AND_CREATE_TOPIC
    (registerIncrementBrokerData), so create-then-route works without polling (mqadmin updateTopic
    followed by a producer start relies on it; every corpus program does exactly this)."""
    topic = uniq()
    assert broker.create_topic(topic, 2).code == ResponseCode.SUCCESS
    resp = namesrv.route(topic)
    assert resp.code == ResponseCode.SUCCESS, "route not registered when the create was answered"
    assert loads(resp.body)["queueDatas"][0]["writeQueueNums"] == 2


def test_route_known_soon_after_auto_creating_send_is_answered(cluster, uniq, broker, namesrv):
    """createTopicInSendMessageMethod registers the new topic with registerBrokerAll(false, true, true):
    oneway, so a Java name server may learn it just after the send was answered (rmqgate's broker
    registers before answering). Either way the route follows at once, not at the next 30 s
    registration."""
    topic = uniq("auto")
    assert broker.send_message(topic, b"x").code == ResponseCode.SUCCESS
    assert wait_until(lambda: namesrv.route(topic).code == ResponseCode.SUCCESS, timeout=10, interval=0.05)


def namesrv_config(ns) -> dict[str, str]:
    resp = ns.invoke(RequestCode.GET_NAMESRV_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    return dict(line.split("=", 1) for line in resp.body.decode().splitlines() if "=" in line)


def test_namesrv_config_update_turns_order_topic_conf_on(cluster, uniq, make_topic):
    """mqadmin updateNamesrvConfig orderMessageEnable=true: routes then carry the ORDER_TOPIC_CONFIG
    KV entry of their topic (getNamesrvConfig shows the key); kvConfigPath is on the black list."""
    topic = make_topic(uniq(), queues=2)
    conf = f"{cluster.broker_name}:2"
    with cluster.namesrv_client() as ns:
        assert namesrv_config(ns)["orderMessageEnable"] == "false"
        kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": topic}
        assert ns.invoke(RequestCode.PUT_KV_CONFIG, {**kv, "value": conf}).code == ResponseCode.SUCCESS
        try:
            assert "orderTopicConf" not in loads(ns.route(topic).body)
            resp = ns.invoke(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
            assert resp.code == ResponseCode.SUCCESS
            assert namesrv_config(ns)["orderMessageEnable"] == "true"
            assert loads(ns.route(topic).body)["orderTopicConf"] == conf
        finally:
            ns.invoke(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=false\n")
            ns.invoke(RequestCode.DELETE_KV_CONFIG, kv)
        assert "orderTopicConf" not in loads(ns.route(topic).body)
        resp = ns.invoke(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/elsewhere.json\n")
        assert resp.code == ResponseCode.NO_PERMISSION
