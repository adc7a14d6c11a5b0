"""The job on a Spark standalone cluster (a master and two workers, separate JVMs on 127.0.0.1) whose
executors run a bare Python without rmqgate, pyspark or any dependency: the job ships its code and its
input, and its report matches the same job in local[2] against the same live rmqgate."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.spark.frames import rows_from_path
from rmqgate.spark.job import JobOptions, probe_target, run_job
from rmqgate.spark.plan import SEND_CODES, message_count
from rmqgate.spark.ship import EXECUTOR_PACKAGES, pyfiles_zip
from rmqgate.spark.standalone import StandaloneCluster, make_bare_python
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import decode_frame

CAPTURE = "c_BatchSend"
SCALE = 2


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    python = make_bare_python(tmp_path_factory.mktemp("bare") / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for name in ("rmqgate", "pyspark", "construct", "zstandard", "lmdb"):
        done = subprocess.run([python, "-c", f"import {name}"], capture_output=True, check=False, env=env)
        assert done.returncode != 0, f"{python} can import {name}"
    return python


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="512m") as c:
        yield c


def test_executor_zip_imports_on_a_bare_python(bare_python: str, tmp_path: Path) -> None:
    """What tasks import comes from the zip alone, and never pulls in a C extension."""
    zip_path = pyfiles_zip(str(tmp_path))
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import rmqgate.spark.executor, rmqgate.spark.plan, rmqgate.spark.frames, rmqgate.tools.pcap;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'zstandard', 'lmdb', 'rmqgate'}))"
    )
    done = subprocess.run(
        [bare_python, "-c", probe, str(zip_path)],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['rmqgate']"
    assert EXECUTOR_PACKAGES[-1] == "construct"
    assert pyfiles_zip(str(tmp_path)) == zip_path  # cached: built once per content


def _sends(path: Path) -> tuple[str, int]:
    rows = rows_from_path(str(path))
    topics: dict[str, int] = {}
    for r in rows:
        if r["direction"] == "c2s" and r["is_request"] and r["code"] in SEND_CODES:
            topics[r["topic"]] = topics.get(r["topic"], 0) + message_count(decode_frame(r["raw"]))
    ((topic, n),) = topics.items()
    return topic, n


async def _stored(broker: str, topic: str) -> int:
    total = 0
    async with await RemotingClient.connect_addr(broker) as client:
        for q in range(16):
            req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)})
            resp = await client.invoke(req, 5.0)
            if resp.code == ResponseCode.SUCCESS and resp.ext_fields:
                total += int(resp.ext_fields["offset"])
    return total


def stored(namesrv: str, topic: str) -> int:
    (broker,) = probe_target(namesrv).values()
    return asyncio.run(_stored(broker, topic))


def _comparable(report: dict) -> dict:
    """What does not depend on the broker's state or timing (the first run meets a topic the broker
    has yet to create, and a pull at --speed max may be held or answered PULL_NOT_FOUND)."""
    return {
        "requests": report["requests"],
        "errors": report["errors"],
        "connections": report["connections"],
        "messages_stored": report["messages_stored"],
        "by_code": {k: v["count"] for k, v in report["by_code"].items()},
        "sends": {k: v["responses"] for k, v in report["by_code"].items() if v["code"] in SEND_CODES},
        "per_task": [(t["task"], t["requests"], t["connections"]) for t in report["per_task"]],
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_standalone_cluster_matches_local(
    spark, rmqgate: str, cluster: StandaloneCluster, bare_python: str, corpus: Path, tmp_path: Path
) -> None:
    source = corpus / "pcap" / f"{CAPTURE}.pcap"
    topic, n_messages = _sends(source)
    # the driver runs in its own directory and names everything relatively: executors (in the workers'
    # directories) must get the capture from the job and the paths resolved by the driver
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    shutil.copyfile(source, driver_dir / "capture.pcap")
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    args = [sys.executable, "-m", "rmqgate.tools.cli", "spark-replay", "capture.pcap", "--target", rmqgate]
    args += ["--master", cluster.master_url, "--scale", str(SCALE), "--speed", "max", "--timeout", "20"]
    args += ["--report", "report.json", "--outcomes", "outcomes", "--frames-cache", "frames"]
    args += ["--conf", f"spark.pyspark.python={bare_python}", "--conf", "spark.executor.memory=512m"]
    # both executors up before the first stage, so the replay tasks spread over the two workers
    args += ["--conf", "spark.scheduler.minRegisteredResourcesRatio=1", "--conf", "spark.locality.wait=0"]
    before = stored(rmqgate, topic)
    done = subprocess.run(
        args, cwd=driver_dir, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-5000:] + cluster.logs()
    on_cluster = json.loads((driver_dir / "report.json").read_text())
    between = stored(rmqgate, topic)

    local = run_job(
        spark,
        JobOptions(
            inputs=[str(source)],
            target=rmqgate,
            scale=SCALE,
            speed=None,
            timeout=20.0,
            frames_cache=str(tmp_path / "local-frames"),
            progress=False,
        ),
    )
    after = stored(rmqgate, topic)

    assert on_cluster["spark"]["master"] == cluster.master_url
    assert on_cluster["spark"]["shipped"]["bytes"] > 0
    assert local["spark"]["shipped"] is None  # local executors are the driver's own Python
    assert on_cluster["errors"] == 0, on_cluster["error_kinds"]
    for report in (on_cluster, local):
        assert report["responses"] > 0
        assert report["responses"] + report["oneway"] + report["unanswered"] == report["requests"]
    assert _comparable(on_cluster) == _comparable(local)
    # every SEND landed, from the cluster as from local[2]
    assert between - before == after - between == n_messages * SCALE
    # one task on each worker's executor, each in that worker's work directory (not the driver's)
    executors = sorted(t["executor"].split(":", 1)[1] for t in on_cluster["per_task"])
    assert len(executors) == 2
    for i, directory in enumerate(executors):
        assert directory.startswith(str(cluster.work / f"worker{i}") + "/"), executors
    # frames and outcomes where the driver resolved them (its cwd), read back by the executors
    assert on_cluster["spark"]["outcomes"] == (driver_dir / "outcomes").as_uri().replace("file:///", "file:/")
    assert (driver_dir / "outcomes" / "_SUCCESS").exists()
    assert list((driver_dir / "frames").glob("frames-*.parquet/_SUCCESS"))
    assert spark.read.parquet(str(driver_dir / "outcomes")).count() == on_cluster["requests"]


def test_inputs_sharing_a_base_name_are_shipped_apart(tmp_path: Path) -> None:
    """addFile hands executors each file under its base name: two captures named alike get copies
    with distinct names, a unique one is sent as it is."""
    from rmqgate.spark.job import _stage_for_add_file

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, two, other = tmp_path / "a" / "x.pcap", tmp_path / "b" / "x.pcap", tmp_path / "a" / "y.pcap"
    for i, p in enumerate((one, two, other)):
        p.write_bytes(bytes([i]) * 10)
    stage = tmp_path / "stage"
    staged = _stage_for_add_file([one.as_uri(), str(two), str(other)], stage)
    assert [uri for uri, _ in staged] == [one.as_uri(), str(two), str(other)]
    names = [Path(f).name for _, f in staged]
    assert len(set(names)) == 3 and names[2] == "y.pcap"
    assert [Path(f).read_bytes() for _, f in staged] == [b"\0" * 10, b"\1" * 10, b"\2" * 10]
    assert all(Path(f).parent == stage for _, f in staged[:2])


def test_driver_side_inputs_pcap_shipped_rmqcap_decoded_here(spark, corpus: Path, tmp_path: Path) -> None:
    """What a cluster's executors get for inputs on the driver's disk: the same rows as decoding them
    in place (pcap: sent with addFile and decoded by a task; .rmqcap: decoded by the driver)."""
    from rmqgate.spark.frames import FRAME_COLUMNS
    from rmqgate.spark.job import _ship_inputs

    pcap = corpus / "pcap" / f"{CAPTURE}.pcap"
    rmqcap = tmp_path / f"{CAPTURE}.rmqcap"
    done = subprocess.run(
        [sys.executable, "-m", "rmqgate.tools.cli", "pcap", "convert", str(pcap), "-o", str(rmqcap)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    uris = [pcap.as_uri(), rmqcap.as_uri()]
    rows = _ship_inputs(spark.sparkContext, uris, tmp_path / "stage").collect()
    for uri, path in zip(uris, (pcap, rmqcap), strict=True):
        got = [r for r in rows if r["source"] == uri]
        want = rows_from_path(str(path))
        assert len(got) == len(want) > 0
        keys = [name for name, _ in FRAME_COLUMNS if name not in ("source", "conn")]
        assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in want]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_spark_submit_on_the_cluster(
    responder: str, cluster: StandaloneCluster, bare_python: str, corpus: Path, tmp_path: Path
) -> None:
    """The README's spark-submit line: the driver's Python named with spark.pyspark.driver.python, the
    executors' (bare) with spark.pyspark.python."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    report = tmp_path / "r.json"
    args = [str(Path(sys.executable).with_name("spark-submit")), "--master", cluster.master_url]
    args += [
        "--driver-java-options",
        f"-Dlog4j2.configurationFile=file:{root / 'spark' / 'log4j2-quiet.properties'}",
    ]
    args += ["--executor-memory", "512m", "--total-executor-cores", "2"]
    args += [
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        "--conf",
        f"spark.pyspark.python={bare_python}",
    ]
    args += ["--conf", "spark.scheduler.minRegisteredResourcesRatio=1", "--conf", "spark.locality.wait=0"]
    args += [str(root / "spark" / "replay_job.py"), str(corpus / "pcap" / f"{CAPTURE}.pcap")]
    args += ["--target", responder, "--scale", str(SCALE), "--speed", "max", "--grace", "0.2"]
    args += ["--frames-cache", str(tmp_path / "frames"), "--report", str(report), "--quiet"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=500, check=False)
    assert done.returncode == 0, done.stderr[-5000:] + cluster.logs()
    data = json.loads(report.read_text())
    assert data["spark"]["master"] == cluster.master_url
    assert data["spark"]["shipped"]["bytes"] > 0
    assert data["errors"] == 0 and data["unanswered"] == 0
    assert data["responses"] + data["oneway"] == data["requests"] > 0
    assert sorted(t["executor"].split(":", 1)[1].split("/app-")[0] for t in data["per_task"]) == [
        str(cluster.work / "worker0"),
        str(cluster.work / "worker1"),
    ]
