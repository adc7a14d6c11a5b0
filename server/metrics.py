"""Prometheus metrics on ``/metrics`` (``--metrics-port`` / broker.conf ``metricsPort``; off by default),
named and labelled as Apache's rocketmq-exporter names them so its Grafana dashboards read them.

The figures are the ones mqadmin reads (brokerStatus's runtime table, consumerProgress's offsets,
statsAll's stats items), taken at scrape time: the collector asks the broker's event loop for a
snapshot of plain values (so nothing is read while the loop changes it), then builds and formats the
metric families on the HTTP server's thread. The only per-request work is ``TimedProcessor``'s, installed
only when metrics are on: two clock reads, one bisect and one list increment (the latency histogram)
and one dict update (the bytes by topic) per send or pull."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import shutil
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import start_http_server

from rmqgate.server.remoting import Channel, Pending, RequestProcessor
from rmqgate.server.stats import BROKER_GET_NUMS, BROKER_PUT_NUMS, TOPIC_PUT_NUMS, StatsItem
from rmqgate.wire.bodies import ConsumeStats
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.metrics")
K = TypeVar("K", str, tuple[str, str])

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: histogram bounds in seconds; they include every bound of StoreStatsService's putMessageDistributeTime
#: (1 ms, 10 ms, ... 10 s) so its buckets are sums of these
BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5,
    1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
)  # fmt: skip
#: rocketmq_brokeruntime_pmdt_* (putMessageDistributeTime's buckets) by their upper bound in seconds
PMDT = (
    ("0ms", 0.001), ("0to10ms", 0.01), ("10to50ms", 0.05), ("50to100ms", 0.1), ("100to200ms", 0.2),
    ("200to500ms", 0.5), ("500to1s", 1.0), ("1to2s", 2.0), ("2to3s", 3.0), ("3to4s", 4.0),
    ("4to5s", 5.0), ("5to10s", 10.0), ("10stomore", float("inf")),
)  # fmt: skip
#: brokerStatus keys read as one number, by their rocketmq-exporter name
RUNTIME_GAUGES = {
    "msgPutTotalTodayNow": "msg_put_total_today_now",
    "msgGetTotalTodayNow": "msg_gettotal_today_now",
    "msgPutTotalTodayMorning": "msg_puttotal_todaymorning",
    "msgGetTotalTodayMorning": "msg_gettotal_todaymorning",
    "msgPutTotalYesterdayMorning": "msg_puttotal_yesterdaymorning",
    "msgGetTotalYesterdayMorning": "msg_gettotal_yesterdaymorning",
    "dispatchBehindBytes": "dispatch_behind_bytes",
    "putMessageSizeTotal": "put_message_size_total",
    "putMessageAverageSize": "put_message_average_size",
    "putMessageTimesTotal": "putmessage_times_total",
    "queryThreadPoolQueueCapacity": "query_threadpool_queue_capacity",
    "remainTransientStoreBufferNumbs": "remain_transientstore_buffer_numbs",
    "earliestMessageTimeStamp": "earliest_message_timestamp",
    "putMessageEntireTimeMax": "putmessage_entire_time_max",
    "startAcceptSendRequestTimeStamp": "start_accept_sendrequest_time",
    "sendThreadPoolQueueSize": "send_threadpool_queue_size",
    "getMessageEntireTimeMax": "getmessage_entire_time_max",
    "pageCacheLockTimeMills": "pagecache_lock_time_mills",
    "commitLogDiskRatio": "commitlog_disk_ratio",
    "consumeQueueDiskRatio": "consumequeue_disk_ratio",
    "dispatchMaxBuffer": "dispatch_maxbuffer",
    "pullThreadPoolQueueCapacity": "pull_threadpoolqueue_capacity",
    "sendThreadPoolQueueCapacity": "send_threadpoolqueue_capacity",
    "pullThreadPoolQueueSize": "pull_threadpoolqueue_size",
    "queryThreadPoolQueueSize": "query_threadpoolqueue_size",
    "pullThreadPoolQueueHeadWaitTimeMills": "pull_threadpoolqueue_headwait_timemills",
    "queryThreadPoolQueueHeadWaitTimeMills": "query_threadpoolqueue_headwait_timemills",
    "sendThreadPoolQueueHeadWaitTimeMills": "send_threadpoolqueue_headwait_timemills",
    "commitLogMaxOffset": "commitlog_maxoffset",
    "commitLogMinOffset": "commitlog_minoffset",
    "remainHowManyDataToFlush": "remain_howmanydata_toflush",
    "putLatency99": "put_latency_99",
    "putLatency999": "put_latency_999",
}
#: brokerStatus's "10 s 60 s 600 s" TPS keys, by their rocketmq-exporter name
RUNTIME_TPS = {
    "putTps": "put_tps",
    "getFoundTps": "getfound_tps",
    "getMissTps": "getmiss_tps",
    "getTotalTps": "gettotal_tps",
    "getTransferedTps": "gettransfered_tps",
}
RUNTIME_LABELS = ("cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version")
SIZE_WINDOW_S = 60.0  # message size figures are bytes a second over the last minute, as statsMinute


class LatencyHistogram:
    """Counts by bucket (``counts[i]``: observations <= BUCKETS[i]; the last: above them all) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds


class TimedProcessor(RequestProcessor):
    """A processor whose answers are timed into ``histogram`` (from the request's dispatch to its answer:
    a SYNC_FLUSH send's group commit included; a pull parked for a long poll is not counted) and whose
    bytes are added up by topic (sends: the request body) or by (topic, group) (pulls: the answer's body;
    kept as a pair, not joined, since either name may hold any character)."""

    def __init__(self, inner: RequestProcessor, histogram: LatencyHistogram, *, pull: bool) -> None:
        self.inner = inner
        self.histogram = histogram
        self.pull = pull
        self.topic_bytes: dict[str, int] = {}
        self.group_bytes: dict[tuple[str, str], int] = {}
        self.codes = inner.codes  # type: ignore[misc]

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        start = perf_counter()
        result = self.inner.process(channel, request)
        kind = type(result)
        if kind is bytes and not self.pull:  # a send answered at once (pre-encoded): inlined
            elapsed = perf_counter() - start
            histogram = self.histogram
            histogram.counts[bisect_left(BUCKETS, elapsed)] += 1
            histogram.total += elapsed
            self._count_send(request)
            return result
        # (isinstance: a decoded command answered with may be a LayoutCommand)
        if kind is bytes or kind is RemotingCommand or isinstance(result, RemotingCommand):
            self.histogram.observe(perf_counter() - start)
        elif kind is Pending:
            result.future.add_done_callback(lambda _: self.histogram.observe(perf_counter() - start))
        elif result is not None:
            return self._timed(result, start, request)
        else:
            return None
        self._count(request, result)
        return result

    async def _timed(self, pending: Awaitable[Any], start: float, request: RemotingCommand) -> Any:
        result = await pending
        if result is not None:
            self.histogram.observe(perf_counter() - start)
            self._count(request, result)
        return result

    def _count(self, request: RemotingCommand, result: Any) -> None:
        if self.pull:
            if (
                not isinstance(result, RemotingCommand)
                or result.code != ResponseCode.SUCCESS
                or not result.body
            ):
                return
            pair = (str(request.ext_field("topic")), str(request.ext_field("consumerGroup")))
            groups = self.group_bytes
            groups[pair] = groups.get(pair, 0) + len(result.body)
            return
        if not isinstance(result, RemotingCommand) or result.code == ResponseCode.SUCCESS:
            self._count_send(request)

    def _count_send(self, request: RemotingCommand) -> None:
        # (SEND_MESSAGE_V2's short names; ext_field leaves a LayoutCommand's map unbuilt)
        key = request.ext_field("b") or request.ext_field("topic")
        if key is not None:
            sizes = self.topic_bytes
            sizes[key] = sizes.get(key, 0) + len(request.body or b"")


@dataclass
class BrokerSnapshot:
    """One broker's figures at one moment, as plain values (taken on the broker's event loop)."""

    cluster: str
    broker: str
    addr: str
    runtime: dict[str, str]
    commitlog_dir_total: int | None
    commitlog_dir_free: int | None
    broker_put_tps: float | None
    broker_get_tps: float | None
    #: topic -> (sum of its queues' max offsets, put TPS over the last minute or None)
    topics: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    #: (topic, group) -> [(queueId, brokerOffset, consumerOffset, ms the next message has waited)]
    queues: dict[tuple[str, str], list[tuple[int, int, int, int]]] = field(default_factory=dict)
    group_tps: dict[tuple[str, str], float] = field(default_factory=dict)
    producers: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    parked_pulls: int = 0
    transaction_checks: int = 0
    #: asyncio tasks alive on the broker's loop (connections, parked pulls, timers): what a leak grows
    asyncio_tasks: int = 0
    send_latency: tuple[list[int], float] | None = None
    pull_latency: tuple[list[int], float] | None = None
    put_bytes: dict[str, int] = field(default_factory=dict)
    get_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    ms: int = 0


class BrokerMetrics:
    """One broker's side: its timed processors and its snapshot (called on the broker's loop)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.send_latency = LatencyHistogram()
        self.pull_latency = LatencyHistogram()
        self.send: TimedProcessor | None = None
        self.pull: TimedProcessor | None = None
        #: (topic, group, queueId) -> (the group's offset, the store time there) at the last scrape
        self._store_times: dict[tuple[str, str, int], tuple[int, int]] = {}

    def install(self) -> None:
        """Time the send and pull processors (behind the ACL check when that is on)."""
        table = self.broker.server.table
        for attr, proc, histogram in (
            ("send", self.broker.send_processor, self.send_latency),
            ("pull", self.broker.pull_processor, self.pull_latency),
        ):
            code = int(proc.codes[0])
            timed = TimedProcessor(table[code], histogram, pull=attr == "pull")
            for c in proc.codes:
                table[int(c)] = timed
            setattr(self, attr, timed)

    def _store_time(self, seen: dict[tuple[str, str, int], tuple[int, int]], topic: str, group: str,
                    queue_id: int, offset: int) -> int:  # fmt: skip
        """The store time of the message at a group's offset in a queue, read from the store only when the
        offset moved since the last scrape (a stalled group's oldest message is read once); ``seen`` gets
        this scrape's (offset, time) by (topic, group, queueId)."""
        key = (topic, group, queue_id)
        before = self._store_times.get(key)
        if before is not None and before[0] == offset:
            stored = before[1]
        else:
            stored = self.broker.store.get_message_store_timestamp(topic, queue_id, offset)
        seen[key] = (offset, stored)
        return stored

    def snapshot(self) -> BrokerSnapshot:
        broker = self.broker
        config = broker.config
        store = broker.store
        stats = broker.stats
        admin = broker.admin_processor
        answer = admin.get_broker_runtime_info(
            None, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        )
        runtime = json.loads(answer.body)["table"]
        try:
            usage = shutil.disk_usage(store.config.store_path_root_dir)
            total, free = usage.total, usage.free
        except OSError:
            total = free = None

        items = stats.items
        put_topics = store.topic_put_totals()

        def minute_tps(name: str, key: str, counted: bool) -> float | None:
            """statsAll's minute TPS of a stats item: 0 for one counted since the last sample, None
            (no series, as VIEW_BROKER_STATS_DATA refuses it) for one never counted."""
            item = items.get((name, key))
            if item is None:
                return 0.0 if counted else None
            return float(StatsItem.summary(item.minute)["tps"])

        snap = BrokerSnapshot(
            cluster=config.brokerClusterName,
            broker=config.brokerName,
            addr=config.broker_addr,
            runtime=runtime,
            commitlog_dir_total=total,
            commitlog_dir_free=free,
            broker_put_tps=minute_tps(BROKER_PUT_NUMS, config.brokerClusterName, bool(put_topics)),
            broker_get_tps=minute_tps(BROKER_GET_NUMS, config.brokerClusterName, stats.get_transferred > 0),
            ms=int(time.time() * 1000),
        )
        for topic, tc in list(broker.topics.table.items()):
            offsets = sum(
                max(0, store.get_max_offset_in_queue(topic, q)) for q in range(tc["writeQueueNums"])
            )
            snap.topics[topic] = (offsets, minute_tps(TOPIC_PUT_NUMS, topic, topic in put_topics))
        # consumerProgress's figures: the same offsets GET_CONSUME_STATS answers
        seen: dict[tuple[str, str, int], tuple[int, int]] = {}
        for group, topics in admin._topics_by_group().items():
            for topic in topics:
                tc = admin._consumed_topic_config(group, topic)
                if tc is None:
                    continue
                consume_stats = admin._fill_offsets(ConsumeStats(), group, topic, tc["readQueueNums"])
                rows = []
                for mq, w in consume_stats.offset_table.items():
                    waited = 0  # the next message's age, as the exporter takes it
                    if w.consumer_offset < w.broker_offset:
                        stored = self._store_time(seen, topic, group, mq.queue_id, w.consumer_offset)
                        waited = max(0, snap.ms - stored) if stored and stored > 0 else 0
                    rows.append((mq.queue_id, w.broker_offset, w.consumer_offset, waited))
                snap.queues[(topic, group)] = rows
                snap.group_tps[(topic, group)] = stats.group_get_tps(topic, group)
        self._store_times = seen
        snap.producers = {g: len(chs) for g, chs in broker.producers.groups.items() if chs}
        snap.connections = len(broker.server.channels)
        snap.parked_pulls = sum(len(v) for v in broker.pull_processor.hold.held.values())
        snap.transaction_checks = broker.transactions.checks_sent
        snap.asyncio_tasks = len(asyncio.all_tasks())
        snap.send_latency = (list(self.send_latency.counts), self.send_latency.total)
        snap.pull_latency = (list(self.pull_latency.counts), self.pull_latency.total)
        if self.send is not None:
            snap.put_bytes = dict(self.send.topic_bytes)
        if self.pull is not None:
            snap.get_bytes = dict(self.pull.group_bytes)
        return snap


def pmdt(counts: Sequence[int]) -> list[tuple[str, int]]:
    """Histogram counts summed into putMessageDistributeTime's buckets (whose bounds are in BUCKETS)."""
    out = []
    lower = 0.0
    for name, upper in PMDT:
        n = sum(counts[i] for i, bound in enumerate(BUCKETS) if lower < bound <= upper)
        if upper == float("inf"):
            n += counts[len(BUCKETS)]
        out.append((name, n))
        lower = upper
    return out


def _number(text: str) -> float | None:
    try:
        return float(text.split(" ")[0])
    except (ValueError, IndexError):
        return None


class _Rates(Generic[K]):
    """Bytes a second over about the last minute from running totals (by topic, or by (topic, group))
    seen at each scrape."""

    def __init__(self, start_s: float) -> None:
        self.seen: deque[tuple[float, dict[K, int]]] = deque([(start_s, {})])  # counted from the start

    def rates(self, now_s: float, totals: dict[K, int]) -> dict[K, float]:
        seen = self.seen
        seen.append((now_s, totals))
        while len(seen) > 2 and now_s - seen[1][0] >= SIZE_WINDOW_S:
            seen.popleft()
        then, before = seen[0]
        elapsed = now_s - then
        if elapsed <= 0:
            return {}
        return {key: (n - before.get(key, 0)) / elapsed for key, n in totals.items()}


class RocketMQCollector:
    """A prometheus_client collector over brokers that run on ``loop``: rocketmq-exporter's series."""

    def __init__(self, brokers: Sequence[BrokerMetrics], loop: asyncio.AbstractEventLoop,
                 timeout: float = 10.0) -> None:  # fmt: skip
        self.brokers = list(brokers)
        self.loop = loop
        self.timeout = timeout
        self._put_rates: dict[str, _Rates[str]] = {}
        self._get_rates: dict[str, _Rates[tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def describe(self) -> list[Metric]:
        return []  # (else the registry calls collect() on registration, from the loop's own thread)

    def snapshots(self) -> list[BrokerSnapshot]:
        """The brokers' snapshots, taken on their loop; off the loop, waits for it."""
        if _on_loop(self.loop):
            return [b.snapshot() for b in self.brokers]
        future: concurrent.futures.Future[list[BrokerSnapshot]] = concurrent.futures.Future()

        def take() -> None:
            try:
                future.set_result([b.snapshot() for b in self.brokers])
            except Exception as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(take)
        return future.result(self.timeout)

    def collect(self) -> Iterator[Metric]:
        try:
            snaps = self.snapshots()
        except Exception:
            log.exception("metrics snapshot failed")
            return iter(())
        with self._lock:
            return iter(self.families(snaps))

    def families(self, snaps: Iterable[BrokerSnapshot]) -> list[Metric]:
        g = GaugeMetricFamily
        topic_labels = ("cluster", "broker", "topic")
        group_labels = ("cluster", "broker", "topic", "group")
        queue_labels = ("cluster", "broker", "topic", "group", "queueid")
        broker_labels = ("cluster", "brokerIP", "broker")
        own_labels = ("cluster", "broker")
        m = {
            "producer_tps": g("rocketmq_producer_tps", "TopicPutNums", labels=topic_labels),
            "producer_size": g("rocketmq_producer_message_size", "TopicPutMessageSize", labels=topic_labels),
            "producer_offset": g("rocketmq_producer_offset", "TopicOffset", labels=topic_labels),
            "retry_offset": g("rocketmq_topic_retry_offset", "TopicRetryOffset", labels=topic_labels),
            "dlq_offset": g("rocketmq_topic_dlq_offset", "TopicRetryOffset", labels=("cluster", "broker", "group")),
            "producer_count": g("rocketmq_producer_count", "producer instance counter", labels=("cluster", "broker", "group")),
            "consumer_tps": g("rocketmq_consumer_tps", "GroupGetNums", labels=group_labels),
            "consumer_size": g("rocketmq_consumer_message_size", "GroupGetMessageSize", labels=group_labels),
            "consumer_offset": g("rocketmq_consumer_offset", "GroupBrokerTotalOffset", labels=group_labels),
            "accumulation": g("rocketmq_message_accumulation", "How far the group's offset lags behind the queue's", labels=group_labels),
            "queue_accumulation": g("rocketmq_queue_accumulation", "consumerProgress's Diff of one queue", labels=queue_labels),
            "latency": g("rocketmq_group_get_latency", "ms the queue's next message to consume has waited", labels=queue_labels),
            "latency_storetime": g("rocketmq_group_get_latency_by_storetime", "GroupGetLatencyByStoreTime", labels=group_labels),
            "broker_tps": g("rocketmq_broker_tps", "BrokerPutNums", labels=broker_labels),
            "broker_qps": g("rocketmq_broker_qps", "BrokerGetNums", labels=broker_labels),
            "connections": g("rocketmq_broker_connections", "client connections open", labels=own_labels),
            "parked": g("rocketmq_broker_pull_suspended", "long-polling pulls parked", labels=own_labels),
            "tasks": g("rocketmq_broker_asyncio_tasks", "asyncio tasks alive on the broker's event loop", labels=own_labels),
            "checks": CounterMetricFamily("rocketmq_broker_transaction_checks", "CHECK_TRANSACTION_STATE requests sent", labels=own_labels),
        }  # fmt: skip
        runtime: dict[str, GaugeMetricFamily] = {}
        histograms: list[Metric] = []
        send_h = HistogramMetricFamily(
            "rocketmq_broker_send_latency_seconds", "send requests: dispatch to answer", labels=own_labels
        )
        pull_h = HistogramMetricFamily(
            "rocketmq_broker_pull_latency_seconds", "pulls answered without parking", labels=own_labels
        )
        now = time.monotonic()

        def rt(name: str, help_text: str) -> GaugeMetricFamily:
            family = runtime.get(name)
            if family is None:
                family = runtime[name] = g(f"rocketmq_brokeruntime_{name}", help_text, labels=RUNTIME_LABELS)
            return family

        for s in snaps:
            c, b = s.cluster, s.broker
            r = s.runtime
            rl = [
                c,
                s.addr,
                "",
                r.get("brokerVersionDesc", ""),
                r.get("bootTimestamp", ""),
                r.get("brokerVersion", ""),
            ]
            for key, name in RUNTIME_GAUGES.items():
                value = _number(r.get(key, ""))
                if value is not None:
                    rt(name, key).add_metric(rl, value)
            for key, name in RUNTIME_TPS.items():
                for window, text in zip((10, 60, 600), r.get(key, "").split(" "), strict=False):
                    value = _number(text)
                    if value is not None:
                        rt(f"{name}{window}", key).add_metric(rl, value)
            if s.commitlog_dir_total is not None:
                rt("commitlogdir_capacity_total", "commitLogDirCapacity").add_metric(
                    rl, s.commitlog_dir_total
                )
                rt("commitlogdir_capacity_free", "commitLogDirCapacity").add_metric(
                    rl, s.commitlog_dir_free or 0
                )
            if s.send_latency is not None:
                counts, total = s.send_latency
                for name, n in pmdt(counts):  # putMessageDistributeTime's buckets from the send histogram
                    rt(f"pmdt_{name}", "PutMessageDistributeTime").add_metric(rl, n)
                send_h.add_metric([c, b], _cumulative(counts), total)
            if s.pull_latency is not None:
                counts, total = s.pull_latency
                pull_h.add_metric([c, b], _cumulative(counts), total)
            bl = [c, s.addr, b]
            if s.broker_put_tps is not None:
                m["broker_tps"].add_metric(bl, s.broker_put_tps)
            if s.broker_get_tps is not None:
                m["broker_qps"].add_metric(bl, s.broker_get_tps)
            for topic, (offset, tps) in s.topics.items():
                if topic.startswith(RETRY_PREFIX):
                    m["retry_offset"].add_metric([c, b, topic], offset)
                elif topic.startswith(DLQ_PREFIX):
                    m["dlq_offset"].add_metric([c, b, topic[len(DLQ_PREFIX) :]], offset)
                else:
                    m["producer_offset"].add_metric([c, b, topic], offset)
                if tps is not None:
                    m["producer_tps"].add_metric([c, b, topic], tps)
            put_rates = self._put_rates.setdefault(s.addr, _Rates[str](self._started))
            get_rates = self._get_rates.setdefault(s.addr, _Rates[tuple[str, str]](self._started))
            for topic, rate in put_rates.rates(now, s.put_bytes).items():
                m["producer_size"].add_metric([c, b, topic], rate)
            for (topic, group), rate in get_rates.rates(now, s.get_bytes).items():
                m["consumer_size"].add_metric([c, b, topic, group], rate)
            for group, n in s.producers.items():
                m["producer_count"].add_metric([c, b, group], n)
            for (topic, group), rows in s.queues.items():
                gl = [c, b, topic, group]
                m["consumer_offset"].add_metric(gl, sum(row[2] for row in rows))
                m["accumulation"].add_metric(gl, sum(row[1] - row[2] for row in rows))
                m["latency_storetime"].add_metric(gl, max((row[3] for row in rows), default=0))
                m["consumer_tps"].add_metric(gl, s.group_tps.get((topic, group), 0.0))
                for qid, broker_off, consumer_off, waited in rows:
                    ql = [*gl, str(qid)]
                    m["queue_accumulation"].add_metric(ql, broker_off - consumer_off)
                    m["latency"].add_metric(ql, waited)
            m["connections"].add_metric([c, b], s.connections)
            m["parked"].add_metric([c, b], s.parked_pulls)
            m["tasks"].add_metric([c, b], s.asyncio_tasks)
            m["checks"].add_metric([c, b], s.transaction_checks)
        histograms.extend((send_h, pull_h))
        return [*m.values(), *runtime.values(), *histograms]


def _cumulative(counts: list[int]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip((*BUCKETS, float("inf")), counts, strict=True):
        running += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return out


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class MetricsServer:
    """``/metrics`` over prometheus_client's HTTP server (its own daemon thread) for brokers on the
    running loop."""

    def __init__(self, brokers: Sequence[BrokerController], port: int, host: str = "0.0.0.0") -> None:
        self.port = port
        self.host = host
        self.brokers = [BrokerMetrics(b) for b in brokers]
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector: RocketMQCollector | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def install(self) -> None:
        """Time the brokers' sends and pulls (before they take requests)."""
        for b in self.brokers:
            b.install()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.collector = RocketMQCollector(self.brokers, loop)
        self.registry.register(self.collector)
        self._server, self._thread = start_http_server(self.port, self.host, registry=self.registry)
        self.port = self._server.server_address[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
