"""The Spark job end to end in local[2]: against a live rmqgate (every SEND lands) and the responder."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.spark import cli
from rmqgate.spark.frames import rows_from_path
from rmqgate.spark.job import JobError, JobOptions, check_java, probe_target, run_job
from rmqgate.spark.plan import SEND_CODES, message_count
from rmqgate.tools.replay_plan import BROKER_ONLY_CODES
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import decode_frame

ROOT = Path(__file__).resolve().parents[2]


def expected_load(path: Path) -> tuple[int, dict[str, int]]:
    """From the capture alone: client requests to replay, and messages its SENDs store per topic."""
    rows = rows_from_path(str(path))
    self_conns = {r["conn"] for r in rows if r["is_request"] and r["code"] in BROKER_ONLY_CODES}
    requests = [
        r for r in rows if r["direction"] == "c2s" and r["is_request"] and r["conn"] not in self_conns
    ]
    messages: dict[str, int] = {}
    for r in requests:
        if r["code"] in SEND_CODES:
            messages[r["topic"]] = messages.get(r["topic"], 0) + message_count(decode_frame(r["raw"]))
    return len(requests), messages


async def _max_offsets(broker: str, topic: str, queues: int = 16) -> list[int]:
    out = []
    async with await RemotingClient.connect_addr(broker) as client:
        for q in range(queues):
            req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
            resp = await client.invoke(req, 5.0)
            ok = resp.code == ResponseCode.SUCCESS and resp.ext_fields
            out.append(int(resp.ext_fields["offset"]) if ok else 0)
    return out


def max_offsets(namesrv: str, topic: str) -> list[int]:
    """GET_MAX_OFFSET of every queue of ``topic`` on the target's only broker (0 where it has none)."""
    masters = probe_target(namesrv)
    assert len(masters) == 1, masters
    return asyncio.run(_max_offsets(next(iter(masters.values())), topic))


@pytest.mark.slow
@pytest.mark.parametrize("capture", ["a_SyncSendPushConsume", "c_BatchSend"])
def test_replay_against_rmqgate_lands_every_send(
    spark, rmqgate, frames_cache: str, corpus: Path, tmp_path: Path, capture: str
) -> None:
    path = corpus / "pcap" / f"{capture}.pcap"
    scale = 2
    n_requests, messages = expected_load(path)
    assert len(messages) == 1
    ((topic, n_messages),) = messages.items()
    before = max_offsets(rmqgate, topic)
    opts = JobOptions(
        inputs=[str(path)],
        target=rmqgate,
        scale=scale,
        speed=1.0,
        timeout=20.0,
        frames_cache=frames_cache,
        outcomes=str(tmp_path / "outcomes.parquet"),
        report=str(tmp_path / "report.json"),
        progress=False,
    )
    report = run_job(spark, opts)
    after = max_offsets(rmqgate, topic)

    assert report["requests"] == n_requests * scale
    assert report["requests"] == spark.read.parquet(opts.outcomes).count()
    assert (
        report["responses"] + report["oneway"] + report["unanswered"] + report["errors"] == report["requests"]
    )
    assert report["errors"] == 0, report["error_kinds"]
    assert sum(v["count"] for v in report["by_code"].values()) == report["requests"]
    sends = [v for v in report["by_code"].values() if v["code"] in SEND_CODES]
    assert sends
    for v in sends:
        assert v["responses"] == {"SUCCESS": v["count"]} == v["recorded"]
    # every replayed SEND landed: the topic's queues grew by exactly the messages sent, clones included
    assert sum(after) - sum(before) == n_messages * scale
    assert report["messages_stored"] == n_messages * scale
    assert json.loads(Path(opts.report).read_text())["requests"] == report["requests"]


def test_replay_against_responder_writes_json_parquet_html(
    spark, responder, corpus: Path, tmp_path: Path, capsys
) -> None:
    path = corpus / "pcap" / "c_BatchSend.pcap"
    n_requests, _ = expected_load(path)
    cache = tmp_path / "frames"
    opts = JobOptions(
        inputs=[str(path)],
        target=responder,
        scale=3,
        speed=None,
        grace=0.2,
        frames_cache=str(cache),
        outcomes=str(tmp_path / "out.parquet"),
        report=str(tmp_path / "r.json"),
        html=str(tmp_path / "r.html"),
    )
    report = run_job(spark, opts)
    assert report["requests"] == 3 * n_requests
    assert report["errors"] == 0 and report["unanswered"] == 0
    assert report["responses"] + report["oneway"] == report["requests"]
    assert report["connections"] == 3 * 4  # four client connections (the broker's own is not replayed)
    assert report["tasks"] == report["spark"]["partitions"] == 2
    assert sum(t["requests"] for t in report["per_task"]) == report["requests"]
    assert report["latency_ms"]["p50"] <= report["latency_ms"]["p99"] <= report["latency_ms"]["max"]
    assert sum(p["requests"] for p in report["throughput"]) == report["requests"]
    assert Path(opts.report).exists()
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (tmp_path / "r.html").read_text()
    assert "SEND_BATCH_MESSAGE" in html and "data:image/png;base64," in html
    written = list(cache.glob("frames-*.parquet"))
    assert len(written) == 1 and (written[0] / "_SUCCESS").exists()

    # again: the decoded frames are reused; and the Parquet table itself is a valid input
    capsys.readouterr()
    again = run_job(spark, JobOptions(**{**opts.__dict__, "report": None, "html": None, "outcomes": None}))
    assert "reusing" in capsys.readouterr().err
    assert again["requests"] == report["requests"]
    direct = run_job(
        spark,
        JobOptions(inputs=[str(written[0])], target=responder, speed=None, grace=0.2, progress=False),
    )
    assert direct["requests"] == n_requests


def test_unreachable_target_is_a_clear_error_before_spark_starts(capsys, corpus: Path) -> None:
    with pytest.raises(JobError, match="unreachable"):
        probe_target("127.0.0.1:1", timeout=2.0)
    with pytest.raises(JobError, match="NAMESRV_HOST:PORT"):
        probe_target("no-port")
    rc = cli.main([str(corpus / "pcap" / "c_BatchSend.pcap"), "--target", "127.0.0.1:1"])
    assert rc == 2
    assert "target name server 127.0.0.1:1 is unreachable" in capsys.readouterr().err


def test_missing_java_is_a_clear_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobError, match="Java not found"):
        check_java()


@pytest.mark.slow
def test_spark_submit_entry_point(responder, corpus: Path, tmp_path: Path) -> None:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    report = tmp_path / "r.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    args = [str(spark_submit), "--master", "local[1]"]
    args += [
        "--driver-java-options",
        f"-Dlog4j2.configurationFile=file:{ROOT / 'spark' / 'log4j2-quiet.properties'}",
    ]
    args += [str(ROOT / "spark" / "replay_job.py")]
    args += [str(corpus / "pcap" / "c_BatchSend.pcap"), "--target", responder, "--speed", "max"]
    args += ["--frames-cache", str(tmp_path / "frames"), "--report", str(report), "--quiet"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["requests"] == expected_load(corpus / "pcap" / "c_BatchSend.pcap")[0]
    assert data["spark"]["master"] == "local[1]"
    assert "INFO" not in done.stderr  # quiet with the documented driver option


def test_several_inputs_by_glob_replay_together(spark, responder, frames_cache: str, corpus: Path) -> None:
    files = sorted((corpus / "pcap").glob("c_BatchSend*.pcap"))
    assert len(files) == 3
    glob = (corpus / "pcap").as_uri() + "/c_BatchSend*.pcap"  # not a plain file: Spark lists it
    report = run_job(
        spark,
        JobOptions(
            inputs=[glob], target=responder, speed=None, grace=0.2, frames_cache=frames_cache, progress=False
        ),
    )
    assert report["requests"] == sum(expected_load(f)[0] for f in files)
    assert report["errors"] == 0
    assert report["connections"] == 3 * 4
