"""Consumer filter data: each group's compiled SQL92 expression per topic (``ConsumerFilterManager``,
``ConsumerFilterData``), and the pull's message filter built from it (``ExpressionMessageFilter``,
``ExpressionForRetryMessageFilter``).

A heartbeat's non-TAG subscriptions register here (compiled once per group, topic and subVersion);
a pull with the subscription flag compiles its expression through the same text-keyed cache. A group
that loses its last client leaves its filter data marked dead, as Java's does (a retry-topic filter
still finds it). rmqgate does not persist it (Java's consumerFilter.json) nor keep bloom-filter bits.
"""

from __future__ import annotations

import array
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmqgate.server.filter import CompiledExpression, FilterParseError, compile_expression, is_tag_type
from rmqgate.server.topics import RETRY_GROUP_TOPIC_PREFIX
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

    def to_json(self) -> dict[str, Any]:
        """fastjson's ConsumerFilterData (what GET_CONSUMER_RUNNING_INFO's relay shows); no bloom bits."""
        return {
            "bloomFilterData": bloom_filter_data(f"{self.consumer_group}#{self.topic}"),
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


def bloom_filter_data(key: str, error_rate_percent: int = 20, expected: int = 32) -> dict[str, Any]:
    """``BloomFilter.createByFn(maxErrorRateOfBloomFilter, expectConsumerNumUseFilter).generate(key)``
    as fastjson writes the BloomFilterData a ConsumerFilterData carries (rmqgate keeps no bit maps;
    this is what queryCq shows)."""
    rate = error_rate_percent / 100.0
    k = math.ceil(math.log(rate) / math.log(0.5))
    m = math.ceil(expected * (math.log(1 / rate) / math.log(2)) * (math.log(math.e) / math.log(2)))
    m = int(8 * math.ceil(m / 8.0))
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


class ConsumerFilterManager:
    def __init__(self) -> None:
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

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

    def register(self, topic: str, group: str, expression: str, expression_type: str, version: int) -> bool:
        """``FilterDataMapByTopic.register``: a newer subVersion with another expression recompiles
        (one that no longer compiles drops the old data, so the client's pulls learn of it); the same
        version revives dead data."""
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
            return False
        by_group[group] = data
        return True

    def unregister(self, group: str) -> None:
        """The group lost its last client: its filter data is dead (kept, as Java keeps it a day)."""
        now = _now()
        for by_group in self.by_topic.values():
            data = by_group.get(group)
            if data is not None and not data.dead:
                data.dead_time = now


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
