"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) subscribing with SQL92
expressions (MessageSelector.bySql) - push, pull and lite pull over user properties and TAGS, and
expressions that do not parse - run on rmqgate and on the Java 4.9.8 broker at once, both with
enablePropertyFilter=true; the outcome must match check by check, and each consumer must have got
the same messages on both."""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.java import CLIENT_VERSIONS, SERIALIZATIONS, BrokerPair

pytestmark = [pytest.mark.slow, pytest.mark.java]

BY_CLIENT = pytest.mark.parametrize("version", CLIENT_VERSIONS, ids=lambda v: f"client{v}")
BY_HEADERS = pytest.mark.parametrize("serialization", SERIALIZATIONS)

LITE_CHECK = (
    "lite pull a IS NULL OR (a > 9 AND TAGS <> 'TagA') OR NOT (a < 11) got exactly its messages, once"
)
#: the 5.x lite pull consumer pulls with LITE_PULL_MESSAGE (361), which 4.9.8 does not serve
LITE_PULL_361 = "the 5.x lite pull consumer pulls with LITE_PULL_MESSAGE (361), which 4.9.8 does not serve"


@BY_CLIENT
@BY_HEADERS
def test_sql92_push_pull_and_lite_pull_get_exactly_their_messages(
    broker_pair: BrokerPair, uniq, version, serialization
):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    names = {k: uniq(k) for k in ("group", "group2", "group3", "group4", "producerGroup")}
    results = broker_pair.run("SqlFilter", version, serialization, {"topic": topic, **names})
    differences = {LITE_CHECK: LITE_PULL_361} if version >= 5 else None
    broker_pair.assert_same(results, differences=differences)
    # what each consumer got, and each refused expression's remark (the compiler's exception text)
    skip = {"lite"} if version >= 5 else set()
    got = {
        broker: {k: v for k, v in result["data"].items() if k not in skip}
        for broker, result in results.items()
    }
    assert got["rmqgate"] == got["java"]
