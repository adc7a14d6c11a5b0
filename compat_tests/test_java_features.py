"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) using the broker's features -
transactions with check-back, delay levels, retry and dead-letter queues, query by key and id, and
reset by time - run on rmqgate and on the Java 4.9.8 broker at once; the outcome must match check
by check, and the properties the broker sets on what it delivers must be the same key for key."""

from __future__ import annotations

from typing import Any

import pytest

from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS, BrokerPair, data, same_property_map

pytestmark = [pytest.mark.slow, pytest.mark.java]


#: Properties whose values differ from run to run or broker to broker (ids, times, addresses): only
#: their presence is compared.
VOLATILE = {
    "UNIQ_KEY",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "ORIGIN_MESSAGE_ID",
    "__transactionId__",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "PGROUP",
    "CLUSTER",
    "REAL_QID",
    "CONSUME_START_TIME",
}


#: Record fields of Stored.meta that depend on which queue the producer picked (at random).
QUEUE_PICKED = {"queueId", "queueOffset"}


def same_properties(results: dict[str, Any], key: str) -> None:
    """The property maps under ``data[key]`` (name -> properties) have the same keys on both
    brokers, and the same values but for VOLATILE ones."""
    by_broker = data(results, key)
    gate, java = by_broker["rmqgate"] or {}, by_broker["java"] or {}
    assert sorted(gate) == sorted(java), by_broker
    for name in java:
        same_property_map(gate[name], java[name], f"{key}[{name}]", VOLATILE)


def same_stored(results: dict[str, Any], key: str, *, single: bool = False) -> None:
    """The record fields under ``data[key]`` (Stored.meta: sysFlag, flag, reconsumeTimes, ...) are
    the same on both brokers but for the queue; ``single`` for one message's, else name -> fields."""
    by_broker = data(results, key)
    if single:
        by_broker = {broker: {key: fields} for broker, fields in by_broker.items()}
    fields = {
        broker: {name: {k: v for k, v in (f or {}).items() if k not in QUEUE_PICKED} for name, f in m.items()}
        for broker, m in by_broker.items()
    }
    assert fields["rmqgate"] == fields["java"], f"{key}: rmqgate {fields['rmqgate']}, java {fields['java']}"


@BY_CLIENT
@BY_HEADERS
def test_transaction_commit_rollback_and_check_back(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("Transaction", version, serialization, {"topic": topic, "group": uniq("txg")})
    broker_pair.assert_same(results)
    same_properties(results, "properties")
    same_stored(results, "stored")
    check_back = data(results, "checkBackProperties")
    same_property_map(check_back["rmqgate"], check_back["java"], "the check-back's message", VOLATILE)
    same_stored(results, "checkBackStored", single=True)


@BY_CLIENT
@BY_HEADERS
def test_delay_levels(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("Delay", version, serialization, {"topic": topic, "group": uniq("dg")})
    broker_pair.assert_same(results)
    same_properties(results, "properties")
    same_stored(results, "stored")


@BY_CLIENT
@BY_HEADERS
def test_retry_then_dead_letter_queue(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("RetryDlq", version, serialization, {"topic": topic, "group": uniq("rg")})
    broker_pair.assert_same(results)
    same_properties(results, "retryProperties")
    same_properties(results, "dlqProperties")
    same_stored(results, "retryStored")
    same_stored(results, "dlqStored")


@BY_CLIENT
@BY_HEADERS
def test_query_by_key_and_view_by_id(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("Query", version, serialization, {"topic": topic, "group": uniq("qg")})
    broker_pair.assert_same(results)
    viewed = data(results, "viewedPropertyKeys")
    assert viewed["rmqgate"] == viewed["java"], viewed
    same_stored(results, "viewedStored")


@BY_CLIENT
@BY_HEADERS
def test_reset_offset_by_time(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 2)
    results = broker_pair.run("ResetByTime", version, serialization, {"topic": topic, "group": uniq("sg")})
    broker_pair.assert_same(results)
    edges = data(results, "searchEdges")
    assert edges["rmqgate"] == edges["java"], edges
