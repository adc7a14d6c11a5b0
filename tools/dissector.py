"""A Wireshark Lua dissector for RocketMQ remoting traffic, generated from the wire declarations.

Every layout the dissector reads is emitted from the construct declarations the codec uses (the
frame and ROCKETMQ header in ``wire.layout``, the CommitLog record and batch element in
``wire.message``, the compressed REGISTER_BROKER body in ``wire.bodies``); the extFields come from
the header classes of ``wire.headers``, the JSON header keys from the codec's own JSON encoder, the
codes from ``wire.codes``. The Lua side is a generic walker over those tables, so the dissector
cannot drift from the codec: regenerate it with ``rmqgate pcap dissector > rocketmq.lua``.
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

from rmqgate.wire import bodies, headers, message
from rmqgate.wire.bodies import CompressedRegisterBrokerBody, JsonBody
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import DEFAULT_MAX_FRAME_LENGTH
from rmqgate.wire.header import CommandHeader, snake
from rmqgate.wire.layout import HEADER_LENGTH_MASK, ExtField, Frame, RocketMQHeader
from rmqgate.wire.message import BatchMessage, MessageSysFlag, StoredMessage
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
#: Fields whose ProtoField is declared by the runtime (with value strings or flag bits).
_SPECIAL = {("RocketMQHeader", "language")}


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

    def describe(self, con: Construct, abbrev: str, label: str, struct_name: str) -> str:
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
            yes = self.describe(con.thensubcon, abbrev, label, struct_name)
            no = self.describe(con.elsesubcon, abbrev, label, struct_name)
            return f'{{kind="if", cond=function(c) return {cond} ~= 0 end, yes={yes}, no={no}}}'
        if isinstance(con, Switch):
            cases = ", ".join(
                f"[{key}]={self.describe(sub, abbrev, label, struct_name)}" for key, sub in con.cases.items()
            )
            return f'{{kind="switch", key=function(c) return {lua_expr(con.keyfunc)} end, cases={{{cases}}}}}'
        if isinstance(con, FocusedSeq):  # PrefixedArray: count field, then an Array of items
            parts = {sub.name: _unwrap(sub) for sub in con.subcons}
            lf = _unwrap(parts["count"].subcon)
            inner = self.describe(parts["items"].subcon, abbrev + "_item", label + " item", struct_name)
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
            if (name, sub.name) in _SPECIAL:
                desc = f'{{kind="int", size={sub.subcon.sizeof()}, signed=false, wide=false, f=F_LANGUAGE}}'
            else:
                desc = self.describe(sub, abbrev, label, name)
            hook = HOOKS.get((name, sub.name))
            hook_lua = f", hook={lua_string(hook)}" if hook else ""
            entries.append(f"  {{name={lua_string(sub.name)}, d={desc}{hook_lua}}},")
        return f"STRUCTS[{lua_string(name)}] = {{\n" + "\n".join(entries) + "\n}"


def header_classes() -> list[type[CommandHeader]]:
    """Every header class declared in ``wire.headers``, in declaration order."""
    found = [
        obj
        for _, obj in inspect.getmembers(headers, inspect.isclass)
        if issubclass(obj, CommandHeader) and obj is not CommandHeader and obj.__module__ == headers.__name__
    ]
    return sorted(found, key=lambda cls: inspect.getsourcelines(cls)[1])


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
    """The message property keys ``wire.message`` names (PROPERTY_* constants)."""
    keys = {v for k, v in vars(message).items() if k.startswith("PROPERTY_") and isinstance(v, str)}
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
        "@REQUEST_BODIES@": _code_tables(REQUEST_BODIES, lua_string),
        "@RESPONSE_BODIES@": _code_tables(RESPONSE_BODIES, lua_string),
        "@JSON_REQUEST_BODIES@": _code_tables(JSON_REQUEST_BODIES, lambda c: lua_string(c.__name__)),
        "@JSON_RESPONSE_BODIES@": _code_tables(JSON_RESPONSE_BODIES, lambda c: lua_string(c.__name__)),
        "@SEND_HEADER_FIELDS@": _send_header_fields(),
        "@PORTS@": "{" + ", ".join(str(p) for p in DEFAULT_PORTS) + "}",
        "@NAME_VALUE_SEPARATOR@": lua_string(message.NAME_VALUE_SEPARATOR),
        "@PROPERTY_SEPARATOR@": lua_string(message.PROPERTY_SEPARATOR),
        "@LANGUAGE_DEFAULT@": str(int(LanguageCode.JAVA)),
    }
    text = _RUNTIME
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


_RUNTIME = r"""-- RocketMQ remoting dissector for Wireshark, generated by `rmqgate pcap dissector` from rmqgate's
-- wire declarations (frame, headers, codes, stored-message layout, bodies). Do not edit: regenerate.
-- Install: copy to ~/.local/lib/wireshark/plugins/ (or run tshark -X lua_script:rocketmq.lua).

local rmq = Proto("rocketmq", "RocketMQ Remoting")

local band = (bit32 and bit32.band) or (bit and bit.band) or load("return function(a, b) return a & b end")()
local bor = (bit32 and bit32.bor) or (bit and bit.bor) or load("return function(a, b) return a | b end")()
local rshift = (bit32 and bit32.rshift) or (bit and bit.rshift) or load("return function(a, b) return a >> b end")()

local REQUEST_CODES = @REQUEST_CODES@
local RESPONSE_CODES = @RESPONSE_CODES@
local LANGUAGES = @LANGUAGES@
local SERIALIZE = @SERIALIZE@
local JSON_SERIALIZE = @JSON_SERIALIZE@
local ROCKETMQ_SERIALIZE = @ROCKETMQ_SERIALIZE@
local JSON_KEYS = @JSON_KEYS@
local HEADER_LENGTH_MASK = @HEADER_LENGTH_MASK@
local SERIALIZE_SHIFT = @SERIALIZE_SHIFT@
local MAX_FRAME = @MAX_FRAME@
local RESPONSE_FLAG = @RESPONSE_FLAG@
local ONEWAY_FLAG = @ONEWAY_FLAG@
local SYSFLAG_BITS = @SYSFLAG_BITS@
local COMPRESSED = @COMPRESSED@
local COMPRESSION_MASK = @COMPRESSION_MASK@
local ZLIB = @ZLIB@
local REQUEST_BODIES = @REQUEST_BODIES@
local RESPONSE_BODIES = @RESPONSE_BODIES@
local JSON_REQUEST_BODIES = @JSON_REQUEST_BODIES@
local JSON_RESPONSE_BODIES = @JSON_RESPONSE_BODIES@
local SEND_HEADER_FIELDS = @SEND_HEADER_FIELDS@
local PORTS = @PORTS@
local NAME_VALUE_SEPARATOR = @NAME_VALUE_SEPARATOR@
local PROPERTY_SEPARATOR = @PROPERTY_SEPARATOR@
local LANGUAGE_DEFAULT = @LANGUAGE_DEFAULT@

local F = {}
local F_LANGUAGE = ProtoField.uint8("rocketmq.language", "Language", base.DEC, LANGUAGES)
F["rocketmq.language"] = F_LANGUAGE
F["rocketmq.serialize"] = ProtoField.uint8("rocketmq.serialize", "Serialization", base.DEC, SERIALIZE)
F["rocketmq.header_length"] = ProtoField.uint32("rocketmq.header_length", "Header length")
F["rocketmq.code_name"] = ProtoField.string("rocketmq.code_name", "Code name")
F["rocketmq.request"] = ProtoField.bool("rocketmq.request", "Request")
F["rocketmq.flag.response"] = ProtoField.bool("rocketmq.flag.response", "Response")
F["rocketmq.flag.oneway"] = ProtoField.bool("rocketmq.flag.oneway", "Oneway")
F["rocketmq.request_in"] = ProtoField.framenum("rocketmq.request_in", "Request in", base.NONE, frametype.REQUEST)
F["rocketmq.response_to_code"] = ProtoField.string("rocketmq.response_to_code", "Answers")
F["rocketmq.serialize_type_current_rpc"] = ProtoField.string("rocketmq.serialize_type_current_rpc", "serializeTypeCurrentRPC")
F["rocketmq.ext"] = ProtoField.string("rocketmq.ext", "extField", base.UNICODE)
F["rocketmq.ext_key"] = ProtoField.string("rocketmq.ext_key", "extField key", base.UNICODE)
F["rocketmq.ext_value"] = ProtoField.string("rocketmq.ext_value", "extField value", base.UNICODE)
F["rocketmq.json_header"] = ProtoField.string("rocketmq.json_header", "JSON header", base.UNICODE)
F["rocketmq.body_type"] = ProtoField.string("rocketmq.body_type", "Body declaration")
F["rocketmq.json"] = ProtoField.string("rocketmq.json", "JSON value", base.UNICODE)
F["rocketmq.property"] = ProtoField.string("rocketmq.property", "Property", base.UNICODE)
F["rocketmq.body_text"] = ProtoField.string("rocketmq.body_text", "Body text", base.UNICODE)
F["rocketmq.compressed"] = ProtoField.bool("rocketmq.compressed", "Compressed body")
F["rocketmq.sysflag_bit"] = ProtoField.string("rocketmq.sysflag_bit", "sysFlag bit")
F["rocketmq.messages"] = ProtoField.uint32("rocketmq.messages", "Messages")
@FIELDS@

local fields = {}
for _, f in pairs(F) do fields[#fields + 1] = f end
rmq.fields = fields

local E_MALFORMED = ProtoExpert.new("rocketmq.malformed", "Malformed RocketMQ data", expert.group.MALFORMED, expert.severity.ERROR)
local E_COMPRESSED = ProtoExpert.new("rocketmq.compressed_body", "Compressed message body", expert.group.COMMENTS_GROUP, expert.severity.NOTE)
rmq.experts = {E_MALFORMED, E_COMPRESSED}

local STRUCTS = {}

@STRUCTS@

local f_tcp_stream = Field.new("tcp.stream")

-- Text shown in the tree is valid UTF-8 whatever the bytes were: invalid sequences (and NUL, which
-- would end a C string) become U+FFFD; clipped text ends on a character boundary.
local REPLACEMENT = "\239\191\189"

local function utf8_clean(s)
  if not s:find("[\0\128-\255]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len = 0
    if c > 0 and c < 0x80 then len = 1
    elseif c >= 0xC2 and c < 0xE0 then len = 2
    elseif c >= 0xE0 and c < 0xF0 then len = 3
    elseif c >= 0xF0 and c < 0xF5 then len = 4 end
    local ok = len > 0 and i + len - 1 <= n
    if ok then
      for j = i + 1, i + len - 1 do
        local b = s:byte(j)
        if b < 0x80 or b > 0xBF then ok = false; break end
      end
    end
    if ok then
      out[#out + 1] = s:sub(i, i + len - 1); i = i + len
    else
      out[#out + 1] = REPLACEMENT; i = i + 1
    end
  end
  return table.concat(out)
end

local function clip(s, n)
  if #s <= n then return s end
  local cut = n
  while cut > 0 and band(s:byte(cut + 1), 0xC0) == 0x80 do cut = cut - 1 end
  return s:sub(1, cut) .. "\226\128\166"
end

local LABEL_MAX = 200

-- ---------------------------------------------------------------------------------------------
-- JSON: a small tolerant parser (fastjson also writes unquoted integer keys) keeping byte offsets.

local function json_parse(s)
  local pos = 1
  local n = #s
  local function ws()
    while pos <= n do
      local b = s:byte(pos)
      if b == 32 or b == 9 or b == 10 or b == 13 then pos = pos + 1 else break end
    end
  end
  local function utf8(cp)
    if cp >= 0xD800 and cp < 0xE000 then return REPLACEMENT end  -- a lone surrogate
    if cp < 0x80 then return string.char(cp) end
    if cp < 0x800 then return string.char(0xC0 + rshift(cp, 6), 0x80 + band(cp, 0x3F)) end
    if cp < 0x10000 then
      return string.char(0xE0 + rshift(cp, 12), 0x80 + band(rshift(cp, 6), 0x3F), 0x80 + band(cp, 0x3F))
    end
    return string.char(0xF0 + rshift(cp, 18), 0x80 + band(rshift(cp, 12), 0x3F),
      0x80 + band(rshift(cp, 6), 0x3F), 0x80 + band(cp, 0x3F))
  end
  local value
  local function str()
    local start = pos
    pos = pos + 1
    local parts = {}
    while true do
      if pos > n then error("unterminated string") end
      local c = s:sub(pos, pos)
      if c == '"' then pos = pos + 1; break end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        local map = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}
        if map[e] then
          parts[#parts + 1] = map[e]; pos = pos + 2
        elseif e == "u" then
          local cp = tonumber(s:sub(pos + 2, pos + 5), 16)
          if not cp then error("bad \\u escape") end
          pos = pos + 6
          if cp >= 0xD800 and cp < 0xDC00 and s:sub(pos, pos + 1) == "\\u" then
            local lo = tonumber(s:sub(pos + 2, pos + 5), 16)
            if lo and lo >= 0xDC00 and lo < 0xE000 then
              cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00); pos = pos + 6
            end
          end
          parts[#parts + 1] = utf8(cp)
        else
          error("bad escape")
        end
      else
        local stop = s:find('["\\]', pos)
        if not stop then error("unterminated string") end
        parts[#parts + 1] = s:sub(pos, stop - 1); pos = stop
      end
    end
    return {t = "string", v = table.concat(parts), s = start, e = pos - 1}
  end
  local function atom()
    local start = pos
    local word = s:match("^[%w%.%+%-_]+", pos)
    if not word then error("unexpected character at " .. pos) end
    pos = pos + #word
    if word == "true" or word == "false" then return {t = "bool", v = word, s = start, e = pos - 1} end
    if word == "null" then return {t = "null", v = "null", s = start, e = pos - 1} end
    if tonumber(word) then return {t = "number", v = word, s = start, e = pos - 1} end
    return {t = "word", v = word, s = start, e = pos - 1}
  end
  value = function(depth)
    if depth > 64 then error("nested too deep") end
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local node = {t = "object", v = {}, s = pos}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1; node.e = pos - 1; return node end
      while true do
        ws()
        local key = s:sub(pos, pos) == '"' and str() or atom()
        ws()
        if s:sub(pos, pos) ~= ":" then error("expected ':' at " .. pos) end
        pos = pos + 1
        local v = value(depth + 1)
        node.v[#node.v + 1] = {k = key, v = v}
        ws()
        local sep = s:sub(pos, pos); pos = pos + 1
        if sep == "}" then break end
        if sep ~= "," then error("expected ',' or '}' at " .. (pos - 1)) end
      end
      node.e = pos - 1
      return node
    elseif c == "[" then
      local node = {t = "array", v = {}, s = pos}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1; node.e = pos - 1; return node end
      while true do
        node.v[#node.v + 1] = value(depth + 1)
        ws()
        local sep = s:sub(pos, pos); pos = pos + 1
        if sep == "]" then break end
        if sep ~= "," then error("expected ',' or ']' at " .. (pos - 1)) end
      end
      node.e = pos - 1
      return node
    elseif c == '"' then
      return str()
    end
    return atom()
  end
  local root = value(0)
  return root
end

local function json_text(node)
  if node.t == "string" then return node.v end
  return node.v
end

local function obj_get(node, key)
  if node.t ~= "object" then return nil end
  for _, kv in ipairs(node.v) do
    if kv.k.v == key then return kv.v end
  end
  return nil
end

-- ---------------------------------------------------------------------------------------------
-- Generic walker over the declaration tables.

local HOOK = {}

local function read_int(range, d)
  if d.wide then
    local v = d.signed and range:int64() or range:uint64()
    return v:tonumber()
  end
  if d.signed then return range:int() end
  return range:uint()
end

local walk_struct

-- Reads one declared field at off (relative to tvb) into ctx[name]; returns the new offset.
local function walk(d, name, tvb, off, tree, ctx, env)
  local kind = d.kind
  if kind == "if" then
    return walk(d.cond(ctx) and d.yes or d.no, name, tvb, off, tree, ctx, env)
  elseif kind == "switch" then
    local case = d.cases[d.key(ctx)]
    if not case then error("no case for " .. name) end
    return walk(case, name, tvb, off, tree, ctx, env)
  elseif kind == "int" then
    local range = tvb(off, d.size)
    ctx[name] = read_int(range, d)
    ctx["@" .. name] = tree:add(d.f, range)
    return off + d.size
  elseif kind == "bytes" then
    local len = d.len(ctx)
    if len < 0 then error(name .. " length " .. len .. " is negative") end
    local range = tvb(off, len)
    ctx[name] = range
    if len > 0 then ctx["@" .. name] = tree:add(d.f, range) end
    return off + len
  elseif kind == "greedybytes" then
    local len = tvb:len() - off
    local range = tvb(off, len)
    ctx[name] = range
    if len > 0 then tree:add(d.f, range) end
    return off + len
  elseif kind == "pstring" then
    local lr = tvb(off, d.prefix)
    local len = d.signed and lr:int() or lr:uint()
    if len < 0 then error(name .. " length " .. len .. " is negative") end
    local range = tvb(off, d.prefix + len)
    local text = len > 0 and utf8_clean(tvb(off + d.prefix, len):raw()) or ""
    ctx[name] = text
    ctx["@" .. name] = tree:add(d.f, range, text)
    ctx["^" .. name] = off
    ctx["$" .. name] = off + d.prefix + len
    return off + d.prefix + len
  elseif kind == "array" then
    local count = tvb(off, d.prefix):int()
    tree:add(d.count_f, tvb(off, d.prefix))
    off = off + d.prefix
    local items = {}
    for i = 1, count do
      local sub = {}
      off = walk(d.item, "item", tvb, off, tree, sub, env)
      items[i] = sub.item
    end
    ctx[name] = items
    return off
  elseif kind == "prefixed" then
    local len = tvb(off, d.prefix):int()
    if len < 0 then error(name .. " length " .. len .. " is negative") end
    local item = tree:add(d.f, tvb(off, d.prefix + len))
    item:add(d.length_f, tvb(off, d.prefix))
    local stop = off + d.prefix + len
    off = off + d.prefix
    local list = {}
    while off < stop do
      local sub
      off, sub = walk_struct(d.each, tvb(0, stop):tvb(), off, item, env)
      list[#list + 1] = sub
    end
    ctx[name] = list
    ctx["@" .. name] = item
    return stop
  end
  error("unknown declaration kind " .. tostring(kind))
end

walk_struct = function(name, tvb, off, tree, env)
  local ctx = {}
  for _, entry in ipairs(STRUCTS[name]) do
    off = walk(entry.d, entry.name, tvb, off, tree, ctx, env)
    if entry.hook then HOOK[entry.hook](ctx, entry.name, tree, env, tvb) end
  end
  return off, ctx
end

-- ---------------------------------------------------------------------------------------------
-- Presentation hooks.

local function code_name(code, flag)
  if band(flag, RESPONSE_FLAG) ~= 0 then return RESPONSE_CODES[code] or tostring(code) end
  return REQUEST_CODES[code] or tostring(code)
end

local function add_ext(tree, key, value, range, env)
  local label = key .. ": " .. value
  local named = F["rocketmq.ext." .. key]
  local item
  if named then
    item = tree:add(named, range, value)
  else
    item = tree:add(F["rocketmq.ext"], range, label)
    item:set_text(clip(label, LABEL_MAX))
  end
  local hidden = item:add(F["rocketmq.ext_key"], range, key)
  hidden:set_hidden()
  hidden = item:add(F["rocketmq.ext_value"], range, value)
  hidden:set_hidden()
  env.ext[key] = value
  env.ext_items[key] = item
end

HOOK.ext_value = function(ctx, name, tree, env, tvb)
  -- the ExtField's own key and value items stay (hidden); one readable line shows the pair
  ctx["@key"]:set_hidden()
  ctx["@value"]:set_hidden()
  add_ext(tree, ctx.key, ctx.value, tvb(ctx["^key"], ctx["$value"] - ctx["^key"]), env)
end

local function add_properties(tree, text, range)
  if text == nil or text == "" then return end
  local sub = tree:add(F["rocketmq.property"], range, "properties")
  sub:set_text("Properties")
  for pair in (text .. PROPERTY_SEPARATOR):gmatch("(.-)" .. PROPERTY_SEPARATOR) do
    local k, v = pair:match("^(.-)" .. NAME_VALUE_SEPARATOR .. "(.*)$")
    if k and k ~= "" and v ~= "" then
      local named = F["rocketmq.prop." .. k]
      if named then
        sub:add(named, range, v)
      else
        sub:add(F["rocketmq.property"], range, k .. "=" .. v)
      end
    end
  end
end

HOOK.properties = function(ctx, name, tree, env, tvb)
  local item = ctx["@" .. name]
  if ctx[name] ~= "" then
    add_properties(item, ctx[name], tvb(ctx["^" .. name], ctx["$" .. name] - ctx["^" .. name]))
  end
end

local function sysflag_text(flag)
  local names = {}
  for _, bit in ipairs(SYSFLAG_BITS) do
    if band(flag, bit[3]) == bit[2] then names[#names + 1] = bit[1] end
  end
  return table.concat(names, "|")
end

-- A message body that is UTF-8 text without control characters (but tab and newlines) is shown as text.
local function add_text(tree, range, raw)
  if raw:find("[\0-\8\11\12\14-\31\127]") then return end
  if utf8_clean(raw) ~= raw then return end
  tree:add(F["rocketmq.body_text"], range, clip(raw, LABEL_MAX))
end

local function show_body(tree, range, sys_flag, pinfo)
  if range:len() == 0 then return end
  if not (sys_flag and band(sys_flag, COMPRESSED) ~= 0) then add_text(tree, range, range:raw()) end
  if sys_flag and band(sys_flag, COMPRESSED) ~= 0 then
    local kind = band(sys_flag, COMPRESSION_MASK)
    if kind == 0 then kind = ZLIB end
    local item = tree:add(F["rocketmq.compressed"], range, true)
    item:add_proto_expert_info(E_COMPRESSED)
    if kind == ZLIB then
      local ok, inflated = pcall(function() return range:uncompress("Inflated body") end)
      if ok and inflated then
        item:append_text(" (zlib, " .. inflated:len() .. " bytes inflated)")
        add_text(item, inflated, inflated:raw())
      else
        item:append_text(" (zlib, does not inflate)")
      end
    else
      item:append_text(" (compression type " .. kind .. ")")
    end
  end
end

HOOK.message_body = function(ctx, name, tree, env)
  local range = ctx[name]
  local item = ctx["@" .. name]
  if ctx.sys_flag then
    local names = sysflag_text(ctx.sys_flag)
    if names ~= "" then ctx["@sys_flag"]:append_text(" (" .. names .. ")") end
  end
  show_body(item, range, ctx.sys_flag, env.pinfo)
end

-- ---------------------------------------------------------------------------------------------
-- JSON bodies and headers.

local function json_tree(tree, node, tvb, base, label)
  local range = tvb(base + node.s - 1, node.e - node.s + 1)
  if node.t == "object" or node.t == "array" then
    local sub = tree:add(F["rocketmq.json"], range, label or "")
    sub:set_text(clip(label and (label .. ": ") or "", LABEL_MAX) .. (node.t == "object" and "{...}" or ("[" .. #node.v .. "]")))
    for i, child in ipairs(node.v) do
      if node.t == "object" then
        json_tree(sub, child.v, tvb, base, child.k.v)
      else
        json_tree(sub, child, tvb, base, "[" .. (i - 1) .. "]")
      end
    end
    return sub
  end
  local named = label and F["rocketmq.json." .. label]
  if named then return tree:add(named, range, json_text(node)) end
  local item = tree:add(F["rocketmq.json"], range, json_text(node))
  if label then item:set_text(clip(label .. ": " .. json_text(node), LABEL_MAX)) end
  return item
end

local function json_body(tree, range, decl)
  local text = utf8_clean(range:raw())
  local ok, node = pcall(json_parse, text)
  if decl then tree:add(F["rocketmq.body_type"], range, decl) end
  if ok then
    json_tree(tree, node, range:tvb(), 0, decl or "JSON body")
  else
    local bad = tree:add(F["rocketmq.json"], range, text)
    bad:set_text("JSON (does not parse): " .. clip(text, LABEL_MAX))
  end
end

local function dissect_json_header(tvb, off, len, tree, env)
  local range = tvb(off, len)
  local text = utf8_clean(range:raw())
  local root = json_parse(text)
  if root.t ~= "object" then error("JSON header is not an object") end
  local ctx = {language = LANGUAGE_DEFAULT, version = 0, opaque = 0, flag = 0}
  local sub = tree:add(F["rocketmq.json_header"], range, text)
  sub:set_text("JSON: " .. clip(text, 120))
  for _, kv in ipairs(root.v) do
    local key, node = kv.k.v, kv.v
    local r = tvb(off + node.s - 1, node.e - node.s + 1)
    local field = JSON_KEYS[key]
    if field == "ext_fields" and node.t == "object" then
      local ext = sub:add(F["rocketmq.ext"], r, "extFields")
      ext:set_text("extFields")
      for _, e in ipairs(node.v) do
        if e.v.t ~= "null" then
          local v = json_text(e.v)
          if e.v.t == "object" or e.v.t == "array" then v = text:sub(e.v.s, e.v.e) end
          add_ext(ext, e.k.v, v, tvb(off + e.v.s - 1, e.v.e - e.v.s + 1), env)
        end
      end
    elseif field == "language" then
      local lang = tonumber(node.v)
      if not lang then
        lang = 7
        for num, name in pairs(LANGUAGES) do if name == node.v then lang = num end end
      end
      ctx.language = lang
      sub:add(F_LANGUAGE, r, lang)
    elseif field == "remark" then
      if node.t ~= "null" then
        ctx.remark = json_text(node)
        sub:add(F["rocketmq.remark"], r, ctx.remark)
      end
    elseif field and field ~= "" and F["rocketmq." .. field] then
      local v = tonumber(node.v) or 0
      ctx[field] = v
      ctx["@" .. field] = sub:add(F["rocketmq." .. field], r, v)
    elseif key == "serializeTypeCurrentRPC" then
      sub:add(F["rocketmq.serialize_type_current_rpc"], r, json_text(node))
    else
      json_tree(sub, node, tvb, off, key)
    end
  end
  if ctx.code == nil then error("JSON header has no code") end
  return ctx
end

-- ---------------------------------------------------------------------------------------------
-- Frames.

local function why(err)
  return (tostring(err):gsub("^[^:]*:%d+: ", ""))
end

local requests = {}  -- "stream:opaque" -> {code, frame number}

function rmq.init()
  requests = {}
end

local function body_of(tree, range, ctx, env, pinfo)
  local response = band(ctx.flag, RESPONSE_FLAG) ~= 0
  local code = ctx.code
  local kind, decl
  if response then
    local req = env.request
    if req and code == 0 then
      kind = RESPONSE_BODIES[req.code]
      decl = JSON_RESPONSE_BODIES[req.code]
    end
  else
    kind = REQUEST_BODIES[code]
    decl = JSON_REQUEST_BODIES[code]
  end
  local item = env.body_item
  if kind == "message" then
    local sys_flag, props
    for key, attr in pairs(SEND_HEADER_FIELDS) do
      if env.ext[key] then
        if attr == "sys_flag" then sys_flag = tonumber(env.ext[key]) end
        if attr == "properties" then props = key end
      end
    end
    if sys_flag then
      local bits = item:add(F["rocketmq.sysflag_bit"], range, sysflag_text(sys_flag))
      local names = sysflag_text(sys_flag)
      bits:set_text("sysFlag: " .. sys_flag .. (names ~= "" and (" (" .. names .. ")") or ""))
    end
    show_body(item, range, sys_flag, pinfo)
    if props then add_properties(env.ext_items[props], env.ext[props], range) end
  elseif kind == "StoredMessage" or kind == "BatchMessage" then
    local tvb = range:tvb()
    local off = 0
    local stop = range:len()
    local n = 0
    while off < stop do
      local size = tvb(off, 4):int()
      if size <= 0 or off + size > stop then error(kind .. " size " .. size .. " overruns the body") end
      n = n + 1
      local sub = item:add(rmq, tvb(off, size), kind .. " " .. n)
      walk_struct(kind, tvb(0, off + size):tvb(), off, sub, env)
      off = off + size
    end
    item:add(F["rocketmq.messages"], range, n)
  elseif kind == "RegisterBrokerBody" and env.ext.compressed == "true" then
    item:add(F["rocketmq.body_type"], range, "RegisterBrokerBody (compressed)")
    local inflated = range:uncompress("Inflated RegisterBrokerBody")
    if inflated then
      local sub = item:add(rmq, inflated, "CompressedRegisterBrokerBody")
      walk_struct("CompressedRegisterBrokerBody", inflated:tvb(), 0, sub, env)
    end
  else
    local first = range(0, 1):uint()
    if first == 123 or first == 91 then json_body(item, range, decl) end  -- '{' or '['
  end
end

local function dissect_frame(tvb, pinfo, root)
  local len = tvb:len()
  local tree = root:add(rmq, tvb(0, len))
  local env = {pinfo = pinfo, ext = {}, ext_items = {}, range = tvb(0, len)}
  local word = tvb(4, 4):uint()
  local serialize = rshift(word, SERIALIZE_SHIFT)
  local header_length = band(word, HEADER_LENGTH_MASK)
  local _, frame = walk_struct("Frame", tvb, 0, tree, env)
  frame["@header_word"]:add(F["rocketmq.serialize"], tvb(4, 1), serialize)
  frame["@header_word"]:add(F["rocketmq.header_length"], tvb(5, 3), header_length)
  env.body_item = frame["@body"]
  local htree = frame["@header"] or tree
  local ctx
  local ok, err = pcall(function()
    if serialize == JSON_SERIALIZE then
      ctx = dissect_json_header(tvb, 8, header_length, htree, env)
    else
      local htvb = tvb(0, 8 + header_length):tvb()
      local stop
      stop, ctx = walk_struct("RocketMQHeader", htvb, 8, htree, env)
      if stop ~= 8 + header_length then error("ROCKETMQ header has trailing bytes") end
    end
  end)
  if not ok then
    tree:add_proto_expert_info(E_MALFORMED, "header: " .. why(err))
    pinfo.cols.info:append(" [malformed header]")
    return
  end
  local flag = ctx.flag
  local response = band(flag, RESPONSE_FLAG) ~= 0
  local name = code_name(ctx.code, flag)
  if ctx["@code"] then ctx["@code"]:append_text(" (" .. name .. ")") end
  local gen = tree:add(F["rocketmq.code_name"], tvb(8, header_length), name)
  gen:set_generated()
  local flag_tree = ctx["@flag"] or tree
  gen = flag_tree:add(F["rocketmq.flag.response"], tvb(8, header_length), response)
  gen:set_generated()
  gen = flag_tree:add(F["rocketmq.flag.oneway"], tvb(8, header_length), band(flag, ONEWAY_FLAG) ~= 0)
  gen:set_generated()
  local stream = f_tcp_stream()
  local key = tostring(stream and stream.value or 0) .. ":" .. ctx.opaque
  if response then
    env.request = requests[key]
    if env.request then
      gen = tree:add(F["rocketmq.request_in"], tvb(0, 0), env.request.frame)
      gen:set_generated()
      gen = tree:add(F["rocketmq.response_to_code"], tvb(0, 0), code_name(env.request.code, 0))
      gen:set_generated()
    end
  else
    requests[key] = {code = ctx.code, frame = pinfo.number}
  end
  local kind = response and "Response" or (band(flag, ONEWAY_FLAG) ~= 0 and "Oneway" or "Request")
  local summary = kind .. " " .. name .. " opaque=" .. ctx.opaque
  if ctx.remark and ctx.remark ~= "" then summary = summary .. " remark=" .. clip(ctx.remark, 60) end
  tree:append_text(", " .. summary)
  pinfo.cols.info:append(summary .. "; ")
  local body_start = 8 + header_length
  if len > body_start then
    local ok2, err2 = pcall(body_of, tree, tvb(body_start, len - body_start), ctx, env, pinfo)
    if not ok2 then tree:add_proto_expert_info(E_MALFORMED, "body: " .. why(err2)) end
  end
end

local PREFIX = 8

local function plausible(length, word)
  local header_length = band(word, HEADER_LENGTH_MASK)
  return length >= 4 and length + 4 <= MAX_FRAME and header_length <= length - 4
    and rshift(word, SERIALIZE_SHIFT) <= ROCKETMQ_SERIALIZE
end

function rmq.dissector(tvb, pinfo, tree)
  local total = tvb:len()
  local off = 0
  local first = true
  while off < total do
    local remain = total - off
    if remain < PREFIX then
      pinfo.desegment_offset = off
      pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
      return total
    end
    local length = tvb(off, 4):uint()
    local word = tvb(off + 4, 4):uint()
    if not plausible(length, word) then
      if off == 0 then return 0 end
      return off
    end
    if remain < length + 4 then
      if tvb:reported_length_remaining(off) > remain then  -- cut by the snapshot length
        tree:add(rmq, tvb(off, remain)):add_proto_expert_info(E_MALFORMED, "frame cut short by the capture")
        return total
      end
      pinfo.desegment_offset = off
      pinfo.desegment_len = length + 4 - remain
      return total
    end
    if first then
      pinfo.cols.protocol = "RocketMQ"
      pinfo.cols.info:clear()
      first = false
    end
    local ok, err = pcall(dissect_frame, tvb(off, length + 4):tvb(), pinfo, tree)
    if not ok then tree:add_proto_expert_info(E_MALFORMED, why(err)) end
    off = off + length + 4
  end
  return off
end

local function heuristic(tvb, pinfo, tree)
  if tvb:len() < PREFIX + 1 then return false end
  local length = tvb(0, 4):uint()
  local word = tvb(4, 4):uint()
  if not plausible(length, word) then return false end
  local serialize = rshift(word, SERIALIZE_SHIFT)
  local header_length = band(word, HEADER_LENGTH_MASK)
  if header_length == 0 then return false end
  -- the first segment may hold only the start of the header: judge what is there
  local avail = math.min(header_length, tvb:len() - PREFIX)
  if serialize == JSON_SERIALIZE then
    local head = tvb(PREFIX, avail):string()
    if head:sub(1, 1) ~= "{" then return false end
    if avail == header_length and not head:find('"code"', 1, true) then return false end
    if avail > 1 and not head:find('^{%s*"') then return false end
  elseif avail >= 3 and not LANGUAGES[tvb(PREFIX + 2, 1):uint()] then
    return false
  end
  pinfo.conversation = rmq
  rmq.dissector(tvb, pinfo, tree)
  return true
end

local tcp_port = DissectorTable.get("tcp.port")
for _, port in ipairs(PORTS) do tcp_port:add(port, rmq) end
rmq:register_heuristic("tcp", heuristic)
"""
