"""A Wireshark Lua dissector for RocketMQ remoting traffic, generated from the wire declarations.

Every layout the dissector reads is emitted from the construct declarations the codec uses (the
frame and ROCKETMQ header in ``wire.layout``, the CommitLog record in ``wire.message``, the batch
element in ``wire.message_batch``, the compressed REGISTER_BROKER body in ``wire.bodies``); the
extFields come from the header classes of ``wire.headers``, the JSON header keys from the codec's
own JSON encoder, the codes from ``wire.codes``. The Lua side is a generic walker over those
tables, so the dissector cannot drift from the codec: regenerate it with
``rmqgate pcap dissector > rocketmq.lua``.

Compressed message bodies are inflated when zlib (the 4.x clients' only type, a 5.x client's
default); LZ4 and ZSTD bodies (5.x clients) are marked with their type but shown compressed, as
Wireshark's Lua API (``TvbRange:uncompress``, Wireshark 4.0) inflates zlib only.
"""

from __future__ import annotations

import inspect
import json
import operator
import re
from collections.abc import Iterable
from typing import Any

from construct import (
    Bytes,
    Construct,
    FocusedSeq,
    FormatField,
    GreedyBytes,
    GreedyRange,
    IfThenElse,
    Prefixed,
    Renamed,
    StringEncoded,
    Struct,
    Switch,
)
from construct.expr import BinExpr, Path

from rmqgate.tools.dissector_lua import RUNTIME
from rmqgate.wire import bodies, headers, message_const
from rmqgate.wire.bodies import CompressedRegisterBrokerBody, JsonBody
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import DEFAULT_MAX_FRAME_LENGTH
from rmqgate.wire.header import CommandHeader, snake
from rmqgate.wire.layout import HEADER_LENGTH_MASK, ExtField, Frame, RocketMQHeader
from rmqgate.wire.message import StoredMessage
from rmqgate.wire.message_batch import BatchMessage
from rmqgate.wire.message_const import MessageSysFlag
from rmqgate.wire.serialization import encode_json_header

#: Ports the dissector is registered on (name server, broker); others are found by the heuristic.
DEFAULT_PORTS = (9876, 10911)

R = RequestCode

#: Body of a request, by request code: how the dissector reads it.
REQUEST_BODIES: dict[int, str] = {
    R.SEND_MESSAGE: "message",
    R.SEND_MESSAGE_V2: "message",
    R.SEND_REPLY_MESSAGE: "message",
    R.SEND_REPLY_MESSAGE_V2: "message",
    R.PUSH_REPLY_MESSAGE_TO_CLIENT: "message",
    R.SEND_BATCH_MESSAGE: "BatchMessage",
    R.CHECK_TRANSACTION_STATE: "StoredMessage",
    R.CONSUME_MESSAGE_DIRECTLY: "StoredMessage",
    R.REGISTER_BROKER: "RegisterBrokerBody",
}
#: Body of a successful response, by the request code it answers.
RESPONSE_BODIES: dict[int, str] = {
    R.PULL_MESSAGE: "StoredMessage",
    R.LITE_PULL_MESSAGE: "StoredMessage",
    R.VIEW_MESSAGE_BY_ID: "StoredMessage",
    R.QUERY_MESSAGE: "StoredMessage",
}
#: JSON bodies named by their declaration (others are still shown as a JSON tree).
JSON_REQUEST_BODIES: dict[int, type[JsonBody]] = {
    R.HEART_BEAT: bodies.HeartbeatData,
    R.LOCK_BATCH_MQ: bodies.LockBatchRequestBody,
    R.UNLOCK_BATCH_MQ: bodies.UnlockBatchRequestBody,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: bodies.SubscriptionGroupConfig,
    R.CHECK_CLIENT_CONFIG: bodies.CheckClientRequestBody,
    R.REGISTER_BROKER: bodies.RegisterBrokerBody,
}
JSON_RESPONSE_BODIES: dict[int, type[JsonBody]] = {
    R.GET_ROUTEINFO_BY_TOPIC: bodies.TopicRouteData,
    R.GET_BROKER_CLUSTER_INFO: bodies.ClusterInfo,
    R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: bodies.TopicList,
    R.GET_TOPICS_BY_CLUSTER: bodies.TopicList,
    R.GET_KVLIST_BY_NAMESPACE: bodies.KVTable,
    R.LOCK_BATCH_MQ: bodies.LockBatchResponseBody,
    R.GET_CONSUMER_LIST_BY_GROUP: bodies.GetConsumerListByGroupResponseBody,
    R.GET_ALL_TOPIC_CONFIG: bodies.TopicConfigSerializeWrapper,
    R.GET_CONSUMER_CONNECTION_LIST: bodies.ConsumerConnection,
    R.GET_TOPIC_STATS_INFO: bodies.TopicStatsTable,
    R.GET_CONSUME_STATS: bodies.ConsumeStats,
    R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: bodies.SubscriptionGroupWrapper,
    R.GET_ALL_CONSUMER_OFFSET: bodies.ConsumerOffsetSerializeWrapper,
    R.QUERY_CONSUME_QUEUE: bodies.QueryConsumeQueueResponseBody,
    R.GET_ALL_PRODUCER_INFO: bodies.ProducerTableInfo,
}

#: Per declared struct: the abbreviation prefix of its fields.
STRUCTS: dict[str, tuple[Struct, str]] = {
    "Frame": (Frame, "rocketmq"),
    "RocketMQHeader": (RocketMQHeader, "rocketmq"),
    "ExtField": (ExtField, "rocketmq.extfield"),
    "StoredMessage": (StoredMessage, "rocketmq.msg"),
    "BatchMessage": (BatchMessage, "rocketmq.batch"),
    "CompressedRegisterBrokerBody": (CompressedRegisterBrokerBody, "rocketmq.register"),
}
#: Fields the Lua runtime treats specially after reading them (struct, field) -> hook name.
HOOKS: dict[tuple[str, str], str] = {
    ("ExtField", "value"): "ext_value",
    ("StoredMessage", "body"): "message_body",
    ("StoredMessage", "properties"): "properties",
    ("BatchMessage", "body"): "message_body",
    ("BatchMessage", "properties"): "properties",
}
#: Fields whose ProtoField the runtime declares itself (with its value strings): the Lua name.
_SPECIAL = {("RocketMQHeader", "language"): "F_LANGUAGE"}


def lua_string(text: str | bytes) -> str:
    """A Lua string literal (decimal escapes for anything outside printable ASCII)."""
    data = text.encode() if isinstance(text, str) else text
    out = []
    for b in data:
        ch = chr(b)
        if ch in '\\"':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{b:03d}")
    return '"' + "".join(out) + '"'


_OPS = {operator.and_: "band", operator.add: "+", operator.sub: "-", operator.or_: "bor"}


def lua_expr(expr: Any) -> str:
    """A construct ``this`` expression (or constant) as Lua over the context table ``c``."""
    if isinstance(expr, int):
        return str(expr)
    if isinstance(expr, Path):
        return f"c[{lua_string(expr._Path__field)}]"
    if isinstance(expr, BinExpr):
        op = _OPS.get(expr.op)
        if op is None:
            raise ValueError(f"no Lua form for operator {expr.op}")
        lhs, rhs = lua_expr(expr.lhs), lua_expr(expr.rhs)
        return f"{op}({lhs}, {rhs})" if op.isalpha() else f"({lhs} {op} {rhs})"
    raise ValueError(f"no Lua form for {expr!r}")


_INT_TYPES = {"b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32"}
_INT_TYPES |= {"q": "int64", "Q": "uint64", "l": "int32", "L": "uint32"}


def _unwrap(con: Construct) -> Construct:
    return con.subcon if isinstance(con, Renamed) else con


class _Emitter:
    """Collects ProtoField declarations while describing declarations as Lua tables."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}  # abbrev -> ProtoField constructor call

    def field(self, abbrev: str, ctor: str) -> str:
        self.fields.setdefault(abbrev, ctor)
        return f"F[{lua_string(abbrev)}]"

    def describe(self, con: Construct, abbrev: str, label: str) -> str:
        con = _unwrap(con)
        if isinstance(con, FormatField):
            code = con.fmtstr[1:]
            kind = _INT_TYPES[code]
            size = con.sizeof()
            signed = "true" if code.islower() else "false"
            wide = "true" if size == 8 else "false"
            ref = self.field(
                abbrev, f"ProtoField.{kind}({lua_string(abbrev)}, {lua_string(label)}, base.DEC)"
            )
            return f'{{kind="int", size={size}, signed={signed}, wide={wide}, f={ref}}}'
        if isinstance(con, Bytes):
            length = con.length
            if isinstance(length, int) and length in (4, 16) and label.endswith("host"):
                ip = "ipv4" if length == 4 else "ipv6"
                ref = self.field(
                    abbrev + ("" if length == 4 else "_v6"), f"ProtoField.{ip}(%A, {lua_string(label)})"
                )
                return f'{{kind="bytes", len=function(c) return {length} end, f={ref}}}'
            ref = self.field(abbrev, f"ProtoField.bytes(%A, {lua_string(label)})")
            return f'{{kind="bytes", len=function(c) return {lua_expr(length)} end, f={ref}}}'
        if con is GreedyBytes:
            ref = self.field(abbrev, f"ProtoField.bytes(%A, {lua_string(label)})")
            return f'{{kind="greedybytes", f={ref}}}'
        if isinstance(con, StringEncoded):  # PascalString
            prefixed = con.subcon
            lf = _unwrap(prefixed.lengthfield)
            size = lf.sizeof()
            signed = "true" if lf.fmtstr[1:].islower() else "false"
            ref = self.field(abbrev, f"ProtoField.string(%A, {lua_string(label)}, base.UNICODE)")
            return f'{{kind="pstring", prefix={size}, signed={signed}, f={ref}}}'
        if isinstance(con, IfThenElse):
            cond = lua_expr(con.condfunc)
            yes = self.describe(con.thensubcon, abbrev, label)
            no = self.describe(con.elsesubcon, abbrev, label)
            return f'{{kind="if", cond=function(c) return {cond} ~= 0 end, yes={yes}, no={no}}}'
        if isinstance(con, Switch):
            cases = ", ".join(
                f"[{key}]={self.describe(sub, abbrev, label)}" for key, sub in con.cases.items()
            )
            return f'{{kind="switch", key=function(c) return {lua_expr(con.keyfunc)} end, cases={{{cases}}}}}'
        if isinstance(con, FocusedSeq):  # PrefixedArray: count field, then an Array of items
            parts = {sub.name: _unwrap(sub) for sub in con.subcons}
            lf = _unwrap(parts["count"].subcon)
            inner = self.describe(parts["items"].subcon, abbrev + "_item", label + " item")
            count = self.field(abbrev + "_count", f"ProtoField.int32(%A, {lua_string(label + ' count')})")
            return f'{{kind="array", prefix={lf.sizeof()}, count_f={count}, item={inner}}}'
        if isinstance(con, Prefixed):
            lf = _unwrap(con.lengthfield)
            inner_con = con.subcon
            ref = self.field(abbrev, f"ProtoField.none(%A, {lua_string(label)})")
            length = self.field(abbrev + "_length", f"ProtoField.int32(%A, {lua_string(label + ' length')})")
            if isinstance(inner_con, GreedyRange):
                item = _unwrap(inner_con.subcon)
                name = next(n for n, (s, _) in STRUCTS.items() if s is item)
                return f'{{kind="prefixed", prefix={lf.sizeof()}, f={ref}, length_f={length}, each={lua_string(name)}}}'
            raise ValueError(f"unsupported Prefixed content {inner_con!r}")
        raise ValueError(f"unsupported construct {con!r} for {abbrev}")

    def struct(self, name: str) -> str:
        con, prefix = STRUCTS[name]
        entries = []
        for sub in con.subcons:
            abbrev = f"{prefix}.{sub.name}"
            label = sub.name.replace("_", " ")
            special = _SPECIAL.get((name, sub.name))
            if special:
                desc = f'{{kind="int", size={sub.subcon.sizeof()}, signed=false, wide=false, f={special}}}'
            else:
                desc = self.describe(sub, abbrev, label)
            hook = HOOKS.get((name, sub.name))
            hook_lua = f", hook={lua_string(hook)}" if hook else ""
            entries.append(f"  {{name={lua_string(sub.name)}, d={desc}{hook_lua}}},")
        return f"STRUCTS[{lua_string(name)}] = {{\n" + "\n".join(entries) + "\n}"


def header_classes() -> list[type[CommandHeader]]:
    """Every header class declared in ``wire.headers``, in declaration order."""
    return [
        obj
        for obj in vars(headers).values()
        if inspect.isclass(obj)
        and issubclass(obj, CommandHeader)
        and obj is not CommandHeader
        and obj.__module__ == headers.__name__
    ]


def ext_field_names() -> dict[str, tuple[str, str]]:
    """extField name -> (label, description: the header classes declaring it). A V2 alias is
    labelled with the long name it stands for."""
    out: dict[str, tuple[str, list[str]]] = {}
    for cls in header_classes():
        for f in cls.FIELDS:
            out.setdefault(f.wire, (f.wire, []))[1].append(cls.__name__)
            if f.alias:
                out.setdefault(f.alias, (f"{f.alias} ({f.wire})", []))[1].append(f"{cls.__name__}V2")
    return {name: (label, ", ".join(dict.fromkeys(owners))) for name, (label, owners) in out.items()}


def json_field_names() -> list[str]:
    """Every JSON field name (and accepted alias) declared by a body in ``wire.bodies``."""
    names: dict[str, None] = {}
    for _, cls in inspect.getmembers(bodies, inspect.isclass):
        if issubclass(cls, JsonBody) and cls is not JsonBody:
            for f in cls.__json_fields__:
                for name in f.names:
                    names[name] = None
    return sorted(names)


_ABBREV = re.compile(r"[A-Za-z0-9_.-]+")


def property_names() -> list[str]:
    """The message property keys ``wire.message_const`` names (PROPERTY_* constants)."""
    keys = {v for k, v in vars(message_const).items() if k.startswith("PROPERTY_") and isinstance(v, str)}
    return sorted(k for k in keys if _ABBREV.fullmatch(k))


def json_header_keys() -> dict[str, str]:
    """JSON header key -> ROCKETMQ header field it carries, read off the codec's own JSON encoder."""
    sample = RemotingCommand(code=0, remark="r", ext_fields={"k": "v"})
    keys = json.loads(encode_json_header(sample))
    fields = {sub.name for sub in RocketMQHeader.subcons}
    return {key: snake(key) if snake(key) in fields else "" for key in keys}


def _table(items: Iterable[tuple[Any, str]], key_fmt: str = "[{}]") -> str:
    return "{" + ", ".join(f"{key_fmt.format(k)}={v}" for k, v in items) + "}"


def _names(enum: Iterable[Any]) -> str:
    return _table((int(m), lua_string(m.name)) for m in enum)


def _sysflag_bits() -> str:
    """(name, value, mask) of each MessageSysFlag constant: a value inside a *_MASK field (transaction
    state, compression type) is matched on the whole field, any other on its own bits."""
    constants = {n: v for n, v in vars(MessageSysFlag).items() if n.isupper() and isinstance(v, int)}
    masks = [v for n, v in constants.items() if n.endswith("_MASK")]
    items = []
    for name, value in constants.items():
        if value and not name.endswith("_MASK"):
            mask = next((m for m in masks if value & m == value), value)
            items.append(f"{{{lua_string(name)}, {value}, {mask}}}")
    return "{" + ", ".join(items) + "}"


def _compression_names() -> str:
    """Compression type bits -> name (the MessageSysFlag constants inside COMPRESSION_MASK)."""
    mask = MessageSysFlag.COMPRESSION_MASK
    constants = {n: v for n, v in vars(MessageSysFlag).items() if n.isupper() and isinstance(v, int)}
    return _table(
        (v, lua_string(n.lower())) for n, v in constants.items() if v and v & mask == v and v != mask
    )


def _code_tables(mapping: dict[int, Any], render: Any) -> str:
    return _table((int(code), render(value)) for code, value in mapping.items())


def generate() -> str:
    """The Lua dissector source."""
    em = _Emitter()
    struct_tables = "\n\n".join(em.struct(name) for name in STRUCTS)
    ext_names = ext_field_names()
    for name, (label, owners) in ext_names.items():
        em.field(
            f"rocketmq.ext.{name}",
            f"ProtoField.string(%A, {lua_string(label)}, base.UNICODE, {lua_string(owners)})",
        )
    for name in json_field_names():
        em.field(f"rocketmq.json.{name}", f"ProtoField.string(%A, {lua_string(name)}, base.UNICODE)")
    for name in property_names():
        em.field(f"rocketmq.prop.{name}", f"ProtoField.string(%A, {lua_string(name)}, base.UNICODE)")
    field_lines = "\n".join(
        f"F[{lua_string(abbrev)}] = {ctor.replace('%A', lua_string(abbrev))}"
        for abbrev, ctor in em.fields.items()
    )
    substitutions = {
        "@FIELDS@": field_lines,
        "@STRUCTS@": struct_tables,
        "@REQUEST_CODES@": _names(RequestCode),
        "@RESPONSE_CODES@": _names(ResponseCode),
        "@LANGUAGES@": _names(LanguageCode),
        "@SERIALIZE@": _names(SerializeType),
        "@JSON_SERIALIZE@": str(int(SerializeType.JSON)),
        "@ROCKETMQ_SERIALIZE@": str(int(SerializeType.ROCKETMQ)),
        "@JSON_KEYS@": _table(((lua_string(k), lua_string(v)) for k, v in json_header_keys().items())),
        "@HEADER_LENGTH_MASK@": str(HEADER_LENGTH_MASK),
        "@SERIALIZE_SHIFT@": str(HEADER_LENGTH_MASK.bit_length()),
        "@MAX_FRAME@": str(DEFAULT_MAX_FRAME_LENGTH),
        "@RESPONSE_FLAG@": str(RESPONSE_FLAG),
        "@ONEWAY_FLAG@": str(ONEWAY_FLAG),
        "@SYSFLAG_BITS@": _sysflag_bits(),
        "@COMPRESSED@": str(MessageSysFlag.COMPRESSED),
        "@COMPRESSION_MASK@": str(MessageSysFlag.COMPRESSION_MASK),
        "@ZLIB@": str(MessageSysFlag.ZLIB),
        "@COMPRESSION_NAMES@": _compression_names(),
        "@REQUEST_BODIES@": _code_tables(REQUEST_BODIES, lua_string),
        "@RESPONSE_BODIES@": _code_tables(RESPONSE_BODIES, lua_string),
        "@JSON_REQUEST_BODIES@": _code_tables(JSON_REQUEST_BODIES, lambda c: lua_string(c.__name__)),
        "@JSON_RESPONSE_BODIES@": _code_tables(JSON_RESPONSE_BODIES, lambda c: lua_string(c.__name__)),
        "@SEND_HEADER_FIELDS@": _send_header_fields(),
        "@PORTS@": "{" + ", ".join(str(p) for p in DEFAULT_PORTS) + "}",
        "@NAME_VALUE_SEPARATOR@": lua_string(message_const.NAME_VALUE_SEPARATOR),
        "@PROPERTY_SEPARATOR@": lua_string(message_const.PROPERTY_SEPARATOR),
        "@LANGUAGE_DEFAULT@": str(int(LanguageCode.JAVA)),
    }
    text = RUNTIME
    for key, value in substitutions.items():
        text = text.replace(key, value)
    return text


def _send_header_fields() -> str:
    """The extFields of a send carrying sysFlag and properties (long names and V2 aliases)."""
    out = {}
    for f in headers.SendMessageRequestHeader.FIELDS:
        if f.attr in ("sys_flag", "properties"):
            out[f.wire] = f.attr
            if f.alias:
                out[f.alias] = f.attr
    return _table(((lua_string(k), lua_string(v)) for k, v in out.items()))
