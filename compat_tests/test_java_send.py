"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) sending in every mode, run on
rmqgate and on the Java 4.9.8 broker at once; the outcome must match check by check."""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS

pytestmark = [pytest.mark.slow, pytest.mark.java]


@BY_CLIENT
@BY_HEADERS
def test_sync_async_oneway_and_batch_sends(broker_pair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run("SendModes", version, serialization, {"topic": topic, "group": uniq("pg")})
    broker_pair.assert_same(results, differences=BATCH_IDS if version == 5 else None)


# The 5.3.3 client's send(List) gives the batch a UNIQ_KEY of its own besides each message's, and its
# SendResult lists the messages' ids. 4.9.8 (like 5.3.3's MessageExtEncoder) appends the request's
# properties after each message's, so the batch's id comes second and every message of the batch is
# consumed under it; rmqgate leaves the batch's id out (server/send.py), so each keeps its own.
BATCH_IDS = {
    "a consumed message's msgId is the one its send returned": (
        "a 5.x client's batch: rmqgate stores each message under its own id, 4.9.8 under the batch's"
    ),
}
