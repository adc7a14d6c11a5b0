"""OFFSET_MOVED_EVENT with the stock Java pull consumer (4.9.8 and 5.3.3, JSON and ROCKETMQ headers)
on rmqgate and on the Java 4.9.8 broker at once: which pulls the broker corrects, and the
OffsetMovedEvent it stores for each (body, properties, record fields), must match."""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS, BrokerPair

pytestmark = [pytest.mark.slow, pytest.mark.java]


@BY_CLIENT
@BY_HEADERS
def test_offset_moved_event(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("OffsetMoved", version, serialization, {"topic": topic, "group": uniq("om")})
    broker_pair.assert_same(results)
    for key in ("pulls", "events"):
        gate, java = (results[b]["data"].get(key) for b in ("rmqgate", "java"))
        assert gate == java, f"{key}: rmqgate {gate}, java {java}"
