"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) subscribing with SQL92
expressions (MessageSelector.bySql) - push, pull and lite pull over user properties and TAGS, and
expressions that do not parse - run on rmqgate and on the Java 4.9.8 broker at once, both with
enablePropertyFilter=true; the outcome must match check by check, and each consumer must have got
the same messages on both."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqgate.compat_tests import java
from rmqgate.compat_tests.conftest import started_pair
from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS, BrokerPair
from rmqgate.compat_tests.servers import BROKER_CONF
from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    WireClient,
    decode_messages,
    dumps,
    heartbeat_body,
    loads,
)
from rmqgate.wire.codes import RequestCode, ResponseCode

pytestmark = [pytest.mark.slow, pytest.mark.java]


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


OFF = ("enablePropertyFilter = true", "enablePropertyFilter = false")


@pytest.fixture(scope="module")
def filter_off_pair(
    java_classes: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerPair]:
    """Both brokers with enablePropertyFilter=false (the default)."""
    assert OFF[0] in BROKER_CONF and "enablePropertyFilter=true" in java.JAVA_BROKER_CONF
    java_conf = java.JAVA_BROKER_CONF.replace("enablePropertyFilter=true", "enablePropertyFilter=false")
    workdir = tmp_path_factory.mktemp("sql92-off-pair")
    with started_pair(
        workdir, java_classes, gate_conf=BROKER_CONF.replace(*OFF), java_conf=java_conf
    ) as pair:
        yield pair


@pytest.fixture(scope="module")
def retry_filter_pair(
    java_classes: dict[int, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerPair]:
    """Both brokers with enablePropertyFilter=true and filterSupportRetry=true."""
    with started_pair(
        tmp_path_factory.mktemp("sql92-retry-pair"),
        java_classes,
        gate_conf=BROKER_CONF + "filterSupportRetry = true\n",
        java_conf=java.JAVA_BROKER_CONF + "filterSupportRetry=true\n",
    ) as pair:
        yield pair


def test_retry_topic_filtered_by_the_original_expression_with_filter_support_retry(
    retry_filter_pair: BrokerPair, broker_pair: BrokerPair, uniq
):
    """With filterSupportRetry a group's retry-topic messages are filtered by the SQL92 expression of
    the topic named in their RETRY_TOPIC (ExpressionForRetryMessageFilter): of two put in the retry
    topic only the a=1 one reaches the "a = 1" consumer; without it (the session pair) both do."""
    received = {}
    for label, pair in (("retry", retry_filter_pair), ("plain", broker_pair)):
        topic = uniq()
        pair.create_topic(topic, 4)
        names = {k: uniq(k) for k in ("group", "producerGroup")}
        # routed before the consumer starts: its first route lookup is what finds the retry queue
        pair.create_topic(f"%RETRY%{names['group']}", 1)
        results = pair.run("SqlFilterRetry", 4, "JSON", {"topic": topic, **names})
        pair.assert_same(results)
        got = {broker: result["data"]["received"] for broker, result in results.items()}
        assert got["rmqgate"] == got["java"], (label, got)
        received[label] = got["java"]
    assert received == {"retry": "direct-1,retry-1", "plain": "direct-1,retry-1,retry-2"}


@BY_CLIENT
def test_sql92_refused_with_property_filter_off(filter_off_pair: BrokerPair, uniq, version):
    """With enablePropertyFilter=false 4.9.8 answers CHECK_CLIENT_CONFIG (a push consumer's start)
    and a SQL92 pull SYSTEM_ERROR "The broker does not support consumer to filter message by SQL92";
    its heartbeat still registers the subscription."""
    topic = uniq()
    filter_off_pair.create_topic(topic, 4)
    names = {k: uniq(k) for k in ("group", "group2", "producerGroup")}
    results = filter_off_pair.run("SqlFilterOff", version, "JSON", {"topic": topic, **names})
    filter_off_pair.assert_same(results)
    got = {broker: result["data"] for broker, result in results.items()}
    assert got["rmqgate"] == got["java"]


def _sql92_heartbeat(client_id: str, group: str, topic: str, expression: str, sub_version: int) -> bytes:
    body = loads(heartbeat_body(client_id, consumers=[{"group": group, "topics": {topic: "*"}}]))
    sub = body["consumerDataSet"][0]["subscriptionDataSet"][0]
    sub.update(expressionType="SQL92", subString=expression, subVersion=sub_version, codeSet=[], tagsSet=[])
    return dumps(body)


def test_sql92_group_in_admin_views_and_a_heartbeat_that_does_not_compile(broker_pair: BrokerPair, uniq):
    """A heartbeat's SQL92 subscription as GET_CONSUMER_CONNECTION_LIST (mqadmin consumerConnection)
    and QUERY_CONSUME_QUEUE (mqadmin queryCq: the subscription and the filter data, fastjson's
    pretty-printed ConsumerFilterData with its bloom-filter positions) show it, the same on both
    brokers but for the filter data's bornTime; a group whose heartbeat expression does not compile has no filter data, and its pulls
    are answered FILTER_DATA_NOT_EXIST."""
    topic, group, bad_group = uniq(), uniq("sqlg"), uniq("sqlbad")
    broker_pair.create_topic(topic, 4)
    seen: dict[str, Any] = {}
    for name, cluster in broker_pair.clusters.items():
        with WireClient(cluster.broker) as c:
            sent = c.send_message(topic, b"m", queue_id=0, tags="A", properties={"a": "7"})
            assert sent.code == ResponseCode.SUCCESS, (name, sent.remark)
            for g, expression in ((group, "a > 5 AND TAGS IN ('A', 'B')"), (bad_group, "a = NULL")):
                resp = c.invoke(
                    RequestCode.HEART_BEAT, body=_sql92_heartbeat(uniq("cid"), g, topic, expression, 42)
                )
                assert resp.code == ResponseCode.SUCCESS, (name, resp.remark)
            conn = c.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
            assert conn.code == ResponseCode.SUCCESS, (name, conn.remark)
            cq = c.invoke(
                RequestCode.QUERY_CONSUME_QUEUE,
                {"topic": topic, "queueId": 0, "index": 0, "count": 1, "consumerGroup": group},
            )
            pull = c.invoke(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": bad_group, "topic": topic, "queueId": 0, "queueOffset": 0,
                    "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
                    "subVersion": 42, "expressionType": "SQL92", "subscription": "a = NULL",
                },
            )  # fmt: skip
            cq_body = loads(cq.body) if cq.body else {}
            for unit in cq_body.get("queueData", []):
                del (
                    unit["physicOffset"],
                    unit["physicSize"],
                )  # where the broker's other tests left the CommitLog
            filter_data = cq_body.pop("filterData", None)
            seen[name] = {
                "subscriptions": loads(conn.body)["subscriptionTable"],
                "queryCq": (cq.code, cq_body),
                "filterData": re.sub(r'"bornTime":\d+', '"bornTime":T', filter_data or ""),
                "pull": (pull.code, pull.remark),
            }
    assert seen["rmqgate"] == seen["java"]
    assert seen["java"]["pull"][0] == ResponseCode.FILTER_DATA_NOT_EXIST
    assert "\"expression\":\"a > 5 AND TAGS IN ('A', 'B')\"" in seen["java"]["filterData"]


def test_held_sql92_pull_woken_only_by_a_matching_message(broker_pair: BrokerPair, uniq):
    """A long-polling SQL92 pull on an empty queue stays parked when a message its expression
    rejects arrives (notifyMessageArriving runs the pull's MessageFilter on the message's
    properties) and is answered by the next matching one, with that message only."""
    topic, group = uniq(), uniq("sqlhold")
    broker_pair.create_topic(topic, 1)
    seen: dict[str, Any] = {}
    for name, cluster in broker_pair.clusters.items():
        with WireClient(cluster.broker) as consumer, WireClient(cluster.broker) as producer:
            opaque = consumer.pull(
                group, topic, 0, 0, sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, suspend_ms=20000,
                subscription="a > 5", sub_version=1, extra={"expressionType": "SQL92"}, send_only=True,
            )  # fmt: skip
            early = consumer.poll_response(opaque, 1.0)  # parked: nothing to answer yet
            for a in ("1", "9"):
                sent = producer.send_message(topic, f"a={a}".encode(), queue_id=0, properties={"a": a})
                assert sent.code == ResponseCode.SUCCESS, (name, sent.remark)
            got = early or consumer.wait(opaque, 25)
            bodies = [m.properties.get("a") for m in decode_messages(got.body)] if got.body else []
            seen[name] = (early is None, got.code, bodies)
    assert seen["rmqgate"] == seen["java"], seen
    assert seen["java"] == (True, ResponseCode.SUCCESS, ["9"])
