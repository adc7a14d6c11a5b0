"""Prometheus metrics (server/metrics.py): a live broker's /metrics parsed with prometheus_client's
parser and checked against the admin answers mqadmin reads (consumerProgress, brokerStatus)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmqgate.server.client import RemotingClient
from rmqgate.server.metrics import (
    BUCKETS,
    BrokerSnapshot,
    LatencyHistogram,
    MetricsServer,
    RocketMQCollector,
    TimedProcessor,
    pmdt,
)
from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.server.testing import LocalBroker, async_test, heartbeat, pull_cmd, send_v2
from rmqgate.wire.bodies import ConsumeStats
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import ResponseCode, SerializeType
from rmqgate.wire.command import RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import decode_frame, encode_frame
from rmqgate.wire.serialization import LayoutCommand

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """Every sample by (name, labels), and every family's type."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_histogram_buckets_and_put_distribute_time() -> None:
    h = LatencyHistogram()
    for seconds in (0.00005, 0.0004, 0.0009, 0.003, 0.03, 0.3, 2.5, 30.0):
        h.observe(seconds)
    assert sum(h.counts) == 8
    assert h.counts[0] == 1  # <= 0.1 ms
    assert h.counts[-1] == 1  # above 10 s
    assert abs(h.total - 32.83435) < 1e-9
    assert tuple(sorted(BUCKETS)) == BUCKETS
    assert dict(pmdt(h.counts)) == {
        "0ms": 3, "0to10ms": 1, "10to50ms": 1, "50to100ms": 0, "100to200ms": 0, "200to500ms": 1,
        "500to1s": 0, "1to2s": 0, "2to3s": 1, "3to4s": 0, "4to5s": 0, "5to10s": 0, "10stomore": 1,
    }  # fmt: skip


def _snapshot(broker: str, addr: str) -> BrokerSnapshot:
    return BrokerSnapshot(
        cluster="C",
        broker=broker,
        addr=addr,
        runtime={
            "msgPutTotalTodayNow": "7",
            "putTps": "1.5 2.0 ",
            "bootTimestamp": "1",
            "brokerVersion": "413",
        },
        commitlog_dir_total=100,
        commitlog_dir_free=40,
        broker_put_tps=3.0,
        broker_get_tps=None,
        topics={"T": (7, 0.5), "%RETRY%G": (2, None), "%DLQ%G": (1, None)},
        queues={("T", "G"): [(0, 5, 3, 1200), (1, 2, 2, 0)]},
        group_tps={("T", "G"): 0.25},
        send_latency=([1] + [0] * len(BUCKETS), 0.00005),
        pull_latency=([0] * (len(BUCKETS) + 1), 0.0),
    )


def test_every_broker_is_labelled_by_its_name() -> None:
    collector = RocketMQCollector([], asyncio.new_event_loop())
    families = collector.families([_snapshot("broker-a", "h:1"), _snapshot("broker-b", "h:2")])
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self) -> Any:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    samples, types = parse(generate_latest(registry).decode())
    for b, addr in (("broker-a", "h:1"), ("broker-b", "h:2")):
        assert value(samples, "rocketmq_producer_offset", broker=b, topic="T", cluster="C") == 7
        assert value(samples, "rocketmq_producer_tps", broker=b, topic="T") == 0.5
        assert value(samples, "rocketmq_topic_retry_offset", broker=b, topic="%RETRY%G") == 2
        assert value(samples, "rocketmq_topic_dlq_offset", broker=b, group="G") == 1
        assert value(samples, "rocketmq_consumer_offset", broker=b, topic="T", group="G") == 5
        assert value(samples, "rocketmq_message_accumulation", broker=b, topic="T", group="G") == 2
        assert value(samples, "rocketmq_queue_accumulation", broker=b, group="G", queueid="0") == 2
        assert value(samples, "rocketmq_group_get_latency", broker=b, group="G", queueid="0") == 1200
        assert value(samples, "rocketmq_group_get_latency_by_storetime", broker=b, group="G") == 1200
        assert value(samples, "rocketmq_consumer_tps", broker=b, group="G") == 0.25
        assert value(samples, "rocketmq_broker_tps", broker=b, brokerIP=addr) == 3.0
        rl = {"brokerIP": addr, "boottime": "1", "broker_version": "413"}
        assert value(samples, "rocketmq_brokeruntime_msg_put_total_today_now", **rl) == 7
        assert value(samples, "rocketmq_brokeruntime_put_tps10", **rl) == 1.5
        assert value(samples, "rocketmq_brokeruntime_put_tps60", **rl) == 2.0
        assert value(samples, "rocketmq_brokeruntime_commitlogdir_capacity_free", **rl) == 40
        assert value(samples, "rocketmq_brokeruntime_pmdt_0ms", **rl) == 1
        assert value(samples, "rocketmq_broker_send_latency_seconds_count", broker=b) == 1
    assert not [k for k in samples if k[0] == "rocketmq_brokeruntime_put_tps600"]  # window not covered
    assert not [k for k in samples if k[0] == "rocketmq_broker_qps"]  # no stats item yet
    assert types["rocketmq_broker_send_latency_seconds"] == "histogram"
    assert types["rocketmq_producer_tps"] == "gauge"
    assert types["rocketmq_broker_transaction_checks"] == "counter"


class _Answering(RequestProcessor):
    """A pull processor that finds ``size`` bytes for every pull."""

    codes = (int(R.PULL_MESSAGE),)

    def __init__(self, size: int) -> None:
        self.size = size

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=b"m" * self.size)


def test_pull_bytes_keep_topic_and_group_apart_when_a_name_holds_an_at_sign() -> None:
    timed = TimedProcessor(_Answering(10), LatencyHistogram(), pull=True)
    pulls = (("T@x", "G", 1), ("T", "x@G", 3))  # joined with '@', both would read "T@x@G"
    for topic, group, times in pulls:
        for _ in range(times):
            timed.process(None, pull_cmd(topic, 0, group=group))  # type: ignore[arg-type]
    assert timed.group_bytes == {("T@x", "G"): 10, ("T", "x@G"): 30}
    snap = _snapshot("broker-a", "h:1")
    snap.get_bytes = dict(timed.group_bytes)
    collector = RocketMQCollector([], asyncio.new_event_loop())
    sizes = {
        (s.labels["topic"], s.labels["group"]): s.value
        for family in collector.families([snap])
        if family.name == "rocketmq_consumer_message_size"
        for s in family.samples
    }
    assert set(sizes) == {("T@x", "G"), ("T", "x@G")}
    assert sizes[("T@x", "G")] > 0  # (rates over the same elapsed time)
    assert sizes[("T", "x@G")] == pytest.approx(3 * sizes[("T@x", "G")])


class _Reflecting(RequestProcessor):
    """A pull processor answering with its request itself, made a response with a body."""

    codes = (int(R.PULL_MESSAGE),)

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        request.code, request.flag, request.body = ResponseCode.SUCCESS, RESPONSE_FLAG, b"m" * 7
        return request


def test_an_answer_of_a_command_subclass_is_timed_and_counted_at_once() -> None:
    """A ROCKETMQ request in a layout learnt is a LayoutCommand (from the third on): answered with
    itself, it is returned as it is (not awaited later) and its pull counted like any command."""
    timed = TimedProcessor(_Reflecting(), LatencyHistogram(), pull=True)
    request = pull_cmd("TReflect", 0, group="GReflect")
    request.serialize_type = SerializeType.ROCKETMQ
    pull = encode_frame(request)
    answers = [timed.process(None, decode_frame(pull)) for _ in range(4)]  # type: ignore[arg-type]
    assert type(answers[-1]) is LayoutCommand
    assert all(isinstance(a, RemotingCommand) and a.body == b"m" * 7 for a in answers)
    assert sum(timed.histogram.counts) == 4
    assert timed.group_bytes == {("TReflect", "GReflect"): 28}


class _PreEncodedSendOk(RequestProcessor):
    """A send processor answering at once with pre-encoded bytes, as SEND_OK is answered."""

    codes = (int(R.SEND_MESSAGE_V2),)

    def process(self, channel: Channel, request: RemotingCommand) -> bytes:
        return b"pre-encoded SEND_OK"


def test_a_send_is_counted_by_topic_without_building_its_field_map() -> None:
    timed = TimedProcessor(_PreEncodedSendOk(), LatencyHistogram(), pull=False)
    request = send_v2("TLazy", b"x" * 9)
    request.serialize_type = SerializeType.ROCKETMQ
    frame = encode_frame(request)
    requests = [decode_frame(frame) for _ in range(4)]
    for r in requests:
        timed.process(None, r)  # type: ignore[arg-type]
    assert type(requests[-1]) is LayoutCommand and requests[-1].ext_values is not None
    assert timed.topic_bytes == {"TLazy": 36} and sum(timed.histogram.counts) == 4


def _table(answer: RemotingCommand) -> dict[str, str]:
    return json.loads(answer.body)["table"]


@async_test
async def test_live_broker_figures_match_the_admin_answers(tmp_path: Any) -> None:
    async with LocalBroker(str(tmp_path)) as lb:
        broker = lb.broker
        metrics = MetricsServer([broker], 0, "127.0.0.1")
        metrics.install()  # (after start: the processor table is the channels' own dict)
        metrics.start()
        try:
            c = await lb.client()
            ext = {
                "topic": "MT",
                "readQueueNums": "2",
                "writeQueueNums": "2",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
            }
            assert (await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_TOPIC, ext))).code == 0
            for i in range(8):
                assert (await c.invoke(send_v2("MT", b"x" * 100, queue_id=i % 2))).code == 0
            assert (await c.invoke(heartbeat("metrics-client", "MG", "MT"))).code == 0
            found = await c.invoke(pull_cmd("MT", 0, queue_id=0, group="MG", suspend_ms=0, sys_flag=0))
            assert found.code == 0
            commits = (("0", "3"), ("1", "1"))
            for qid, off in commits:
                ext = {"consumerGroup": "MG", "topic": "MT", "queueId": qid, "commitOffset": off}
                assert (await c.invoke(RemotingCommand.request(R.UPDATE_CONSUMER_OFFSET, ext))).code == 0
            text = await asyncio.to_thread(scrape, metrics.port)
            # a stalled group's oldest message keeps ageing between scrapes (its store time is cached)
            first = metrics.brokers[0].snapshot().queues[("MT", "MG")]
            await asyncio.sleep(0.05)
            later = metrics.brokers[0].snapshot().queues[("MT", "MG")]
            assert [r[:3] for r in first] == [r[:3] for r in later]
            lagging = [(a, b) for a, b in zip(first, later, strict=True) if a[2] < a[1]]
            assert lagging and all(b[3] > a[3] for a, b in lagging)
            ask = RemotingCommand.request(R.GET_CONSUME_STATS, {"consumerGroup": "MG", "topic": "MT"})
            progress = ConsumeStats.from_json((await c.invoke(ask)).body)
            runtime = _table(await c.invoke(RemotingCommand.request(R.GET_BROKER_RUNTIME_INFO, {})))
            c.close()
        finally:
            metrics.stop()
    samples, _ = parse(text)
    b = {"cluster": broker.config.brokerClusterName, "broker": "broker-t"}
    assert value(samples, "rocketmq_producer_offset", topic="MT", **b) == 8
    consumer_total = 0
    assert len(progress.offset_table) == 2
    for mq, w in progress.offset_table.items():
        consumer_total += w.consumer_offset
        got = value(
            samples, "rocketmq_queue_accumulation", topic="MT", group="MG", queueid=str(mq.queue_id), **b
        )
        assert got == w.broker_offset - w.consumer_offset
    assert consumer_total == 4
    assert value(samples, "rocketmq_consumer_offset", topic="MT", group="MG", **b) == consumer_total
    assert value(samples, "rocketmq_message_accumulation", topic="MT", group="MG", **b) == 8 - 4
    assert value(samples, "rocketmq_group_get_latency_by_storetime", topic="MT", group="MG", **b) >= 0
    assert value(samples, "rocketmq_broker_send_latency_seconds_count", **b) >= 8
    assert value(samples, "rocketmq_broker_pull_latency_seconds_count", **b) == 1
    assert value(samples, "rocketmq_producer_message_size", topic="MT", **b) > 0
    assert value(samples, "rocketmq_consumer_message_size", topic="MT", group="MG", **b) > 0
    assert value(samples, "rocketmq_broker_connections", **b) == 1
    assert value(samples, "rocketmq_broker_pull_suspended", **b) == 0
    for key, name in (
        ("msgPutTotalTodayNow", "msg_put_total_today_now"),
        ("msgGetTotalTodayNow", "msg_gettotal_today_now"),
        ("putMessageTimesTotal", "putmessage_times_total"),
        ("commitLogMaxOffset", "commitlog_maxoffset"),
        ("commitLogDiskRatio", "commitlog_disk_ratio"),
    ):
        assert value(samples, f"rocketmq_brokeruntime_{name}", brokerIP=broker.config.broker_addr) == float(
            runtime[key]
        ), key
    assert value(samples, "rocketmq_brokeruntime_msg_put_total_today_now") == 8
    assert value(samples, "rocketmq_brokeruntime_msg_gettotal_today_now") == 4


@async_test
async def test_metrics_off_leaves_the_request_path_alone(tmp_path: Any) -> None:
    async with LocalBroker(str(tmp_path)) as lb:
        assert lb.broker.metrics is None
        table = lb.broker.server.table
        assert not any(isinstance(p, TimedProcessor) for p in table.values())
        assert table[int(R.SEND_MESSAGE_V2)] is lb.broker.send_processor


@async_test
async def test_metrics_port_in_broker_conf_serves_metrics(tmp_path: Any) -> None:
    import argparse
    import socket

    from rmqgate.server.main import add_arguments, build_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert build_config(parser.parse_args(["--store", str(tmp_path / "s")])).metricsPort == 0
    args = parser.parse_args(["--store", str(tmp_path / "s"), "--metrics-port", "9977"])
    assert build_config(args).metricsPort == 9977
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with LocalBroker(str(tmp_path / "b"), metricsPort=port) as lb:
        assert isinstance(lb.broker.server.table[int(R.SEND_MESSAGE_V2)], TimedProcessor)
        assert isinstance(lb.broker.server.table[int(R.PULL_MESSAGE)], TimedProcessor)
        c = await lb.client()
        assert (await c.invoke(send_v2("AutoT", b"abc"))).code == 0
        samples, _ = parse(await asyncio.to_thread(scrape, port))
        c.close()
    assert value(samples, "rocketmq_broker_send_latency_seconds_count", broker="broker-t") == 1
    assert value(samples, "rocketmq_producer_offset", topic="AutoT") == 1


@async_test
async def test_with_acl_on_the_timing_wraps_the_check_and_the_figures_are_read(tmp_path: Any) -> None:
    from rmqgate.server.acl import AclGuard
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.config import BrokerConfig
    from rmqgate.server.testing import small_store

    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.1\naccounts: []\n")
    config = small_store(BrokerConfig(brokerName="broker-acl", listenPort=0, aclEnable=True), tmp_path / "s")
    broker = BrokerController(config, listen_host="127.0.0.1", acl_file=str(acl_file))
    metrics = MetricsServer([broker], 0, "127.0.0.1")
    metrics.install()
    timed = broker.server.table[int(R.SEND_MESSAGE_V2)]
    assert isinstance(timed, TimedProcessor) and isinstance(timed.inner, AclGuard)
    await broker.start()
    metrics.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        assert (await c.invoke(send_v2("AclT", b"abc"))).code == 0
        samples, _ = parse(await asyncio.to_thread(scrape, metrics.port))
        c.close()
    finally:
        metrics.stop()
        await broker.stop()
    assert value(samples, "rocketmq_broker_send_latency_seconds_count", broker="broker-acl") == 1
    assert value(samples, "rocketmq_brokeruntime_msg_put_total_today_now") == 1


@async_test
async def test_asyncio_task_count_follows_the_loop_tasks(tmp_path: Any) -> None:
    async with LocalBroker(str(tmp_path)) as lb:
        metrics = MetricsServer([lb.broker], 0, "127.0.0.1")
        metrics.start()

        async def tasks() -> float:
            samples, _ = parse(await asyncio.to_thread(scrape, metrics.port))
            return value(samples, "rocketmq_broker_asyncio_tasks", broker="broker-t")

        try:
            before = await tasks()
            parked = [asyncio.create_task(asyncio.Event().wait()) for _ in range(5)]
            grown = await tasks()
            for task in parked:
                task.cancel()
            await asyncio.gather(*parked, return_exceptions=True)
            after = await tasks()
        finally:
            metrics.stop()
    assert grown == before + 5
    assert after == before
