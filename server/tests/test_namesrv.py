"""Name server over real sockets: registration (Java brokers' frames from the corpus), routes, KV."""

from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path

from rmqgate.server.config import NamesrvConfig
from rmqgate.server.namesrv import decode_register_body, encode_register_body
from rmqgate.server.testing import LocalNamesrv, async_test, pcap_requests, wait_for
from rmqgate.wire import RemotingCommand, ResponseCode, SerializeType
from rmqgate.wire.codes import RequestCode as R

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def register_cmd(
    topics: dict[str, dict],
    *,
    name: str = "broker-a",
    addr: str = "127.0.0.1:10911",
    broker_id: int = 0,
    counter: int = 1,
    compressed: bool = False,
    crc: bool = True,
    version: int = 409,
) -> RemotingCommand:
    body = encode_register_body(
        topics, {"counter": counter, "timestamp": 1700000000000}, compressed=compressed
    )
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": str(broker_id),
        "compressed": "true" if compressed else "false",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF if crc else 0),
    }
    return RemotingCommand.request(R.REGISTER_BROKER, ext, body, version=version)


def tc(name: str, queues: int = 4, perm: int = 6) -> dict:
    return {
        "order": False,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def unregister_cmd(
    name: str = "broker-a", addr: str = "127.0.0.1:10911", broker_id: int = 0
) -> RemotingCommand:
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "brokerId": str(broker_id),
    }
    return RemotingCommand.request(R.UNREGISTER_BROKER, ext)


def route_cmd(topic: str, version: int = 409, **ext: str) -> RemotingCommand:
    return RemotingCommand.request(R.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, **ext}, version=version)


@async_test
async def test_register_and_route_both_json_styles() -> None:
    async with LocalNamesrv() as ns:
        c = await ns.client()
        resp = await c.invoke(register_cmd({"T1": tc("T1"), "TBW102": tc("TBW102", 8, 7)}))
        assert resp.code == 0, resp.remark
        resp = await c.invoke(route_cmd("T1"))
        assert resp.code == 0
        assert resp.body == (
            b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
            b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
            b'"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
        )
        legacy = await c.invoke(route_cmd("T1", version=333))
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in legacy.body
        std = await c.invoke(route_cmd("T1", version=121, acceptStandardJsonOnly="true"))
        assert b'{"0":"127.0.0.1:10911"}' in std.body
        binary = await c.invoke(
            RemotingCommand.request(
                R.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, serialize_type=SerializeType.ROCKETMQ
            )
        )
        assert (
            binary.serialize_type == SerializeType.ROCKETMQ
            and json.loads(binary.body)["queueDatas"][0]["perm"] == 7
        )
        missing = await c.invoke(route_cmd("nope"))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert missing.remark.startswith("No topic route info in name server for the topic: nope")
        await c.aclose()


@async_test
async def test_java_broker_registrations_from_corpus() -> None:
    frames = [cmd for p in sorted(CORPUS.glob("pcap*/*.pcap")) for cmd in pcap_requests(p, R.REGISTER_BROKER)]
    assert len(frames) >= 20
    async with LocalNamesrv() as ns:
        c = await ns.client()
        for cmd in frames:
            resp = await c.invoke(cmd)
            assert resp.code == 0, resp.remark
            wrapper, _ = decode_register_body(cmd.body, False)
            for topic in wrapper["topicConfigTable"]:
                route = await c.invoke(route_cmd(topic))
                assert route.code == 0, topic
                names = [qd["brokerName"] for qd in json.loads(route.body)["queueDatas"]]
                assert cmd.ext_fields["brokerName"] in names
        info = await c.invoke(RemotingCommand.request(R.GET_BROKER_CLUSTER_INFO))
        assert b'"brokerAddrs":{0:"127.0.0.1:10911"}' in info.body
        # tampered body: CRC check
        bad = frames[0]
        bad.body = bad.body[:-2] + b" }"
        resp = await c.invoke(bad)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "crc32 not match"
        await c.aclose()


@async_test
async def test_compressed_register_body_and_data_version() -> None:
    async with LocalNamesrv() as ns:
        c = await ns.client()
        resp = await c.invoke(register_cmd({"Z": tc("Z", 3)}, compressed=True, counter=5))
        assert resp.code == 0, resp.remark
        route = json.loads((await c.invoke(route_cmd("Z"))).body)
        assert route["queueDatas"][0]["readQueueNums"] == 3
        dv_req = RemotingCommand.request(
            R.QUERY_DATA_VERSION,
            {
                "brokerName": "broker-a",
                "brokerAddr": "127.0.0.1:10911",
                "clusterName": "DefaultCluster",
                "brokerId": "0",
            },
            b'{"counter":5,"timestamp":1700000000000}',
        )
        resp = await c.invoke(dv_req)
        assert resp.ext_fields["changed"] == "false" and json.loads(resp.body)["counter"] == 5
        dv_req.body = b'{"counter":6,"timestamp":1700000000000}'
        resp = await c.invoke(dv_req)
        assert resp.ext_fields["changed"] == "true"
        dv_req.body = b'{"counter":"5","timestamp":"1700000000000"}'  # read as fastjson reads a long
        assert (await c.invoke(dv_req)).ext_fields["changed"] == "false"
        dv_req.body = b'{"counter":{},"timestamp":1}'
        resp = await c.invoke(dv_req)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "counter" in resp.remark
        garbage = register_cmd({}, compressed=True)
        garbage.body = b"\x78\x9c not deflate"
        garbage.ext_fields["bodyCrc32"] = "0"
        resp = await c.invoke(garbage)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "RegisterBrokerBody" in resp.remark
        await c.aclose()


@async_test
async def test_unregister_expiry_and_channel_close() -> None:
    async with LocalNamesrv(broker_expire_after=0.5, scan_interval=0.1) as ns:
        c = await ns.client()
        await c.invoke(register_cmd({"A": tc("A")}))
        await c.invoke(register_cmd({"B": tc("B")}, name="broker-b", addr="127.0.0.1:20911"))
        assert (await c.invoke(route_cmd("A"))).code == 0
        unreg = unregister_cmd()
        assert (await c.invoke(unreg)).code == 0
        assert (await c.invoke(route_cmd("A"))).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await c.invoke(route_cmd("B"))).code == 0
        await wait_for(lambda: c.closed, 10)  # no re-registration: broker-b expires, its connection closed
        c2 = await ns.client()
        assert (await c2.invoke(route_cmd("B"))).code == ResponseCode.TOPIC_NOT_EXIST
        # a broker whose connection closes is dropped at once
        c3 = await ns.client()
        await c3.invoke(register_cmd({"C": tc("C")}, name="broker-c", addr="127.0.0.1:30911"))
        assert (await c2.invoke(route_cmd("C"))).code == 0
        await c3.aclose()
        await asyncio.sleep(0.1)
        assert (await c2.invoke(route_cmd("C"))).code == ResponseCode.TOPIC_NOT_EXIST
        await c2.aclose()


@async_test
async def test_kv_config_and_topic_lists(tmp_path: Path) -> None:
    path = str(tmp_path / "kvConfig.json")
    async with LocalNamesrv(config=NamesrvConfig(kvConfigPath=path)) as ns:
        c = await ns.client()
        put = RemotingCommand.request(
            R.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}
        )
        assert (await c.invoke(put)).code == 0
        get = RemotingCommand.request(R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
        assert (await c.invoke(get)).ext_fields["value"] == "broker-a:4"
        lst = await c.invoke(
            RemotingCommand.request(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
        )
        assert json.loads(lst.body) == {"table": {"T": "broker-a:4"}}
        resp = await c.invoke(register_cmd({"T": tc("T"), "U": tc("U", perm=7)}))
        assert json.loads(resp.body) == {"table": {"T": "broker-a:4"}}  # order topic conf travels back
        topics = await c.invoke(RemotingCommand.request(R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert sorted(json.loads(topics.body)["topicList"]) == ["T", "U"]
        by_cluster = await c.invoke(
            RemotingCommand.request(R.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
        )
        assert sorted(json.loads(by_cluster.body)["topicList"]) == ["T", "U"]
        wipe = await c.invoke(
            RemotingCommand.request(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        )
        assert wipe.ext_fields == {"wipeTopicCount": "2"}
        assert json.loads((await c.invoke(route_cmd("T"))).body)["queueDatas"][0]["perm"] == 4
        await c.invoke(RemotingCommand.request(R.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
        assert json.loads((await c.invoke(route_cmd("T"))).body)["queueDatas"][0]["perm"] == 6
        # exactly READ|WRITE after adding, whatever it was (Java's operateWritePermOfBroker): 7 -> 5 -> 6
        assert json.loads((await c.invoke(route_cmd("U"))).body)["queueDatas"][0]["perm"] == 6
        assert (await c.invoke(RemotingCommand.request(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "U"}))).code == 0
        assert (await c.invoke(route_cmd("U"))).code == ResponseCode.TOPIC_NOT_EXIST
        dele = RemotingCommand.request(R.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"})
        assert (await c.invoke(dele)).code == 0
        assert (await c.invoke(get)).code == ResponseCode.QUERY_NOT_FOUND
        # the namespace stays, empty (KVConfigManager.deleteKVConfig): brokers must learn that T is
        # no longer an order topic, which a missing table would not tell them
        lst = await c.invoke(
            RemotingCommand.request(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
        )
        assert lst.code == 0 and json.loads(lst.body) == {"table": {}}
        assert json.loads((await c.invoke(register_cmd({"T": tc("T")}))).body) == {"table": {}}
        never = await c.invoke(RemotingCommand.request(R.GET_KVLIST_BY_NAMESPACE, {"namespace": "NONE"}))
        assert never.code == ResponseCode.QUERY_NOT_FOUND
        missing = await c.invoke(
            RemotingCommand.request(R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG"})
        )
        assert missing.code == ResponseCode.SYSTEM_ERROR and "'key' is missing" in missing.remark
        unknown = await c.invoke(RemotingCommand.request(R.PULL_MESSAGE))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        await c.aclose()
    assert json.loads(Path(path).read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {}}}


@async_test
async def test_system_topic_list_names_each_cluster_and_broker_once() -> None:
    """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster and broker names (a Set in Java's TopicList, so a broker
    named like its cluster is listed once) and one broker address."""
    async with LocalNamesrv() as ns:
        c = await ns.client()
        assert (await c.invoke(register_cmd({"T": tc("T")}))).code == 0
        same = register_cmd({"T": tc("T")}, name="DefaultCluster", addr="127.0.0.1:10921")
        assert (await c.invoke(same)).code == 0
        resp = await c.invoke(RemotingCommand.request(R.GET_SYSTEM_TOPIC_LIST_FROM_NS))
        body = json.loads(resp.body)
        assert resp.code == 0 and sorted(body["topicList"]) == ["DefaultCluster", "broker-a"]
        assert body["brokerAddr"] in ("127.0.0.1:10911", "127.0.0.1:10921")
        await c.aclose()


def test_compressed_body_roundtrip() -> None:
    topics = {"A": tc("A", 2), "B": tc("B", 8, 7)}
    body = encode_register_body(topics, {"counter": 3, "timestamp": 9}, ["fs:1"], compressed=True)
    wrapper, filters = decode_register_body(body, True)
    assert wrapper["dataVersion"] == {"counter": 3, "timestamp": 9} and filters == ["fs:1"]
    assert (
        wrapper["topicConfigTable"]["B"]["perm"] == 7
        and wrapper["topicConfigTable"]["A"]["readQueueNums"] == 2
    )


@async_test
async def test_slave_registration_answers_its_master() -> None:
    """RouteInfoManager.registerBroker: a slave's answer names the live master of its broker name
    (haServerAddr as the master registered it, masterAddr its remoting address), a master's names
    nothing; routes list the slave under its brokerId, and keep it when the master leaves."""
    async with LocalNamesrv() as ns:
        c = await ns.client()
        slave = register_cmd({"T1": tc("T1")}, addr="127.0.0.1:10921", broker_id=1)
        slave.ext_fields["haServerAddr"] = "127.0.0.1:10922"
        alone = await c.invoke(slave)
        assert alone.code == 0 and alone.ext_fields == {}  # no master yet
        assert (
            await c.invoke(route_cmd("T1"))
        ).code == ResponseCode.TOPIC_NOT_EXIST  # a slave's topics are not routed
        master = register_cmd({"T1": tc("T1")})
        master.ext_fields["haServerAddr"] = "127.0.0.1:10999"
        answer = await c.invoke(master)
        assert answer.code == 0 and answer.ext_fields == {}
        answer = await c.invoke(register_cmd({"T1": tc("T1")}, addr="127.0.0.1:10921", broker_id=1))
        assert answer.ext_fields == {"haServerAddr": "127.0.0.1:10999", "masterAddr": "127.0.0.1:10911"}
        route = json.loads((await c.invoke(route_cmd("T1"))).body)
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}
        unreg = unregister_cmd()
        assert (await c.invoke(unreg)).code == 0
        route = json.loads((await c.invoke(route_cmd("T1"))).body)
        assert route["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:10921"}
        assert route["queueDatas"][0]["brokerName"] == "broker-a"
        answer = await c.invoke(register_cmd({"T1": tc("T1")}, addr="127.0.0.1:10921", broker_id=1))
        assert answer.code == 0 and answer.ext_fields == {}
        await c.aclose()
