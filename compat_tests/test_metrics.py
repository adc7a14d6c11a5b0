"""rmqgate's Prometheus /metrics (``--metrics-port``) scraped while and after stock Java clients work
on it, checked against what the stock mqadmin reads from the same broker: consumerProgress's offsets
and Diff per queue against rocketmq_consumer_offset / rocketmq_queue_accumulation /
rocketmq_message_accumulation, and brokerStatus's runtime table against rocketmq_brokeruntime_*.
The Java broker serves no /metrics (Apache runs rocketmq-exporter beside it), so this is rmqgate only."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmqgate.compat_tests import java
from rmqgate.compat_tests.servers import ServerProcess, discover_broker, free_port
from rmqgate.compat_tests.wire_client import create_routed_topic

pytestmark = [pytest.mark.slow, pytest.mark.java, pytest.mark.rmqgate_only, pytest.mark.timeout(600)]

Samples = list[tuple[str, dict[str, str], float]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as resp:
        text = resp.read().decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def pick(samples: Samples, name: str, **labels: str) -> list[float]:
    return [v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items())]


def progress_rows(output: str, topic: str) -> dict[int, tuple[int, int, int]]:
    """consumerProgress's rows of ``topic``: queueId -> (Broker Offset, Consumer Offset, Diff). A row
    ends with Diff and LastTime (date and time); Client IP before them is empty for an offline group."""
    rows = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0] == topic:
            rows[int(parts[2])] = (int(parts[3]), int(parts[4]), int(parts[-3]))
    return rows


def status_table(output: str) -> dict[str, str]:
    table = {}
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            table[key.strip()] = value.strip()
    return table


def test_metrics_match_mqadmin_after_java_clients(
    tmp_path: Path, java_classes: dict[int, Path], uniq
) -> None:
    metrics_port = free_port()
    (tmp_path / "rmqgate").mkdir()
    server = ServerProcess(tmp_path / "rmqgate", extra_args=("--metrics-port", str(metrics_port)))
    logs = tmp_path / "logs"
    try:
        server.wait_ready()
        broker_addr, broker_name, cluster = discover_broker(server.namesrv)
        topic, group = uniq(), uniq("cg")
        create_routed_topic(broker_addr, server.namesrv, topic, 4)
        args = {"namesrv": server.namesrv, "broker": broker_addr, "topic": topic, "queues": 4}
        # a push consumer group consumes and commits; then more is sent that nobody consumes
        consumed = java.java_client(
            4, java_classes[4], "PushConcurrent",
            {**args, "group": group, "group2": uniq("cg2"), "producerGroup": uniq("pg")}, log_dir=logs,
        ).result()  # fmt: skip
        assert all(c["ok"] for c in consumed["checks"]), consumed
        sent = java.java_client(
            4, java_classes[4], "SendModes", {**args, "group": uniq("pg")}, log_dir=logs
        ).result()
        # (its reader's checks count every message of the topic, PushConcurrent's too: only its sends count)
        assert all(c["ok"] for c in sent["checks"] if "SEND_OK" in c["name"]), sent

        progress = java.mqadmin(logs, "consumerProgress", "-n", server.namesrv, "-g", group)
        assert progress.returncode == 0, progress.stderr
        status = java.mqadmin(logs, "brokerStatus", "-n", server.namesrv, "-b", broker_addr)
        assert status.returncode == 0, status.stderr
        samples = scrape(metrics_port)
    finally:
        server.stop()

    rows = progress_rows(progress.stdout, topic)
    assert sorted(rows) == [0, 1, 2, 3], progress.stdout
    labels = {"cluster": cluster, "broker": broker_name, "topic": topic, "group": group}
    for qid, (broker_offset, consumer_offset, diff) in rows.items():
        assert pick(samples, "rocketmq_queue_accumulation", **labels, queueid=str(qid)) == [diff]
        assert broker_offset - consumer_offset == diff
    total_diff = sum(r[2] for r in rows.values())
    assert total_diff > 0  # SendModes' messages are not consumed by the group
    assert f"Diff Total: {total_diff}" in progress.stdout
    assert pick(samples, "rocketmq_message_accumulation", **labels) == [total_diff]
    assert pick(samples, "rocketmq_consumer_offset", **labels) == [sum(r[1] for r in rows.values())]
    assert pick(samples, "rocketmq_producer_offset", cluster=cluster, broker=broker_name, topic=topic) == [
        sum(r[0] for r in rows.values())
    ]
    waited = pick(samples, "rocketmq_group_get_latency_by_storetime", **labels)
    assert len(waited) == 1 and waited[0] > 0  # the oldest unconsumed message has waited

    table = status_table(status.stdout)
    rl = {"cluster": cluster, "brokerIP": broker_addr, "boottime": table["bootTimestamp"]}
    for key, name in (
        ("msgPutTotalTodayNow", "msg_put_total_today_now"),
        ("msgGetTotalTodayNow", "msg_gettotal_today_now"),
        ("putMessageTimesTotal", "putmessage_times_total"),
        ("putMessageSizeTotal", "put_message_size_total"),
        ("commitLogMaxOffset", "commitlog_maxoffset"),
        ("commitLogMinOffset", "commitlog_minoffset"),
        ("earliestMessageTimeStamp", "earliest_message_timestamp"),
        ("sendThreadPoolQueueCapacity", "send_threadpoolqueue_capacity"),
    ):
        assert pick(samples, f"rocketmq_brokeruntime_{name}", **rl) == [float(table[key])], key
    assert re.fullmatch(r"\d+", table["msgPutTotalTodayNow"]) and int(table["msgPutTotalTodayNow"]) > 0
    sends = pick(samples, "rocketmq_broker_send_latency_seconds_count", cluster=cluster, broker=broker_name)
    # every send request was timed, and put one message or (SendModes' batch) several
    assert sends and 0 < sends[0] <= int(table["putMessageTimesTotal"])
