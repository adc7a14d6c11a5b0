"""JSON request/response bodies (route data, heartbeats, locks, admin tables), declared once.

A body is a slotted dataclass decorated with ``@json_body``; each field's JSON name is its attribute
in camelCase unless ``jfield(name)`` says otherwise, and its type hint drives decoding: str,
``Integer`` or ``Long`` (the Java type of a number, whose range it must be within), bool, float,
nested bodies, ``list[...]``, ``dict[str|Integer|Long|MessageQueue, ...]``, ``Any`` (kept as
parsed). Decoding is as lenient as fastjson (numbers given as strings, enums as names or ordinals,
missing fields take the Java defaults, unknown fields are ignored) and raises ``BodyError`` naming the
field path on anything else. ``None`` fields are left out when encoding, so optional 5.x fields only
appear when set. Set-typed Java fields (``Set<MessageQueue>`` ...) are lists here.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
import zlib
from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar, TypeVar

from construct import ConstructError, GreedyBytes, Int32sb, PascalString, PrefixedArray, Struct

from rmqgate.wire.codes import LanguageCode
from rmqgate.wire.errors import BodyError
from rmqgate.wire.fastjson import ObjectKey, dumps, loads
from rmqgate.wire.header import Integer, JavaNumber, Long, java_number_of

T = TypeVar("T")
_MISSING = dataclasses.MISSING

# Java enum constant names in ordinal order (fastjson reads an integer as the ordinal).
CONSUME_TYPE = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODEL = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
TOPIC_FILTER_TYPE = ("SINGLE_TAG", "MULTI_TAG")
LANGUAGE_CODE = tuple(lang.name for lang in sorted(LanguageCode))


def jfield(
    name: str | None = None,
    *,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    enum: tuple[str, ...] | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A body field: JSON name, other names accepted when reading, and the enum it holds (if any)."""
    if default is _MISSING and default_factory is _MISSING:
        default = None
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={"json": name, "enum": enum, "aliases": aliases},
    )


# --- the machinery -------------------------------------------------------------------------------

Decoder = Callable[[Any, str], Any]
Encoder = Callable[[Any, bool], Any]
_INT_TEXT = re.compile(r"[+-]?\d+")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _dec_str(value: Any, path: str) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise BodyError(f"{path}: expected a string, got {_type_name(value)}")


def _dec_int(value: Any, path: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        try:
            return int(value)
        except ValueError:  # beyond int's digit limit
            raise BodyError(f"{path}: {value[:40]!r}... is too long for an integer") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise BodyError(f"{path}: expected an integer, got {value!r}")


@cache
def _java_number_decoder(java: JavaNumber) -> Decoder:
    """``_dec_int`` within a Java type's range: fastjson's int and long codecs refuse an overflow
    ("parseInt error" / "parseLong error") instead of wrapping it."""
    low, high = java.low, java.high

    def decode(value: Any, path: str) -> int:
        number = _dec_int(value, path)
        if low <= number <= high:
            return number
        raise BodyError(f"{path}: {number} {java.out_of_range}")

    return decode


def _number_decoder(hint: Any) -> Decoder | None:
    """The decoder of an ``Integer`` or ``Long`` hint; None for any other hint. A bare ``int`` is a
    declaration error: each number says which Java type it is."""
    if hint is int:
        raise TypeError("body number field: declare the Java type, Integer or Long")
    java = java_number_of(hint)
    return None if java is None else _java_number_decoder(java)


def _dec_float(value: Any, path: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise BodyError(f"{path}: expected a number, got {value!r}")


def _dec_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if type(value) is int:
        return value != 0
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise BodyError(f"{path}: expected a boolean, got {value!r}")


def _dec_any(value: Any, path: str) -> Any:
    return value


def _enc_plain(value: Any, browser: bool) -> Any:
    return value


def _enum_decoder(names: tuple[str, ...], enum_name: str) -> Decoder:
    def decode(value: Any, path: str) -> str:
        if isinstance(value, str):
            if value in names:
                return value
            if _INT_TEXT.fullmatch(value):
                value = int(value)
            else:
                raise BodyError(f"{path}: {value!r} is not a {enum_name} name")
        if type(value) is int:
            if 0 <= value < len(names):
                return names[value]
            raise BodyError(f"{path}: {value} is not a {enum_name} ordinal (0..{len(names) - 1})")
        raise BodyError(f"{path}: expected a {enum_name} name or ordinal, got {_type_name(value)}")

    return decode


def _key_decoder(kind: Any) -> Decoder:
    if kind is str:
        return _dec_str
    number = _number_decoder(kind)
    if number is not None:
        return number
    if isinstance(kind, type) and hasattr(kind, "__json_fields__"):

        def decode_object_key(key: Any, path: str) -> Any:
            if isinstance(key, str):  # BrowserCompatible writes object keys as JSON strings
                try:
                    key = loads(key)
                except BodyError as exc:
                    raise BodyError(f"{path}: map key {key!r} is not a JSON object: {exc}") from None
            if isinstance(key, ObjectKey):
                key = key.as_dict()
            return kind.from_obj(key, path)

        return decode_object_key
    raise TypeError(f"unsupported map key type {kind!r}")


def _key_encoder(kind: Any) -> Callable[[Any, bool], Any]:
    if isinstance(kind, type) and hasattr(kind, "__json_fields__"):
        return lambda key, browser: ObjectKey.of(key.to_obj(browser))
    return _enc_plain


def _codec(hint: Any, enum: tuple[str, ...] | None, enum_name: str) -> tuple[Decoder, Encoder]:
    """Decoder and encoder for one type hint (``X | None`` is treated as ``X``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {hint!r}")
        return _codec(args[0], enum, enum_name)
    if enum is not None:
        return _enum_decoder(enum, enum_name), _enc_plain
    if hint is Any:
        return _dec_any, _enc_plain
    if hint is str:
        return _dec_str, _enc_plain
    if hint is bool:
        return _dec_bool, _enc_plain
    number = _number_decoder(hint)
    if number is not None:
        return number, _enc_plain
    if hint is float:
        return _dec_float, _enc_plain
    if isinstance(hint, type) and hasattr(hint, "__json_fields__"):
        body = hint
        return (lambda v, path: body.from_obj(v, path)), (lambda v, browser: v.to_obj(browser))
    if origin is list:
        (item,) = typing.get_args(hint)
        dec_item, enc_item = _codec(item, None, "")

        def decode_list(value: Any, path: str) -> list[Any]:
            if not isinstance(value, list):
                raise BodyError(f"{path}: expected an array, got {_type_name(value)}")
            return [dec_item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        if enc_item is _enc_plain:
            return decode_list, lambda value, browser: list(value)
        return decode_list, lambda value, browser: [enc_item(v, browser) for v in value]
    if origin is dict:
        key_kind, item = typing.get_args(hint)
        dec_key, enc_key = _key_decoder(key_kind), _key_encoder(key_kind)
        dec_item, enc_item = _codec(item, None, "")

        def decode_map(value: Any, path: str) -> dict[Any, Any]:
            if not isinstance(value, dict):
                raise BodyError(f"{path}: expected an object, got {_type_name(value)}")
            out = {}
            for k, v in value.items():
                sub = f"{path}[{k!r}]"
                out[dec_key(k, sub)] = None if v is None else dec_item(v, sub)
            return out

        def encode_map(value: dict[Any, Any], browser: bool) -> dict[Any, Any]:
            return {enc_key(k, browser): enc_item(v, browser) for k, v in value.items() if v is not None}

        return decode_map, encode_map
    raise TypeError(f"unsupported body field type {hint!r}")


class _Field(typing.NamedTuple):
    attr: str
    json: str
    names: tuple[str, ...]  # accepted when reading, preferred first
    decode: Decoder
    encode: Encoder


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class JsonBody:
    """Base of every body; ``@json_body`` fills in ``__json_fields__``."""

    __slots__ = ()
    __json_fields__: ClassVar[tuple[_Field, ...]] = ()

    @classmethod
    def from_obj(cls: type[T], obj: Any, path: str | None = None) -> T:
        """Build from parsed JSON (``dict``); ``path`` names the value in error messages."""
        where = path or cls.__name__
        if not isinstance(obj, dict):
            raise BodyError(f"{where}: expected an object, got {_type_name(obj)}")
        kwargs = {}
        for f in cls.__json_fields__:  # type: ignore[attr-defined]
            for name in f.names:
                value = obj.get(name)
                if value is not None:
                    kwargs[f.attr] = f.decode(value, f"{where}.{name}")
                    break
        return cls(**kwargs)

    def to_obj(self, browser: bool = False) -> dict[str, Any]:
        """The JSON object (``None`` fields left out); ``browser``: for the BrowserCompatible style."""
        out = {}
        for f in self.__json_fields__:
            value = getattr(self, f.attr)
            if value is not None:
                out[f.json] = f.encode(value, browser)
        return out

    @classmethod
    def from_json(cls: type[T], data: bytes | bytearray | memoryview | str | None) -> T:
        """Parse a body and build it; a missing or malformed body is a ``BodyError`` naming the class."""
        name = cls.__name__
        if data is None:
            raise BodyError(f"{name}: missing JSON body")
        try:
            obj = loads(data)
        except BodyError as exc:
            raise BodyError(f"{name}: {exc}") from None
        return cls.from_obj(obj)  # type: ignore[attr-defined, no-any-return]

    def to_json(self, *, quoted_keys: bool = False, pretty: bool = False, sort_keys: bool = True) -> bytes:
        """fastjson's output: legacy style (bare integer keys) or BrowserCompatible (``quoted_keys``).

        ``sort_keys=False`` keeps map entries in insertion order (bean fields are always sorted, as
        fastjson does), e.g. to rewrite a config file exactly as it was read.
        """
        obj = self.to_obj(quoted_keys)
        if not sort_keys:
            obj = _sort_beans(self, obj)
        return dumps(obj, quoted_keys=quoted_keys, pretty=pretty, sort_keys=sort_keys)


def _sort_beans(body: Any, obj: Any) -> Any:
    """Sort the fields of every bean inside ``obj`` (the encoded ``body``), leaving map order alone."""
    if isinstance(body, JsonBody):
        return {
            f.json: _sort_beans(getattr(body, f.attr), obj[f.json])
            for f in sorted(body.__json_fields__, key=lambda f: f.json)
            if f.json in obj
        }
    if isinstance(body, dict) and isinstance(obj, dict):
        values = [v for v in body.values() if v is not None]  # the encoder skipped the None ones
        return {k: _sort_beans(b, o) for (k, o), b in zip(obj.items(), values, strict=True)}
    if isinstance(body, list) and isinstance(obj, list):
        return [_sort_beans(b, o) for b, o in zip(body, obj, strict=True)]
    return obj


B = TypeVar("B", bound=type)


def json_body(cls: B | None = None, *, frozen: bool = False) -> Any:
    """Make ``cls`` a slotted dataclass with JSON codecs (``frozen=True`` for map-key bodies)."""

    def build(cls: B) -> B:
        cls = dataclasses.dataclass(slots=True, frozen=frozen)(cls)
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = []
        for f in dataclasses.fields(cls):
            meta = f.metadata
            name = meta.get("json") or _camel(f.name)
            enum = meta.get("enum")
            decode, encode = _codec(hints[f.name], enum, _camel(f.name))
            fields.append(_Field(f.name, name, (name, *meta.get("aliases", ())), decode, encode))
        cls.__json_fields__ = tuple(fields)
        return cls

    return build if cls is None else build(cls)


# --- common shapes (§3.9) ------------------------------------------------------------------------
@json_body(frozen=True)
class MessageQueue(JsonBody):
    topic: str | None = None
    broker_name: str | None = None
    queue_id: Integer = 0


@json_body
class DataVersion(JsonBody):
    timestamp: Long = 0
    counter: Long = 0
    state_version: Long | None = None  # 5.x


@json_body
class TopicConfig(JsonBody):
    topic_name: str | None = None
    read_queue_nums: Integer = 16
    write_queue_nums: Integer = 16
    perm: Integer = 6
    topic_filter_type: str = jfield(default="SINGLE_TAG", enum=TOPIC_FILTER_TYPE)
    topic_sys_flag: Integer = 0
    order: bool = False
    attributes: dict[str, str] | None = None  # 5.x


@json_body
class TopicConfigSerializeWrapper(JsonBody):
    """GET_ALL_TOPIC_CONFIG body and topics.json."""

    topic_config_table: dict[str, TopicConfig] = jfield(default_factory=dict)
    data_version: DataVersion = jfield(default_factory=DataVersion)


# --- route data (§3.8) ---------------------------------------------------------------------------
@json_body
class QueueData(JsonBody):
    broker_name: str | None = None
    read_queue_nums: Integer = 0
    write_queue_nums: Integer = 0
    perm: Integer = 0
    topic_sys_flag: Integer = jfield(default=0, aliases=("topicSynFlag",))  # topicSynFlag up to 4.8


@json_body
class BrokerData(JsonBody):
    cluster: str | None = None
    broker_name: str | None = None
    broker_addrs: dict[Long, str] = jfield(default_factory=dict)
    zone_name: str | None = None  # 5.x
    enable_acting_master: bool | None = None  # 5.x


@json_body
class TopicRouteData(JsonBody):
    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = jfield(default_factory=list)
    broker_datas: list[BrokerData] = jfield(default_factory=list)
    filter_server_table: dict[str, list[str]] = jfield(default_factory=dict)
    topic_queue_mapping_by_broker: dict[str, Any] | None = None  # 5.x static topics, kept as parsed


@json_body
class ClusterInfo(JsonBody):
    broker_addr_table: dict[str, BrokerData] = jfield(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = jfield(default_factory=dict)


@json_body
class TopicList(JsonBody):
    topic_list: list[str] = jfield(default_factory=list)
    broker_addr: str | None = None


@json_body
class KVTable(JsonBody):
    table: dict[str, str] = jfield(default_factory=dict)


# --- heartbeat and client management (§3.5) ------------------------------------------------------
@json_body
class ProducerData(JsonBody):
    group_name: str | None = None


@json_body
class SubscriptionData(JsonBody):
    class_filter_mode: bool = False
    topic: str | None = None
    sub_string: str | None = None
    tags_set: list[str] = jfield(default_factory=list)
    code_set: list[Integer] = jfield(default_factory=list)
    sub_version: Long = 0
    expression_type: str = "TAG"


@json_body
class ConsumerData(JsonBody):
    group_name: str | None = None
    consume_type: str | None = jfield(enum=CONSUME_TYPE)
    message_model: str | None = jfield(enum=MESSAGE_MODEL)
    consume_from_where: str | None = jfield(enum=CONSUME_FROM_WHERE)
    subscription_data_set: list[SubscriptionData] = jfield(default_factory=list)
    unit_mode: bool = False


@json_body
class HeartbeatData(JsonBody):
    client_id: str | None = jfield("clientID", aliases=("clientId",))
    producer_data_set: list[ProducerData] = jfield(default_factory=list)
    consumer_data_set: list[ConsumerData] = jfield(default_factory=list)
    heartbeat_fingerprint: Integer | None = None  # 5.x
    without_sub: bool | None = jfield("withoutSub", aliases=("isWithoutSub",))  # 5.x


@json_body
class CheckClientRequestBody(JsonBody):
    client_id: str | None = None
    group: str | None = None
    subscription_data: SubscriptionData | None = None
    namespace: str | None = None  # 5.x


@json_body
class LockBatchRequestBody(JsonBody):
    consumer_group: str | None = None
    client_id: str | None = None
    mq_set: list[MessageQueue] = jfield(default_factory=list)
    only_this_broker: bool | None = None  # 5.x


@json_body
class UnlockBatchRequestBody(JsonBody):
    consumer_group: str | None = None
    client_id: str | None = None
    mq_set: list[MessageQueue] = jfield(default_factory=list)
    only_this_broker: bool | None = None  # 5.x


@json_body
class LockBatchResponseBody(JsonBody):
    lock_ok_mq_set: list[MessageQueue] = jfield("lockOKMQSet", default_factory=list)


@json_body
class GetConsumerListByGroupResponseBody(JsonBody):
    consumer_id_list: list[str] = jfield(default_factory=list)


@json_body
class Connection(JsonBody):
    client_id: str | None = None
    client_addr: str | None = None
    language: str | None = jfield(enum=LANGUAGE_CODE)
    version: Integer = 0


@json_body
class ConsumerConnection(JsonBody):
    connection_set: list[Connection] = jfield(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = jfield(default_factory=dict)
    consume_type: str | None = jfield(enum=CONSUME_TYPE)
    message_model: str | None = jfield(enum=MESSAGE_MODEL)
    consume_from_where: str | None = jfield(enum=CONSUME_FROM_WHERE)


@json_body
class ProducerConnection(JsonBody):
    connection_set: list[Connection] = jfield(default_factory=list)


# --- subscription groups and offsets (§3.7, §4.9) ------------------------------------------------
@json_body
class SubscriptionGroupConfig(JsonBody):
    group_name: str | None = None
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: Integer = 1
    retry_max_times: Integer = 16
    broker_id: Long = 0
    which_broker_when_consume_slowly: Long = 1
    notify_consumer_ids_changed_enable: bool = True
    # 5.x additions, written only when set
    consume_message_orderly: bool | None = None
    group_retry_policy: Any = None
    group_sys_flag: Integer | None = None
    consume_timeout_minute: Integer | None = None
    subscription_data_set: Any = None
    attributes: dict[str, str] | None = None


@json_body
class SubscriptionGroupWrapper(JsonBody):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG body and subscriptionGroup.json."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = jfield(default_factory=dict)
    data_version: DataVersion = jfield(default_factory=DataVersion)


@json_body
class ConsumerOffsetSerializeWrapper(JsonBody):
    """GET_ALL_CONSUMER_OFFSET body and consumerOffset.json: ``"topic@group" -> {queueId: offset}``."""

    offset_table: dict[str, dict[Integer, Long]] = jfield(default_factory=dict)


@json_body
class DelayOffsetSerializeWrapper(JsonBody):
    """GET_ALL_DELAY_OFFSET body and delayOffset.json: ``delayLevel -> offset``."""

    offset_table: dict[Integer, Long] = jfield(default_factory=dict)


@json_body
class OffsetMovedEvent(JsonBody):
    """Body of the message a master stores in OFFSET_MOVED_EVENT when a pull's offset was corrected."""

    consumer_group: str | None = None
    message_queue: MessageQueue | None = None
    offset_request: Long = 0
    offset_new: Long = 0


@json_body
class TopicOffset(JsonBody):
    min_offset: Long = 0
    max_offset: Long = 0
    last_update_timestamp: Long = 0


@json_body
class TopicStatsTable(JsonBody):
    offset_table: dict[MessageQueue, TopicOffset] = jfield(default_factory=dict)


@json_body
class OffsetWrapper(JsonBody):
    broker_offset: Long = 0
    consumer_offset: Long = 0
    last_timestamp: Long = 0


@json_body
class ConsumeStats(JsonBody):
    offset_table: dict[MessageQueue, OffsetWrapper] = jfield(default_factory=dict)
    consume_tps: float = 0.0


@json_body
class ConsumeStatsList(JsonBody):
    """GET_BROKER_CONSUME_STATS body: per subscription group, a ConsumeStats per topic it consumes."""

    consume_stats_list: list[dict[str, list[ConsumeStats]]] = jfield(default_factory=list)
    broker_addr: str | None = None
    total_diff: Long = 0


@json_body
class GetConsumerStatusBody(JsonBody):
    """A consumer's GET_CONSUMER_STATUS_FROM_CLIENT answer (``messageQueueTable``) and the broker's
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS answer (``consumerTable``: client id -> its table)."""

    message_queue_table: dict[MessageQueue, Long] = jfield(default_factory=dict)
    consumer_table: dict[str, dict[MessageQueue, Long]] = jfield(default_factory=dict)


@json_body
class ConsumeQueueData(JsonBody):
    physic_offset: Long = 0
    physic_size: Integer = 0
    tags_code: Long = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


@json_body
class QueryConsumeQueueResponseBody(JsonBody):
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] | None = None
    max_queue_index: Long = 0
    min_queue_index: Long = 0


@json_body
class ProducerInfo(JsonBody):
    client_id: str | None = None
    remote_ip: str | None = jfield("remoteIP")
    language: str | None = jfield(enum=LANGUAGE_CODE)
    version: Integer = 0
    last_update_timestamp: Long = 0


@json_body
class ProducerTableInfo(JsonBody):
    """GET_ALL_PRODUCER_INFO body: producer group -> its connections."""

    data: dict[str, list[ProducerInfo]] = jfield(default_factory=dict)


# --- REGISTER_BROKER body (§3.8) -----------------------------------------------------------------
_JavaString = PascalString(Int32sb, "utf8")

#: The inflated form of a compressed RegisterBrokerBody (``compressed=true`` header): the DataVersion
#: JSON, each TopicConfig as "name readQ writeQ perm filterType" ([5.x] + " attributesJSON"), the
#: filterServerList JSON; 5.x appends static-topic mapping sections, kept as ``extra``.
CompressedRegisterBrokerBody = Struct(
    "data_version" / _JavaString,
    "topic_configs" / PrefixedArray(Int32sb, _JavaString),
    "filter_server_list" / _JavaString,
    "extra" / GreedyBytes,
)

MAX_INFLATED_REGISTER_BODY = 256 * 1024 * 1024


_TOPIC_CONFIG_FIELDS = {f.json: f.decode for f in TopicConfig.__json_fields__}


def _topic_config_from_line(line: str, path: str) -> TopicConfig:
    parts = line.split(" ", 5)
    if len(parts) < 5:
        raise BodyError(f"{path}: {line!r} is not 'name readQueueNums writeQueueNums perm filterType'")
    name, read, write, perm, filter_type = parts[:5]
    fields = _TOPIC_CONFIG_FIELDS
    config = TopicConfig(
        topic_name=name,
        read_queue_nums=fields["readQueueNums"](read, f"{path}.readQueueNums"),
        write_queue_nums=fields["writeQueueNums"](write, f"{path}.writeQueueNums"),
        perm=fields["perm"](perm, f"{path}.perm"),
        topic_filter_type=fields["topicFilterType"](filter_type, f"{path}.filterType"),
    )
    if len(parts) == 6 and parts[5]:
        attributes = loads(parts[5])
        config.attributes = _codec(dict[str, str], None, "")[0](attributes, f"{path}.attributes")
    return config


def _topic_config_line(config: TopicConfig) -> str:
    return (
        f"{config.topic_name} {config.read_queue_nums} {config.write_queue_nums} {config.perm} "
        f"{config.topic_filter_type}"
    )


@json_body
class RegisterBrokerBody(JsonBody):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = jfield(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = jfield(default_factory=list)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, compressed: bool) -> RegisterBrokerBody:
        """The body as the header's ``compressed`` flag says it travels."""
        return cls.from_compressed(data) if compressed else cls.from_json(data)

    def encode(self, compressed: bool) -> bytes:
        return self.to_compressed() if compressed else self.to_json()

    @classmethod
    def from_compressed(cls, data: bytes | bytearray | memoryview) -> RegisterBrokerBody:
        """Inflate and read the binary form (TopicConfigs keep only what it carries, like Java)."""
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(bytes(data), MAX_INFLATED_REGISTER_BODY)
        except zlib.error as exc:
            raise BodyError(f"RegisterBrokerBody: not a zlib stream: {exc}") from None
        if inflater.unconsumed_tail:
            raise BodyError(f"RegisterBrokerBody: inflates beyond {MAX_INFLATED_REGISTER_BODY} bytes")
        try:
            parsed = CompressedRegisterBrokerBody.parse(raw)
        except (ConstructError, UnicodeDecodeError, OverflowError, ValueError) as exc:
            raise BodyError(f"RegisterBrokerBody: compressed layout does not parse: {exc}") from None
        path = "RegisterBrokerBody"
        version = DataVersion.from_obj(loads(parsed.data_version), f"{path}.dataVersion")
        table = {}
        for i, line in enumerate(parsed.topic_configs):
            config = _topic_config_from_line(line, f"{path}.topicConfigs[{i}]")
            table[config.topic_name] = config
        filters = _codec(list[str], None, "")[0](loads(parsed.filter_server_list), f"{path}.filterServerList")
        return cls(TopicConfigSerializeWrapper(table, version), filters)

    def to_compressed(self) -> bytes:
        """Java's ``RegisterBrokerBody.encode(true)``: the binary form, deflated at BEST_COMPRESSION."""
        wrapper = self.topic_config_serialize_wrapper
        raw = CompressedRegisterBrokerBody.build(
            {
                "data_version": wrapper.data_version.to_json().decode(),
                "topic_configs": [_topic_config_line(c) for c in wrapper.topic_config_table.values()],
                "filter_server_list": dumps(self.filter_server_list, quoted_keys=False).decode(),
                "extra": b"",
            }
        )
        return zlib.compress(raw, 9)


__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_TYPE",
    "MESSAGE_MODEL",
    "TOPIC_FILTER_TYPE",
    "BrokerData",
    "ClusterInfo",
    "CompressedRegisterBrokerBody",
    "Connection",
    "ConsumeQueueData",
    "ConsumeStats",
    "ConsumeStatsList",
    "ConsumerConnection",
    "ConsumerData",
    "ConsumerOffsetSerializeWrapper",
    "DataVersion",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerStatusBody",
    "HeartbeatData",
    "JsonBody",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageQueue",
    "OffsetWrapper",
    "ProducerConnection",
    "ProducerData",
    "ProducerInfo",
    "ProducerTableInfo",
    "QueryConsumeQueueResponseBody",
    "QueueData",
    "RegisterBrokerBody",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicList",
    "TopicOffset",
    "TopicRouteData",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
    "jfield",
    "json_body",
]
