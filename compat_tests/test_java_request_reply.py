"""Request-reply with the stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) on rmqgate
and on the Java 4.9.8 broker at once: DefaultMQProducer.request (sync and with a callback) answered by
a consumer through SEND_REPLY_MESSAGE and pushed back with PUSH_REPLY_MESSAGE_TO_CLIENT, a request
nobody answers, and an answer to a requester that has gone. The outcome must match check by check;
the properties of the replies the requester received, of the requests the replier saw and of the
copies stored in <cluster>_REPLY_TOPIC must match key for key."""

from __future__ import annotations

import pytest

from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS, BrokerPair, data, same_property_map

pytestmark = [pytest.mark.slow, pytest.mark.java]


#: Properties whose values differ from run to run or broker to broker (ids, times, addresses, the
#: cluster's name): only their presence is compared.
VOLATILE = {
    "UNIQ_KEY",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "PUSH_REPLY_TIME",
    "ARRIVE_TIME",
    "CLUSTER",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "CONSUME_START_TIME",
}
#: Stored.meta fields that name the cluster (the topic) or depend on what else the shared reply topic holds.
PLACE = {"topic", "queueId", "queueOffset"}


@BY_CLIENT
@BY_HEADERS
def test_request_reply(broker_pair: BrokerPair, uniq, version, serialization):
    topic = uniq()
    broker_pair.create_topic(topic, 4)
    results = broker_pair.run(
        "RequestReply",
        version,
        serialization,
        {"topic": topic, "group": uniq("rr"), "client": version},
        timeout=180,
    )
    broker_pair.assert_same(results)
    for key in ("asyncReply", "bigReply", "noReply", "lateReplySend", "replySends"):
        by_broker = data(results, key)
        assert by_broker["rmqgate"] == by_broker["java"], f"{key}: {by_broker}"
    props = data(results, "asyncReplyProperties")
    same_property_map(props["rmqgate"], props["java"], "asyncReplyProperties", VOLATILE)
    sync = data(results, "syncReply")
    if version == 4:
        assert sync["rmqgate"] == sync["java"], f"syncReply: {sync}"
        props = data(results, "syncReplyProperties")
        same_property_map(props["rmqgate"], props["java"], "syncReplyProperties", VOLATILE)
    requests = data(results, "requestProperties")
    assert sorted(requests["rmqgate"]) == sorted(requests["java"])
    for body, props in requests["java"].items():
        same_property_map(requests["rmqgate"][body], props, f"the request {body} the replier saw", VOLATILE)
    stored = data(results, "stored")
    gate, java = stored["rmqgate"] or {}, stored["java"] or {}
    assert {k: len(v) for k, v in gate.items()} == {k: len(v) for k, v in java.items()}, stored
    for body, copies in java.items():
        for g, j in zip(gate[body], copies, strict=True):
            assert g["body"] == j["body"]
            same_property_map(g["properties"], j["properties"], f"the stored reply to {body}", VOLATILE)
            gm = {k: v for k, v in g["stored"].items() if k not in PLACE}
            jm = {k: v for k, v in j["stored"].items() if k not in PLACE}
            assert gm == jm, f"the stored reply to {body}: rmqgate {gm}, java {jm}"
