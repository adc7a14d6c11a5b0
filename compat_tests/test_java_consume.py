"""Stock Java clients (4.9.8 and 5.3.3, JSON and ROCKETMQ headers) consuming, run on rmqgate and on
the Java 4.9.8 broker at once: push (concurrent and orderly), pull, lite pull, tag filters and
compressed bodies; each program checks what it received, and the outcome must match check by check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rmqgate.compat_tests.java import BY_CLIENT, BY_HEADERS, BrokerPair

pytestmark = [pytest.mark.slow, pytest.mark.java]


#: Why the 5.x lite pull consumer works only on rmqgate: it pulls with LITE_PULL_MESSAGE (361),
#: which 4.9.8 answers REQUEST_CODE_NOT_SUPPORTED and rmqgate serves as PULL_MESSAGE (as 5.x brokers).
LITE_PULL_361 = "the 5.x lite pull consumer pulls with LITE_PULL_MESSAGE (361), which 4.9.8 does not serve"
LITE_PULL_CHECKS = (
    "assign: poll returns every message from the first offsets, once",
    "assign + seek: poll returns every message from the sought offsets, once",
    "assign: each queue's messages come in offset order",
    "assign: tags, user properties and msgIds as sent",
    "subscribe: poll returns every message once",
    "commitSync: committed() is each queue's end",
    "the committed offsets reach the broker",
    "the group's next consumer polls only what was sent after the commit",
)


def run(
    broker_pair: BrokerPair,
    uniq: Callable[..., str],
    main: str,
    version: int,
    serialization: str,
    queues: int = 4,
    **args: Any,
) -> dict[str, dict[str, Any] | Exception]:
    """``compat.<main>`` on both brokers with a fresh topic of ``queues`` queues, two consumer groups
    and a producer group."""
    topic = uniq()
    broker_pair.create_topic(topic, queues)
    names = {"group": uniq("cg"), "group2": uniq("cg2"), "producerGroup": uniq("pg")}
    return broker_pair.run(main, version, serialization, {"topic": topic, "queues": queues, **names, **args})


@BY_CLIENT
@BY_HEADERS
def test_push_concurrently_gets_every_message_once_and_commits_offsets(
    broker_pair, uniq, version, serialization
):
    broker_pair.assert_same(run(broker_pair, uniq, "PushConcurrent", version, serialization))


@BY_CLIENT
@BY_HEADERS
def test_push_orderly_gets_each_order_key_in_send_order(broker_pair, uniq, version, serialization):
    broker_pair.assert_same(run(broker_pair, uniq, "PushOrderly", version, serialization))


@BY_CLIENT
@BY_HEADERS
def test_pull_consumer_offsets_statuses_and_stored_offsets(broker_pair, uniq, version, serialization):
    broker_pair.assert_same(run(broker_pair, uniq, "PullConsumer", version, serialization))


@BY_CLIENT
@BY_HEADERS
def test_lite_pull_assign_seek_subscribe_and_commit(broker_pair, uniq, version, serialization):
    results = run(broker_pair, uniq, "LitePull", version, serialization)
    differences = dict.fromkeys(LITE_PULL_CHECKS, LITE_PULL_361) if version >= 5 else None
    broker_pair.assert_same(results, differences=differences)


@BY_CLIENT
@BY_HEADERS
def test_tag_subscriptions_get_exactly_their_tags(broker_pair, uniq, version, serialization):
    broker_pair.assert_same(run(broker_pair, uniq, "TagFilter", version, serialization))


@BY_CLIENT
@BY_HEADERS
def test_compressed_bodies_arrive_as_sent(broker_pair, uniq, version, serialization):
    broker_pair.assert_same(run(broker_pair, uniq, "Compressed", version, serialization))
