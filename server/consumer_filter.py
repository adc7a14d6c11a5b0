"""Consumer filter data: each group's compiled SQL92 expression per topic (``ConsumerFilterManager``,
``ConsumerFilterData``), and the pull's message filter built from it (``ExpressionMessageFilter``,
``ExpressionForRetryMessageFilter``).

A heartbeat's non-TAG subscriptions register here (compiled once per group, topic and subVersion);
a pull with the subscription flag compiles its expression through the same text-keyed cache. A group
that loses its last client leaves its filter data marked dead, as Java's does (a retry-topic filter
still finds it), and data dead for filterDataCleanTimeSpan is removed. Each change is written to the
store's metadata (``consumer_filter``: one FilterDataMapByTopic per topic, exported as Java's
consumerFilter.json) and read back at start, every entry then dead unless it already was (Java's
``decode``). No bloom-filter bit maps are kept.
"""

from __future__ import annotations

import array
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rmqgate.server.filter import CompiledExpression, FilterParseError, compile_expression, is_tag_type
from rmqgate.server.topics import RETRY_GROUP_TOPIC_PREFIX
from rmqgate.store.meta import CONSUMER_FILTER
from rmqgate.wire.message_const import PROPERTY_RETRY_TOPIC

if TYPE_CHECKING:
    from rmqgate.server.consumer import SubscriptionData

log = logging.getLogger("rmqgate.server.filter")


@functools.lru_cache(maxsize=4096)
def compile_cached(expression_type: str, expression: str) -> CompiledExpression:
    """``SelectorParser``'s parse cache: an expression text is compiled once (errors are not kept)."""
    return compile_expression(expression_type, expression)


def check_expression(expression_type: str | None, expression: str | None) -> None:
    """CHECK_CLIENT_CONFIG's compile of a non-TAG subscription; raises ``FilterParseError``."""
    if expression is None:
        raise FilterParseError("java.lang.NullPointerException", "")
    compile_cached(expression_type or "", expression)


FILTER_DATA_CLEAN_TIME_SPAN = 24 * 3600 * 1000  # BrokerConfig.filterDataCleanTimeSpan's default (ms)
_CLEAN_INTERVAL = 10_000  # Java cleans at each persist, every 10 s
_LOADED_DEAD_AGO = 30_000  # decode: an entry alive when persisted died 30 s before the load


class FilterDataTable(Protocol):
    """Where the filter data is kept (the store's LMDB metadata)."""

    def put(self, db: str, key: str, value: Any) -> None: ...
    def delete(self, db: str, key: str) -> bool: ...
    def items(self, db: str) -> Any: ...


@dataclass(slots=True)
class ConsumerFilterData:
    topic: str
    consumer_group: str
    expression: str
    expression_type: str
    client_version: int
    compiled: CompiledExpression
    born_time: int
    dead_time: int = 0
    #: hash codes of the TAGS values the expression can be true for (None: any), checked against
    #: the ConsumeQueue's tagsCode before a record is read
    tags_codes: frozenset[int] | None = None

    @property
    def dead(self) -> bool:
        return self.dead_time >= self.born_time

    def to_json(self, *, bit_pos_list: bool = False) -> dict[str, Any]:
        """fastjson's ConsumerFilterData (what GET_CONSUMER_RUNNING_INFO's relay shows); no bloom bits.
        ``bit_pos_list``: bitPos as a plain list (for the metadata's JSON) rather than an int[]."""
        bloom = bloom_filter_data(f"{self.consumer_group}#{self.topic}")
        if bit_pos_list:
            bloom["bitPos"] = list(bloom["bitPos"])
        return {
            "bloomFilterData": bloom,
            "bornTime": self.born_time,
            "clientVersion": self.client_version,
            "consumerGroup": self.consumer_group,
            "dead": self.dead,
            "deadTime": self.dead_time,
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
        }


_M64 = (1 << 64) - 1


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def murmur3_128_first_long(data: bytes) -> int:
    """The first (little-endian) long of MurmurHash3 x64 128-bit, seed 0, as Guava's
    ``Hashing.murmur3_128().hashString(s, UTF_8).asLong()`` gives it (unsigned)."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = 0
    n = len(data)
    blocks = n - n % 16
    for at in range(0, blocks, 16):
        k1 = int.from_bytes(data[at : at + 8], "little")
        k2 = int.from_bytes(data[at + 8 : at + 16], "little")
        h1 ^= (_rotl64((k1 * c1) & _M64, 31) * c2) & _M64
        h1 = (_rotl64(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        h2 ^= (_rotl64((k2 * c2) & _M64, 33) * c1) & _M64
        h2 = (_rotl64(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[blocks:]
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl64((k2 * c2) & _M64, 33) * c1) & _M64
        h1 ^= (_rotl64((k1 * c1) & _M64, 31) * c2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix64(h1), _fmix64(h2)
    return (h1 + h2) & _M64


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def bloom_filter_size(error_rate_percent: int = 20, expected: int = 32) -> tuple[int, int]:
    """``BloomFilter.createByFn``'s (m bits, k hash functions)."""
    rate = error_rate_percent / 100.0
    k = math.ceil(math.log(rate) / math.log(0.5))
    m = math.ceil(expected * (math.log(1 / rate) / math.log(2)) * (math.log(math.e) / math.log(2)))
    return int(8 * math.ceil(m / 8.0)), k


def bloom_filter_data(key: str, error_rate_percent: int = 20, expected: int = 32) -> dict[str, Any]:
    """``BloomFilter.createByFn(maxErrorRateOfBloomFilter, expectConsumerNumUseFilter).generate(key)``
    as fastjson writes the BloomFilterData a ConsumerFilterData carries (rmqgate keeps no bit maps;
    this is what queryCq shows)."""
    m, k = bloom_filter_size(error_rate_percent, expected)
    hash64 = murmur3_128_first_long(key.encode("utf-8"))
    hash1, hash2 = _int32(hash64), _int32(hash64 >> 32)
    positions = []
    for i in range(1, k + 1):
        combined = _int32(hash1 + i * hash2)
        if combined < 0:
            combined = ~combined
        positions.append(combined % m)
    return {"bitNum": m, "bitPos": array.array("i", positions)}  # an int[]: one line in PrettyFormat


def build(
    topic: str, group: str, expression: str, expression_type: str, version: int
) -> ConsumerFilterData | None:
    """``ConsumerFilterManager.build``: None for a TAG type or an expression that does not compile."""
    if is_tag_type(expression_type):
        return None
    try:
        compiled = compile_cached(expression_type, expression)
    except FilterParseError as exc:
        log.warning(
            "parse error: expr=%s, topic=%s, group=%s, error=%s", expression, topic, group, exc.remark
        )
        return None
    return ConsumerFilterData(
        topic, group, expression, expression_type, version, compiled, _now(), 0, compiled.implied_tag_codes
    )


def _now() -> int:
    return int(time.time() * 1000)


def clean_time_span(extra: dict[str, Any]) -> int:
    """broker.conf's filterDataCleanTimeSpan (ms; an untyped key), else its default."""
    try:
        return int(str(extra.get("filterDataCleanTimeSpan", FILTER_DATA_CLEAN_TIME_SPAN)).strip())
    except ValueError:
        return FILTER_DATA_CLEAN_TIME_SPAN


def _valid_bloom(data: Any) -> bool:
    """``BloomFilter.isValid`` for this broker's filter size."""
    if not isinstance(data, dict):
        return False
    m, k = bloom_filter_size()
    positions = data.get("bitPos")
    return data.get("bitNum") == m and isinstance(positions, list) and len(positions) == k


class ConsumerFilterManager:
    def __init__(self) -> None:
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}
        self.table: FilterDataTable | None = None
        self.clean_time_span = FILTER_DATA_CLEAN_TIME_SPAN
        self._cleaned = 0

    def load(self, table: FilterDataTable, clean_time_span: int = FILTER_DATA_CLEAN_TIME_SPAN) -> None:
        """Read the persisted filter data (``ConsumerFilterManager.decode``) and write each later
        change to ``table``. Entries alive when written are taken as having died 30 s ago; an entry
        whose bloom filter data does not fit this broker's filter drops all of them, as Java's
        load ignores a file written with another bloom filter."""
        self.table, self.clean_time_span = table, clean_time_span
        now = _now()
        loaded: dict[str, dict[str, ConsumerFilterData]] = {}
        rows = list(table.items(CONSUMER_FILTER))
        for topic, row in rows:
            groups = row.get("groupFilterData") if isinstance(row, dict) else None
            if not isinstance(groups, dict):
                log.error("load filter data error, topic %s: %.200r", topic, row)
                continue
            for group, raw in groups.items():
                if not isinstance(raw, dict):
                    log.error("load filter data error, %s@%s: %.200r", group, topic, raw)
                    continue
                if not _valid_bloom(raw.get("bloomFilterData")):
                    log.info("Bloom filter is changed! So ignore all filter data persisted! %s", raw)
                    for stale, _ in rows:
                        table.delete(CONSUMER_FILTER, stale)
                    return
                data = _from_row(topic, group, raw, now)
                if data is not None:
                    loaded.setdefault(topic, {})[group] = data
        self.by_topic = loaded
        for topic, _ in rows:  # (rewritten as loaded: a row holding nothing loadable is removed)
            self._persist(topic)
        self.clean(now)

    def _persist(self, topic: str) -> None:
        """Write the topic's FilterDataMapByTopic (removed when it holds no group)."""
        table = self.table
        if table is None:
            return
        by_group = self.by_topic.get(topic)
        if not by_group:
            table.delete(CONSUMER_FILTER, topic)
            return
        groups = {g: d.to_json(bit_pos_list=True) for g, d in by_group.items()}
        table.put(CONSUMER_FILTER, topic, {"groupFilterData": groups, "topic": topic})

    def clean(self, now: int | None = None) -> None:
        """``ConsumerFilterManager.clean``: data dead for clean_time_span or longer is removed, and a
        topic left without any."""
        now = _now() if now is None else now
        self._cleaned = now
        for topic, by_group in list(self.by_topic.items()):
            expired = [g for g, d in by_group.items() if d.dead and now - d.dead_time >= self.clean_time_span]
            for group in expired:
                log.info("Remove filter consumer %s, died too long!", by_group[group].to_json())
                del by_group[group]
            if not by_group:
                del self.by_topic[topic]
            if expired or not by_group:
                self._persist(topic)

    def _maybe_clean(self) -> None:
        now = _now()
        if now - self._cleaned >= _CLEAN_INTERVAL:
            self.clean(now)

    def get(self, topic: str | None, group: str) -> ConsumerFilterData | None:
        by_group = self.by_topic.get(topic) if topic is not None else None
        return by_group.get(group) if by_group else None

    def register_group(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """A heartbeat's subscriptions: each registered, and the group's filters on other topics dead."""
        topics = set()
        for sub in subscriptions:
            topics.add(sub.topic)
            self.register(sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version)
        for topic, by_group in self.by_topic.items():
            data = by_group.get(group)
            if data is not None and topic not in topics and not data.dead:
                data.dead_time = _now()
                self._persist(topic)
        self._maybe_clean()

    def register(self, topic: str, group: str, expression: str, expression_type: str, version: int) -> bool:
        """``FilterDataMapByTopic.register``: a newer subVersion with another expression recompiles
        (one that no longer compiles drops the old data, so the client's pulls learn of it); the same
        version revives dead data."""
        changed = self._register(topic, group, expression, expression_type, version)
        if changed:
            self._persist(topic)
        return changed

    def _register(self, topic: str, group: str, expression: str, expression_type: str, version: int) -> bool:
        if is_tag_type(expression_type) or not expression:
            return False
        by_group = self.by_topic.setdefault(topic, {})
        old = by_group.get(group)
        if old is not None and version <= old.client_version:
            if version == old.client_version and old.dead:
                old.dead_time = 0
                return True
            return False
        if old is not None and old.expression == expression and old.expression_type == expression_type:
            old.client_version = version
            old.dead_time = 0
            return True
        data = build(topic, group, expression, expression_type, version)
        if data is None:
            if old is not None:
                del by_group[group]
                self._persist(topic)
            return False
        by_group[group] = data
        return True

    def unregister(self, group: str) -> None:
        """The group lost its last client: its filter data is dead (kept, as Java keeps it a day)."""
        now = _now()
        for topic, by_group in self.by_topic.items():
            data = by_group.get(group)
            if data is not None and not data.dead:
                data.dead_time = now
                self._persist(topic)
        self._maybe_clean()


def _java_long(value: Any) -> int:
    """A persisted long (0 when absent); ValueError or OverflowError when it is no Java long."""
    n = int(value or 0)
    if not -(1 << 63) <= n < 1 << 63:
        raise ValueError(f"{n} is out of a long's range")
    return n


def _from_row(topic: str, group: str, raw: dict[str, Any], now: int) -> ConsumerFilterData | None:
    """A persisted ConsumerFilterData, compiled again (None when it no longer compiles or is not one)."""
    try:
        if raw.get("expression") is None:
            raise KeyError("expression")
        expression, expression_type = str(raw["expression"]), str(raw.get("expressionType") or "")
        born, dead = _java_long(raw.get("bornTime")), _java_long(raw.get("deadTime"))
        version = _java_long(raw.get("clientVersion"))
    except (KeyError, TypeError, ValueError, OverflowError):
        log.error("load filter data error, %s", raw)
        return None
    if is_tag_type(expression_type):
        return None
    try:
        compiled = compile_cached(expression_type, expression)
    except FilterParseError as exc:
        log.error("load filter data error, %s: %s", raw, exc.remark)
        return None
    if dead == 0:  # "we think all consumers are dead when load"
        dead = max(now - _LOADED_DEAD_AGO, born)
    return ConsumerFilterData(
        topic, group, expression, expression_type, version, compiled, born, dead, compiled.implied_tag_codes
    )


def message_filter(
    manager: ConsumerFilterManager,
    sub: SubscriptionData,
    filter_data: ConsumerFilterData | None,
    support_retry: bool,
) -> Callable[[dict[str, str]], bool] | None:
    """The commit-log half of ``ExpressionMessageFilter`` (``ExpressionForRetryMessageFilter`` with
    filterSupportRetry) as a predicate on a message's properties; None when every message that
    passes the tag codes matches."""
    if sub.class_filter_mode:
        return None
    retry = support_retry and sub.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
    if retry:
        group = sub.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        if not any(group in by_group for by_group in manager.by_topic.values()):
            return None  # no filter to find, whatever the message's RETRY_TOPIC

        def retry_matches(properties: dict[str, str]) -> bool:
            data = manager.get(properties.get(PROPERTY_RETRY_TOPIC), group)
            return data is None or data.compiled.matches(properties)

        return retry_matches
    if is_tag_type(sub.expression_type) or filter_data is None:
        return None
    return filter_data.compiled.matches
