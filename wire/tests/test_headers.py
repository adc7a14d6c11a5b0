"""Typed headers: Java field names and required-ness, real extFields from the corpus, round trips."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqgate.tools.pcap import read_frames
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import HeaderFieldError
from rmqgate.wire.header import CommandHeader, HeaderField, command_header
from rmqgate.wire.headers import (
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    V2_CODES,
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    QueryMessageResponseHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    decode_request_header,
    encode_request_header,
)

ALL_CLASSES = sorted(
    {cls for cls in [*REQUEST_HEADERS.values(), *RESPONSE_HEADERS.values()] if cls is not None},
    key=lambda c: c.__name__,
)

# --- declarations against RocketMQ 4.9.8 (+5.x optional fields) --------------------------------

# Java field name -> required (@CFNotNull), for headers whose spelling is easy to get wrong.
JAVA_FIELDS: dict[type[CommandHeader], dict[str, bool]] = {
    PullMessageRequestHeader: {
        "consumerGroup": True,
        "topic": True,
        "queueId": True,
        "queueOffset": True,
        "maxMsgNums": True,
        "sysFlag": True,
        "commitOffset": True,
        "suspendTimeoutMillis": True,
        "subscription": False,
        "subVersion": True,
        "expressionType": False,
        "maxMsgBytes": False,
        "requestSource": False,
        "proxyFrowardClientId": False,
        "bname": False,
    },
    UnregisterClientRequestHeader: {"clientID": True, "producerGroup": False, "consumerGroup": False},
    EndTransactionRequestHeader: {
        "producerGroup": True,
        "tranStateTableOffset": True,
        "commitLogOffset": True,
        "commitOrRollback": True,
        "fromTransactionCheck": False,
        "msgId": True,
        "transactionId": False,
        "topic": False,
        "bname": False,
    },
    RegisterBrokerRequestHeader: {
        "brokerName": True,
        "brokerAddr": True,
        "clusterName": True,
        "haServerAddr": True,
        "brokerId": True,
        "heartbeatTimeoutMillis": False,
        "enableActingMaster": False,
        "compressed": False,
        "bodyCrc32": False,
    },
    CreateTopicRequestHeader: {  # Java's @CFNotNull defaultTopic and order: only logged when absent
        "topic": True,
        "defaultTopic": False,
        "readQueueNums": True,
        "writeQueueNums": True,
        "perm": True,
        "topicFilterType": True,
        "topicSysFlag": False,
        "order": False,
        "attributes": False,
        "force": False,
    },
    QueryMessageResponseHeader: {"indexLastUpdateTimestamp": True, "indexLastUpdatePhyoffset": True},
    GetRouteInfoRequestHeader: {"topic": True, "acceptStandardJsonOnly": False},
}


@pytest.mark.parametrize("cls", list(JAVA_FIELDS), ids=lambda c: c.__name__)
def test_java_names_and_required_fields(cls: type[CommandHeader]) -> None:
    assert {f.wire: f.required for f in cls.FIELDS} == JAVA_FIELDS[cls]


# Java field name -> Integer or Long (PROTOCOL.md §3), for the number fields of the busiest headers.
JAVA_NUMBERS: dict[type[CommandHeader], dict[str, str]] = {
    SendMessageRequestHeader: {
        "defaultTopicQueueNums": "Integer",
        "queueId": "Integer",
        "sysFlag": "Integer",
        "bornTimestamp": "Long",
        "flag": "Integer",
        "reconsumeTimes": "Integer",
        "maxReconsumeTimes": "Integer",
    },
    PullMessageRequestHeader: {
        "queueId": "Integer",
        "queueOffset": "Long",
        "maxMsgNums": "Integer",
        "sysFlag": "Integer",
        "commitOffset": "Long",
        "suspendTimeoutMillis": "Long",
        "subVersion": "Long",
        "maxMsgBytes": "Integer",
        "requestSource": "Integer",
    },
    EndTransactionRequestHeader: {
        "tranStateTableOffset": "Long",
        "commitLogOffset": "Long",
        "commitOrRollback": "Integer",
    },
    RegisterBrokerRequestHeader: {
        "brokerId": "Long",
        "heartbeatTimeoutMillis": "Long",
        "bodyCrc32": "Integer",
    },
}


@pytest.mark.parametrize("cls", list(JAVA_NUMBERS), ids=lambda c: c.__name__)
def test_number_fields_declare_the_java_type(cls: type[CommandHeader]) -> None:
    assert {f.wire: f.java.name for f in cls.FIELDS if f.java is not None} == JAVA_NUMBERS[cls]


def test_v2_aliases_are_the_java_letters() -> None:
    aliases = {f.wire: f.alias for f in SendMessageRequestHeader.FIELDS}
    assert aliases == {
        "producerGroup": "a",
        "topic": "b",
        "defaultTopic": "c",
        "defaultTopicQueueNums": "d",
        "queueId": "e",
        "sysFlag": "f",
        "bornTimestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsumeTimes": "j",
        "unitMode": "k",
        "maxReconsumeTimes": "l",
        "batch": "m",
        "bname": "n",
    }
    assert {f.alias for f in SendMessageRequestHeader.FIELDS if f.required} == set("abcdefgh")


def test_registry_covers_the_served_codes() -> None:
    served = {
        "SEND_MESSAGE", "SEND_MESSAGE_V2", "SEND_BATCH_MESSAGE", "SEND_REPLY_MESSAGE", "SEND_REPLY_MESSAGE_V2",
        "PULL_MESSAGE", "QUERY_CONSUMER_OFFSET", "UPDATE_CONSUMER_OFFSET", "GET_MAX_OFFSET", "GET_MIN_OFFSET",
        "GET_EARLIEST_MSG_STORETIME", "SEARCH_OFFSET_BY_TIMESTAMP", "VIEW_MESSAGE_BY_ID", "QUERY_MESSAGE",
        "HEART_BEAT", "UNREGISTER_CLIENT", "GET_CONSUMER_LIST_BY_GROUP", "NOTIFY_CONSUMER_IDS_CHANGED",
        "CONSUMER_SEND_MSG_BACK", "END_TRANSACTION", "CHECK_TRANSACTION_STATE", "LOCK_BATCH_MQ",
        "UNLOCK_BATCH_MQ", "UPDATE_AND_CREATE_TOPIC", "DELETE_TOPIC_IN_BROKER", "GET_TOPIC_STATS_INFO",
        "GET_CONSUME_STATS", "GET_CONSUMER_CONNECTION_LIST", "GET_PRODUCER_CONNECTION_LIST",
        "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP", "DELETE_SUBSCRIPTIONGROUP", "GET_ALL_CONSUMER_OFFSET",
        "GET_BROKER_RUNTIME_INFO", "REGISTER_BROKER", "UNREGISTER_BROKER", "QUERY_DATA_VERSION",
        "GET_ROUTEINFO_BY_TOPIC", "GET_KV_CONFIG", "PUT_KV_CONFIG", "DELETE_KV_CONFIG", "GET_TOPICS_BY_CLUSTER",
        "WIPE_WRITE_PERM_OF_BROKER", "ADD_WRITE_PERM_OF_BROKER", "INVOKE_BROKER_TO_RESET_OFFSET",
        "GET_CONSUMER_RUNNING_INFO", "CONSUME_MESSAGE_DIRECTLY", "DELETE_TOPIC_IN_NAMESRV",
    }  # fmt: skip
    assert {RequestCode[name] for name in served} <= set(REQUEST_HEADERS)
    assert set(RESPONSE_HEADERS) == set(REQUEST_HEADERS)
    assert {RequestCode(c).name for c, cls in REQUEST_HEADERS.items() if cls is None} >= {
        "HEART_BEAT", "LOCK_BATCH_MQ", "UNLOCK_BATCH_MQ", "GET_BROKER_RUNTIME_INFO", "GET_ALL_CONSUMER_OFFSET",
    }  # fmt: skip
    for code, names in {
        RequestCode.GET_KV_CONFIG: {"value"},
        RequestCode.QUERY_DATA_VERSION: {"changed"},
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: {"wipeTopicCount"},
        RequestCode.ADD_WRITE_PERM_OF_BROKER: {"addTopicCount"},
        RequestCode.REGISTER_BROKER: {"haServerAddr", "masterAddr"},
        RequestCode.QUERY_MESSAGE: {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"},
    }.items():
        cls = RESPONSE_HEADERS[code]
        assert cls is not None and {f.wire for f in cls.FIELDS} == names


# --- behaviour -----------------------------------------------------------------------------------

SEND_V2 = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1795312001858", "h": "0"}


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("TRUE", True), ("false", False),
                                                 ("0", False), ("yes", False), ("", False)])  # fmt: skip
def test_bool_parsing_accepts_the_cpp_one(value: str, expected: bool) -> None:
    assert SendMessageRequestHeader.from_ext_v2({**SEND_V2, "m": value}).batch is expected


def test_code_picks_the_naming() -> None:
    v2 = decode_request_header(RequestCode.SEND_MESSAGE_V2, {**SEND_V2, "m": "1", "n": "broker-a"})
    assert isinstance(v2, SendMessageRequestHeader)
    assert (v2.producer_group, v2.default_topic_queue_nums, v2.born_timestamp, v2.batch, v2.bname) == (
        "PG", 4, 1795312001858, True, "broker-a",
    )  # fmt: skip
    long_names = v2.to_ext()
    assert long_names["producerGroup"] == "PG" and long_names["batch"] == "true"
    assert decode_request_header(RequestCode.SEND_MESSAGE, long_names) == v2
    assert decode_request_header(RequestCode.SEND_REPLY_MESSAGE, long_names) == v2
    for code in V2_CODES:
        assert encode_request_header(code, v2) == v2.to_ext_v2()
    assert decode_request_header(RequestCode.HEART_BEAT, {"AccessKey": "x"}) is None
    with pytest.raises(HeaderFieldError, match="'a'"):
        decode_request_header(RequestCode.SEND_BATCH_MESSAGE, long_names)


def test_missing_and_malformed_fields_name_the_field() -> None:
    with pytest.raises(HeaderFieldError, match=r"PullMessageRequestHeader.*'subVersion'"):
        ext = {f.wire: "1" for f in PullMessageRequestHeader.FIELDS if f.required and f.wire != "subVersion"}
        PullMessageRequestHeader.from_ext(ext)
    with pytest.raises(HeaderFieldError, match="'e' = 'one'"):
        SendMessageRequestHeader.from_ext_v2({**SEND_V2, "e": "one"})
    with pytest.raises(HeaderFieldError, match="'queueId'"):
        decode_request_header(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": ""})
    with pytest.raises(HeaderFieldError, match="'topic'"):
        decode_request_header(RequestCode.GET_ROUTEINFO_BY_TOPIC, None)


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("e", "2147483647", None),  # queueId: Integer.MAX_VALUE
        ("e", "-2147483648", None),
        ("e", "+7", None),  # Integer.parseInt takes a plus sign
        ("e", "2147483648", "is out of range of a Java Integer"),  # one past: NumberFormatException
        ("e", "-2147483649", "is out of range of a Java Integer"),
        ("e", " 1", "is not a valid Integer"),  # Python's int() takes these; Java does not
        ("e", "1_0", "is not a valid Integer"),
        ("e", "0x10", "is not a valid Integer"),
        ("g", "9223372036854775807", None),  # bornTimestamp: Long.MAX_VALUE
        ("g", "9223372036854775808", "is out of range of a Java Long"),
        ("g", "2147483648", None),
    ],
)
def test_numbers_are_parsed_as_java_parses_them(field: str, value: str, refused: str | None) -> None:
    if refused is None:
        header = SendMessageRequestHeader.from_ext_v2({**SEND_V2, field: value})
        assert header.to_ext_v2()[field] == str(int(value))
    else:
        with pytest.raises(HeaderFieldError, match=re.escape(f"'{field}' = '{value}' {refused}")):
            SendMessageRequestHeader.from_ext_v2({**SEND_V2, field: value})


def test_an_int_field_without_a_java_type_is_refused() -> None:
    with pytest.raises(TypeError, match="Integer or Long"):

        @command_header
        class Bad(CommandHeader):
            count: int


def test_defaults_of_optional_fields() -> None:
    pull = PullMessageRequestHeader.from_ext(
        {f.wire: "5" for f in PullMessageRequestHeader.FIELDS if f.required}
    )
    assert pull.subscription is None and pull.max_msg_bytes is None and pull.bname is None
    reg = RegisterBrokerRequestHeader.from_ext(
        {"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "haServerAddr": "a:2", "brokerId": "0"}
    )
    assert reg.compressed is False and reg.body_crc32 == 0 and reg.enable_acting_master is None


# --- real traffic --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exchanges(corpus: Path) -> list[tuple[str, RemotingCommand, RemotingCommand | None]]:
    """(capture name, request, its response or None) for every request in the corpus."""
    out = []
    for path in sorted(corpus.glob("pcap*/*.pcap")):
        pending: dict[tuple[str, int], int] = {}
        pairs: list[list[Any]] = []
        for frame in read_frames(path):
            cmd = frame.command
            if cmd is None:
                continue
            if not cmd.is_response:
                pending[(frame.conn_id, cmd.opaque)] = len(pairs)
                pairs.append([path.name, cmd, None])
            else:
                index = pending.pop((frame.conn_id, cmd.opaque), None)
                if index is not None:
                    pairs[index][2] = cmd
        out += [tuple(p) for p in pairs]
    return out  # type: ignore[return-value]


def _normalised(cls: type[CommandHeader], ext: dict[str, str], v2: bool) -> dict[str, str]:
    """The known fields of ``ext`` as our encoder writes them (booleans spelled true/false)."""
    out = {}
    for f in cls.FIELDS:
        key = f.alias if v2 and f.alias else f.wire
        if key in ext:
            value = ext[key]
            if f.kind is bool:
                value = "true" if value.lower() in ("true", "1") else "false"
            out[key] = value
    return out


def test_every_request_header_in_the_corpus_decodes(exchanges: list[Any]) -> None:
    seen: Counter[int] = Counter()
    for name, request, _ in exchanges:
        cls = REQUEST_HEADERS.get(request.code)
        if cls is None:
            continue
        header = decode_request_header(request.code, request.ext_fields)
        seen[request.code] += 1
        v2 = request.code in V2_CODES
        encoded = encode_request_header(request.code, header)
        known = _normalised(cls, request.ext_fields or {}, v2)
        # Everything the client sent comes back; the encoder adds only Java defaults (unitMode=false...).
        assert {k: encoded[k] for k in known} == known, (name, request)
        assert decode_request_header(request.code, encoded) == header
    for code in (10, 11, 14, 15, 17, 29, 30, 31, 33, 35, 36, 37, 38, 39, 40, 103, 105, 310, 320):
        assert seen[code] > 0, RequestCode(code).name


def test_cpp_batch_flag_and_5x_fields_from_the_corpus(exchanges: list[Any]) -> None:
    cpp_batches = [
        decode_request_header(r.code, r.ext_fields)
        for name, r, _ in exchanges
        if name.startswith("cpp210")
        and r.code == RequestCode.SEND_MESSAGE_V2
        and r.ext_fields.get("m") == "1"
    ]
    assert cpp_batches and all(h.batch for h in cpp_batches)
    pulls5 = [
        decode_request_header(r.code, r.ext_fields)
        for name, r, _ in exchanges
        if "client5" in name and r.code == RequestCode.PULL_MESSAGE
    ]
    assert pulls5 and all(p.max_msg_bytes is not None and p.bname for p in pulls5)
    old = [
        r
        for name, r, _ in exchanges
        if name.startswith("rocketmq-0.4.4") and r.code == RequestCode.SEND_MESSAGE
    ]
    assert old and all(decode_request_header(r.code, r.ext_fields).topic for r in old)


def test_every_successful_response_header_in_the_corpus_decodes(exchanges: list[Any]) -> None:
    seen: Counter[int] = Counter()
    for name, request, response in exchanges:
        cls = RESPONSE_HEADERS.get(request.code)
        if cls is None or response is None or response.code != ResponseCode.SUCCESS:
            continue
        header = cls.from_ext(response.ext_fields or {})
        seen[request.code] += 1
        known = _normalised(cls, response.ext_fields or {}, False)
        assert {k: v for k, v in header.to_ext().items() if k in known} == known, name
    for code in (10, 11, 14, 29, 30, 31, 310, 320):
        assert seen[code] > 0, RequestCode(code).name


# --- properties ----------------------------------------------------------------------------------

_VALUES = {
    str: st.text(st.characters(codec="utf-8"), max_size=10),
    bool: st.booleans(),
}


def _values(f: HeaderField) -> st.SearchStrategy[Any]:
    if f.java is None:
        return _VALUES[f.kind]
    return st.integers(f.java.low, f.java.high)


def _instances(cls: type[CommandHeader]) -> st.SearchStrategy[CommandHeader]:
    fields = {}
    for f in cls.FIELDS:
        value = _values(f)
        fields[f.attr] = value if f.required or f.default is not None else st.none() | value
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_round_trip(cls: type[CommandHeader], data: st.DataObject) -> None:
    header = data.draw(_instances(cls))
    assert cls.from_ext(header.to_ext()) == header
    if any(f.alias for f in cls.FIELDS):
        assert cls.from_ext_v2(header.to_ext_v2()) == header
    assert all(type(v) is str for v in header.to_ext().values())


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_arbitrary_ext_fields_decode_or_raise_header_field_error(cls: type[CommandHeader], data: Any) -> None:
    keys = [f.wire for f in cls.FIELDS] + [f.alias for f in cls.FIELDS if f.alias] + ["other"]
    ext = data.draw(
        st.dictionaries(st.sampled_from(keys), st.text(max_size=6) | st.integers(-(2**70), 2**70).map(str))
    )
    decoders = [cls.from_ext, cls.from_ext_v2] if any(f.alias for f in cls.FIELDS) else [cls.from_ext]
    for decode in decoders:
        try:
            header = decode(ext)
        except HeaderFieldError as exc:
            assert cls.__name__ in str(exc)
        else:
            assert dataclasses.is_dataclass(header)
