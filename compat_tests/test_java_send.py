"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) sending in every mode, run on
rmqgate and on the Java 4.9.8 broker at once; the outcome must match check by check."""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.java import CLIENT_VERSIONS, SERIALIZATIONS

pytestmark = [pytest.mark.slow, pytest.mark.java]

BY_CLIENT = pytest.mark.parametrize("version", CLIENT_VERSIONS, ids=lambda v: f"client{v}")
BY_HEADERS = pytest.mark.parametrize("serialization", SERIALIZATIONS)


@BY_CLIENT
@BY_HEADERS
def test_sync_async_oneway_and_batch_sends(broker_pair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("SendModes", version, serialization, {"topic": topic, "group": uniq("pg")})
    broker_pair.assert_same(results)
