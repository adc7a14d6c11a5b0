"""JSON bodies: real bodies from the corpus (Java, 5.x, C++, ali-ons), both route styles, compressed
RegisterBrokerBody, config files, round trips and malformed input."""

from __future__ import annotations

import struct
import tarfile
import typing
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqgate.tools.pcap import read_frames
from rmqgate.wire.bodies import (
    CONSUME_FROM_WHERE,
    CONSUME_TYPE,
    MESSAGE_MODEL,
    BrokerData,
    ClusterInfo,
    Connection,
    ConsumerConnection,
    ConsumerData,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    DataVersion,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    JsonBody,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    UnlockBatchRequestBody,
    json_body,
)
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.errors import BodyError
from rmqgate.wire.fastjson import loads
from rmqgate.wire.header import JavaNumber

# --- corpus --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bodies(corpus: Path) -> dict[tuple[str, int], list[tuple[str, int, bytes]]]:
    """("req"|"resp", request code) -> [(capture, request version, body)] for every JSON body seen."""
    out: dict[tuple[str, int], list[tuple[str, int, bytes]]] = {}
    for path in sorted(corpus.glob("pcap*/*.pcap")):
        pending = {}
        for frame in read_frames(path):
            cmd = frame.command
            if cmd is None:
                continue
            if not cmd.is_response:
                pending[(frame.conn_id, cmd.opaque)] = cmd
                if cmd.body:
                    out.setdefault(("req", cmd.code), []).append((path.name, cmd.version, bytes(cmd.body)))
                continue
            request = pending.pop((frame.conn_id, cmd.opaque), None)
            if request is not None and cmd.body and cmd.code == ResponseCode.SUCCESS:
                out.setdefault(("resp", request.code), []).append(
                    (path.name, request.version, bytes(cmd.body))
                )
    return out


def test_heartbeats_from_every_client_decode_and_normalise(bodies: dict[Any, Any]) -> None:
    beats = bodies[("req", RequestCode.HEART_BEAT)]
    by_client: dict[str, list[HeartbeatData]] = {}
    for name, _, body in beats:
        by_client.setdefault(name.split("-")[0].split("_")[0], []).append(HeartbeatData.from_json(body))
        beat = by_client[name.split("-")[0].split("_")[0]][-1]
        assert beat.client_id
        for consumer in beat.consumer_data_set:
            assert consumer.consume_type in CONSUME_TYPE
            assert consumer.message_model in MESSAGE_MODEL
            assert consumer.consume_from_where in CONSUME_FROM_WHERE
            assert all(type(s.sub_version) is int and s.topic for s in consumer.subscription_data_set)
    # C++ cores send enum ordinals and subVersion as a string: 1 = CONSUME_PASSIVELY / CLUSTERING.
    cpp = [c for b in by_client["cpp210"] + by_client["rocketmq"] for c in b.consumer_data_set]
    assert cpp and {(c.consume_type, c.message_model, c.consume_from_where) for c in cpp} == {
        ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    }
    assert all(
        s.expression_type == "TAG" and s.sub_string == "*" for c in cpp for s in c.subscription_data_set
    )
    # Java and ali-ons send names.
    java = [c for b in by_client["d"] for c in b.consumer_data_set]
    assert java and java[0].consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    assert [c for b in by_client["ali"] for c in b.consumer_data_set]
    # 5.x fields.
    five = [HeartbeatData.from_json(b) for n, _, b in beats if "client5" in n]
    assert five and all(b.heartbeat_fingerprint == 0 and b.without_sub is False for b in five)


def test_java_heartbeats_re_encode_byte_for_byte(bodies: dict[Any, Any]) -> None:
    java = [(n, b) for n, v, b in bodies[("req", RequestCode.HEART_BEAT)] if v >= 409]
    assert java
    for name, body in java:
        assert HeartbeatData.from_json(body).to_json() == body, name


def test_cpp_heartbeat_written_back_with_names() -> None:
    body = (
        b'{"clientID":"127.0.0.1@1#DEFAULT","consumerDataSet":[{"consumeFromWhere":5,"consumeType":0,'
        b'"groupName":"G","messageModel":0,"subscriptionDataSet":[{"subString":"a || b","subVersion":"17",'
        b'"topic":"T"}]}],"producerDataSet":[]}\n'
    )
    beat = HeartbeatData.from_json(body)
    assert beat.consumer_data_set[0] == ConsumerData(
        group_name="G",
        consume_type="CONSUME_ACTIVELY",
        message_model="BROADCASTING",
        consume_from_where="CONSUME_FROM_TIMESTAMP",
        subscription_data_set=[SubscriptionData(topic="T", sub_string="a || b", sub_version=17)],
    )
    assert b'"consumeType":"CONSUME_ACTIVELY"' in beat.to_json()
    assert b'"expressionType":"TAG"' in beat.to_json()
    assert HeartbeatData.from_json(b'{"clientID":"x","isWithoutSub":true}').without_sub is True


def test_route_data_from_the_name_server_re_encodes_in_both_styles(bodies: dict[Any, Any]) -> None:
    routes = [(n, v, b) for n, v, b in bodies[("resp", RequestCode.GET_ROUTEINFO_BY_TOPIC)]]
    styles = set()
    for name, version, body in routes:
        route = TopicRouteData.from_json(body)
        quoted = b'"brokerAddrs":{"' in body
        styles.add(quoted)
        assert quoted == (version >= 401), (name, version)  # the name server's version gate (§6)
        assert route.to_json(quoted_keys=quoted) == body, name
        assert route.broker_datas[0].broker_addrs[0].startswith("127.0.0.1:")
    assert styles == {True, False}


def test_route_data_styles_by_hand() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("broker-a", 4, 4, 6, 0)],
        broker_datas=[BrokerData("C", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})],
        filter_server_table={},
    )
    legacy = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    assert route.to_json(quoted_keys=False) == legacy
    assert route.to_json(quoted_keys=True) == legacy.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')
    assert (
        TopicRouteData.from_json(legacy) == route == TopicRouteData.from_json(route.to_json(quoted_keys=True))
    )
    old = legacy.replace(b"topicSysFlag", b"topicSynFlag").replace(b'"topicSynFlag":0', b'"topicSynFlag":3')
    assert TopicRouteData.from_json(old).queue_datas[0].topic_sys_flag == 3
    five = TopicRouteData.from_json(
        b'{"brokerDatas":[{"brokerAddrs":{"0":"a:1"},"brokerName":"b","cluster":"c","enableActingMaster":false,'
        b'"zoneName":"z"}],"queueDatas":[],"topicQueueMappingByBroker":{"b":{"bname":"b"}},"newField":1}'
    )
    assert five.broker_datas[0].zone_name == "z" and five.topic_queue_mapping_by_broker == {
        "b": {"bname": "b"}
    }
    assert b'"zoneName":"z"' in five.to_json()


def test_lock_bodies_re_encode(bodies: dict[Any, Any]) -> None:
    for key, cls in (
        (("req", RequestCode.LOCK_BATCH_MQ), LockBatchRequestBody),
        (("req", RequestCode.UNLOCK_BATCH_MQ), UnlockBatchRequestBody),
        (("resp", RequestCode.LOCK_BATCH_MQ), LockBatchResponseBody),
        (("resp", RequestCode.GET_CONSUMER_LIST_BY_GROUP), GetConsumerListByGroupResponseBody),
    ):
        assert bodies[key], key
        for name, _, body in bodies[key]:
            assert cls.from_json(body).to_json() == body.rstrip(b"\n"), name
    five = [
        LockBatchRequestBody.from_json(b)
        for n, _, b in bodies[("req", RequestCode.LOCK_BATCH_MQ)]
        if "client5" in n
    ]
    assert five and all(b.only_this_broker is False and b.mq_set for b in five)
    assert isinstance(five[0].mq_set[0], MessageQueue)


def test_cluster_info_keeps_legacy_keys(bodies: dict[Any, Any]) -> None:
    for name, _, body in bodies[("resp", RequestCode.GET_BROKER_CLUSTER_INFO)]:
        info = ClusterInfo.from_json(body)
        assert info.broker_addr_table["broker-a"].broker_addrs == {0: "127.0.0.1:10911"}
        assert info.to_json() == body, name


# --- RegisterBrokerBody --------------------------------------------------------------------------


def test_register_broker_bodies_from_the_corpus(bodies: dict[Any, Any]) -> None:
    registers = bodies[("req", RequestCode.REGISTER_BROKER)]
    assert registers
    for name, _, body in registers:
        reg = RegisterBrokerBody.decode(body, compressed=False)
        assert loads(reg.to_json()) == loads(body), name  # the Java broker's map order is a HashMap's
        table = reg.topic_config_serialize_wrapper.topic_config_table
        assert table and all(name == config.topic_name for name, config in table.items())
        again = RegisterBrokerBody.decode(reg.encode(compressed=True), compressed=True)
        assert (
            again.topic_config_serialize_wrapper.data_version
            == reg.topic_config_serialize_wrapper.data_version
        )
        assert {
            n: (c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_filter_type) for n, c in table.items()
        } == {
            n: (c.read_queue_nums, c.write_queue_nums, c.perm, c.topic_filter_type)
            for n, c in again.topic_config_serialize_wrapper.topic_config_table.items()
        }


def _java_string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">i", len(data)) + data


def _hand_built(lines: list[str], tail: bytes = b"") -> bytes:
    """RegisterBrokerBody.encode(true) as 4.9.8 writes it, built without the codec under test."""
    raw = _java_string('{"counter":7,"timestamp":1795312001858}') + struct.pack(">i", len(lines))
    raw += b"".join(_java_string(line) for line in lines) + _java_string('["10.0.0.9:7000"]') + tail
    return zlib.compress(raw, 9)


def test_compressed_register_body_built_by_hand() -> None:
    data = _hand_built(["TopicA 8 4 6 SINGLE_TAG", "%RETRY%G 1 1 6 MULTI_TAG"])
    assert data[:2] == b"\x78\xda"  # Deflater(BEST_COMPRESSION) zlib header
    reg = RegisterBrokerBody.decode(data, compressed=True)
    wrapper = reg.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(timestamp=1795312001858, counter=7)
    assert wrapper.topic_config_table == {
        "TopicA": TopicConfig("TopicA", 8, 4, 6, "SINGLE_TAG"),
        "%RETRY%G": TopicConfig("%RETRY%G", 1, 1, 6, "MULTI_TAG"),
    }
    assert reg.filter_server_list == ["10.0.0.9:7000"]
    assert reg.to_compressed() == data  # same bytes in, same bytes out
    # 5.x: attributes as a sixth field and static-topic mapping sections after the filter list.
    five = RegisterBrokerBody.from_compressed(
        _hand_built(['T 1 1 6 SINGLE_TAG {"+delete.policy":"COMPACTION"}'], struct.pack(">i", 0))
    )
    assert five.topic_config_serialize_wrapper.topic_config_table["T"].attributes == {
        "+delete.policy": "COMPACTION"
    }


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"not zlib at all", "not a zlib stream"),
        (zlib.compress(b"\x00\x00\x00\x05{}"), "does not parse"),
        (zlib.compress(_java_string("{}") + struct.pack(">i", -1)), "does not parse"),
        (
            zlib.compress(_java_string("{}") + struct.pack(">i", 1) + _java_string("T 1 1 6 SINGLE_TAG")),
            "filter_server",
        ),
        (_hand_built(["T 1 x 6 SINGLE_TAG"]), "topicConfigs[0].writeQueueNums"),
        (_hand_built(["T 1 1 99999999999 SINGLE_TAG"]), "topicConfigs[0].perm: 99999999999 is out of range"),
        (_hand_built(["T 1 1 6"]), "topicConfigs"),
        (_hand_built(["T 1 1 6 NO_SUCH"]), "filterType"),
        (zlib.compress(_java_string("[1]") + struct.pack(">i", 0) + _java_string("[]")), "dataVersion"),
    ],
)
def test_malformed_compressed_register_body(data: bytes, what: str) -> None:
    with pytest.raises(BodyError) as info:
        RegisterBrokerBody.from_compressed(data)
    assert what in str(info.value)


# --- config files (store) ------------------------------------------------------------------------


def test_store_config_files(corpus: Path, tmp_path: Path) -> None:
    with tarfile.open(corpus / "java-4.9.8-store-clean.tgz") as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".json") and "/config/" in m.name]
        tar.extractall(tmp_path, members=members, filter="data")
    (config,) = {p.parent for p in tmp_path.glob("*/config/topics.json")}
    for file, cls in (
        ("topics.json", TopicConfigSerializeWrapper),
        ("subscriptionGroup.json", SubscriptionGroupWrapper),
        ("consumerOffset.json", ConsumerOffsetSerializeWrapper),
    ):
        raw = (config / file).read_bytes()
        body = cls.from_json(raw)
        assert body.to_json(pretty=True, sort_keys=False) == raw, file
        assert cls.from_json(body.to_json()) == body
    offsets = ConsumerOffsetSerializeWrapper.from_json((config / "consumerOffset.json").read_bytes())
    assert all(isinstance(q, int) for table in offsets.offset_table.values() for q in table)
    topics = TopicConfigSerializeWrapper.from_json((config / "topics.json").read_bytes())
    assert topics.topic_config_table["SCHEDULE_TOPIC_XXXX"].read_queue_nums == 18


# --- hand-made shapes ----------------------------------------------------------------------------


def test_object_keyed_tables() -> None:
    stats = TopicStatsTable({MessageQueue("t", "b", 0): TopicOffset(1, 5, 7)})
    assert stats.to_json() == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:'
        b'{"lastUpdateTimestamp":7,"maxOffset":5,"minOffset":1}}}'
    )
    assert TopicStatsTable.from_json(stats.to_json()) == stats
    assert TopicStatsTable.from_json(stats.to_json(quoted_keys=True)) == stats
    consume = ConsumeStats({MessageQueue("t", "b", 1): OffsetWrapper(9, 8, 7)}, 0.0)
    assert consume.to_json().endswith(b',"consumeTps":0.0}') is False  # keys sorted: consumeTps first
    assert consume.to_json().startswith(b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":1')
    assert ConsumeStats.from_json(consume.to_json()) == consume


def test_connections_and_tables() -> None:
    conn = ConsumerConnection(
        connection_set=[Connection("c1", "127.0.0.1:5000", "JAVA", 409)],
        subscription_table={"T": SubscriptionData(topic="T", sub_string="*", sub_version=1)},
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
    )
    assert ConsumerConnection.from_json(conn.to_json()) == conn
    cpp = ProducerConnection.from_json(b'{"connectionSet":[{"clientId":"c","language":1,"version":333}]}')
    assert cpp.connection_set[0].language == "CPP"
    assert KVTable.from_json(b'{"table":{"k":"v"}}').table == {"k": "v"}
    assert TopicList.from_json(b'{"topicList":["a","b"]}').topic_list == ["a", "b"]
    group = SubscriptionGroupConfig.from_json(b'{"groupName":"g"}')
    assert (group.retry_max_times, group.retry_queue_nums, group.which_broker_when_consume_slowly) == (
        16,
        1,
        1,
    )
    assert group.to_json() == (
        b'{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,'
        b'"groupName":"g","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
        b'"whichBrokerWhenConsumeSlowly":1}'
    )


@pytest.mark.parametrize(
    ("cls", "body", "where"),
    [
        (
            HeartbeatData,
            b'{"consumerDataSet":[{"consumeType":7}]}',
            "HeartbeatData.consumerDataSet[0].consumeType",
        ),
        (HeartbeatData, b'{"consumerDataSet":[{"messageModel":"PUSH"}]}', "consumerDataSet[0].messageModel"),
        (HeartbeatData, b'{"producerDataSet":{"groupName":"x"}}', "HeartbeatData.producerDataSet"),
        (TopicRouteData, b'{"queueDatas":"x"}', "TopicRouteData.queueDatas"),
        (TopicRouteData, b'{"brokerDatas":[{"brokerAddrs":{"m":"a"}}]}', "brokerDatas[0].brokerAddrs"),
        (TopicRouteData, b'{"queueDatas":[{"perm":"rw"}]}', "queueDatas[0].perm"),
        (TopicRouteData, b"[]", "TopicRouteData"),
        (LockBatchRequestBody, b'{"mqSet":[{"queueId":true,"topic":[]}]}', "mqSet[0].topic"),
        (TopicStatsTable, b'{"offsetTable":{"x":{}}}', "offsetTable"),
        (ConsumerOffsetSerializeWrapper, b'{"offsetTable":{"t@g":{0:"x"}}}', "offsetTable"),
        (SubscriptionGroupConfig, b'{"consumeEnable":"maybe"}', "consumeEnable"),
        (TopicConfig, b'{"perm":"' + b"7" * 5000 + b'"}', "TopicConfig.perm"),
        (HeartbeatData, None, "HeartbeatData: missing JSON body"),  # a request without its body
        (DataVersion, b'{"counter":', "DataVersion: "),  # not JSON: named too
        (LockBatchRequestBody, b"\xff{}", "LockBatchRequestBody: JSON body is not valid UTF-8"),
        # past the Java type's range: fastjson's parseInt / parseLong errors, not a wrapped value
        (
            MessageQueue,
            b'{"queueId":2147483648}',
            "MessageQueue.queueId: 2147483648 is out of range of a Java Integer",
        ),
        (
            MessageQueue,
            b'{"queueId":"-2147483649"}',
            "queueId: -2147483649 is out of range of a Java Integer",
        ),
        (
            SubscriptionGroupConfig,
            b'{"retryMaxTimes":4294967296.0}',
            "retryMaxTimes: 4294967296 is out of range",
        ),
        (
            DataVersion,
            b'{"counter":9223372036854775808}',
            "counter: 9223372036854775808 is out of range of a Java Long",
        ),
        (
            ConsumerOffsetSerializeWrapper,
            b'{"offsetTable":{"t@g":{4294967296:1}}}',
            "offsetTable['t@g']['4294967296']: 4294967296 is out of range",
        ),
        (ConsumerOffsetSerializeWrapper, b'{"offsetTable":{"t@g":{0:-9223372036854775809}}}', "Java Long"),
        (TopicRouteData, b'{"brokerDatas":[{"brokerAddrs":{"9223372036854775808":"a"}}]}', "brokerAddrs"),
        (SubscriptionData, b'{"codeSet":[1,2147483648]}', "SubscriptionData.codeSet[1]"),
    ],
)
def test_malformed_bodies_name_the_field(cls: type[JsonBody], body: bytes | None, where: str) -> None:
    with pytest.raises(BodyError, match=where.replace("[", r"\[").replace("]", r"\]")):
        cls.from_json(body)


@pytest.mark.parametrize(
    ("cls", "obj"),
    [
        (MessageQueue, {"queueId": 2**31 - 1}),
        (MessageQueue, {"queueId": -(2**31)}),
        (DataVersion, {"timestamp": 2**63 - 1, "counter": -(2**63)}),
        (
            ConsumerOffsetSerializeWrapper,
            {"offsetTable": {"t@g": {2**31 - 1: 2**63 - 1, -(2**31): -(2**63)}}},
        ),
        (SubscriptionData, {"codeSet": [2**31 - 1, -(2**31)], "subVersion": 2**63 - 1}),
    ],
)
def test_body_numbers_take_their_java_range(cls: type[JsonBody], obj: dict[str, Any]) -> None:
    body = cls.from_obj(obj)
    assert body.to_obj() == {**cls().to_obj(), **obj}
    assert cls.from_json(body.to_json()) == body


_BODY_NUMBER_TYPES = {
    (MessageQueue, "queue_id"): "Integer",
    (DataVersion, "counter"): "Long",
    (TopicConfig, "perm"): "Integer",
    (QueueData, "topic_sys_flag"): "Integer",
    (SubscriptionData, "sub_version"): "Long",
    (HeartbeatData, "heartbeat_fingerprint"): "Integer",
    (SubscriptionGroupConfig, "retry_max_times"): "Integer",
    (SubscriptionGroupConfig, "broker_id"): "Long",
    (SubscriptionGroupConfig, "which_broker_when_consume_slowly"): "Long",
    (SubscriptionGroupConfig, "consume_timeout_minute"): "Integer",
    (OffsetWrapper, "consumer_offset"): "Long",
    (TopicOffset, "last_update_timestamp"): "Long",
    (Connection, "version"): "Integer",
}


def _java_types(hint: Any) -> list[str]:
    """The Java number types named anywhere in a type hint, outermost first."""
    found = [m.name for m in getattr(hint, "__metadata__", ()) if isinstance(m, JavaNumber)]
    return found + [name for arg in typing.get_args(hint) for name in _java_types(arg)]


@pytest.mark.parametrize(("where", "java"), list(_BODY_NUMBER_TYPES.items()), ids=lambda v: str(v))
def test_body_number_fields_declare_the_java_type(where: tuple[type, str], java: str) -> None:
    cls, attr = where
    assert _java_types(typing.get_type_hints(cls, include_extras=True)[attr]) == [java]


def test_body_maps_and_lists_declare_their_java_types() -> None:
    hints = {
        c: typing.get_type_hints(c, include_extras=True) for c in (ConsumerOffsetSerializeWrapper, BrokerData)
    }
    assert _java_types(hints[ConsumerOffsetSerializeWrapper]["offset_table"]) == ["Integer", "Long"]
    assert _java_types(hints[BrokerData]["broker_addrs"]) == ["Long"]
    assert _java_types(typing.get_type_hints(SubscriptionData, include_extras=True)["code_set"]) == [
        "Integer"
    ]


def test_a_body_int_without_a_java_type_is_refused() -> None:
    for hint in ("int", "dict[int, str]", "list[int]"):
        with pytest.raises(TypeError, match="declare the Java type, Integer or Long"):
            json_body(type("Bare", (JsonBody,), {"__annotations__": {"n": hint}, "__module__": __name__}))


# --- properties ----------------------------------------------------------------------------------

_name = st.text(st.characters(codec="utf-8", exclude_characters=" "), min_size=1, max_size=8)
_long = st.integers(-(2**63), 2**63 - 1)
_int = st.integers(-(2**31), 2**31 - 1)
_mq = st.builds(MessageQueue, _name, _name, _int)
_sub = st.builds(
    SubscriptionData,
    st.booleans(),
    _name,
    _name,
    st.lists(_name, max_size=3),
    st.lists(_int, max_size=3),
    _long,
    st.sampled_from(["TAG", "SQL92"]),
)
_consumer = st.builds(
    ConsumerData,
    _name,
    st.sampled_from(CONSUME_TYPE),
    st.sampled_from(MESSAGE_MODEL),
    st.sampled_from(CONSUME_FROM_WHERE),
    st.lists(_sub, max_size=2),
    st.booleans(),
)
_heartbeat = st.builds(
    HeartbeatData,
    _name,
    st.lists(st.builds(ProducerData, _name), max_size=2),
    st.lists(_consumer, max_size=2),
    st.none() | _int,
    st.none() | st.booleans(),
)
_route = st.builds(
    TopicRouteData,
    st.none() | _name,
    st.lists(st.builds(QueueData, _name, _int, _int, _int, _int), max_size=3),
    st.lists(
        st.builds(BrokerData, _name, _name, st.dictionaries(_long, _name, max_size=3), st.none() | _name),
        max_size=3,
    ),
    st.dictionaries(_name, st.lists(_name, max_size=2), max_size=2),
)
_topic_config = st.builds(TopicConfig, _name, _int, _int, _int, st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]))
_register = st.builds(
    RegisterBrokerBody,
    st.builds(
        TopicConfigSerializeWrapper,
        st.lists(_topic_config, max_size=5).map(lambda cs: {c.topic_name: c for c in cs}),
        st.builds(DataVersion, _long, _long),
    ),
    st.lists(_name, max_size=3),
)
_stats = st.builds(
    ConsumeStats, st.dictionaries(_mq, st.builds(OffsetWrapper, _long, _long, _long)), st.floats(0, 1e6)
)
_locks = st.builds(LockBatchRequestBody, _name, _name, st.lists(_mq, max_size=3), st.none() | st.booleans())
_offsets = st.builds(
    ConsumerOffsetSerializeWrapper,
    st.dictionaries(_name, st.dictionaries(_int, _long, max_size=3), max_size=3),
)


@settings(max_examples=60)
@given(st.one_of(_heartbeat, _route, _register, _stats, _locks, _offsets), st.booleans(), st.booleans())
def test_round_trip(body: JsonBody, quoted: bool, pretty: bool) -> None:
    assert type(body).from_json(body.to_json(quoted_keys=quoted, pretty=pretty)) == body


@settings(max_examples=60)
@given(_register)
def test_compressed_round_trip(body: RegisterBrokerBody) -> None:
    assert RegisterBrokerBody.from_compressed(body.to_compressed()) == body


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_field_names = st.sampled_from(
    ["clientID", "consumerDataSet", "producerDataSet", "subscriptionDataSet", "queueDatas", "brokerDatas",
     "brokerAddrs", "offsetTable", "mqSet", "consumeType", "subVersion", "perm", "topicConfigTable"]
)  # fmt: skip


@settings(max_examples=150)
@given(
    st.sampled_from([HeartbeatData, TopicRouteData, RegisterBrokerBody, ConsumeStats, LockBatchRequestBody]),
    st.dictionaries(_field_names, _json, max_size=4),
)
def test_arbitrary_json_decodes_or_raises_body_error(cls: type[JsonBody], obj: dict[str, Any]) -> None:
    try:
        cls.from_obj(obj)
    except BodyError as exc:
        assert cls.__name__ in str(exc)
