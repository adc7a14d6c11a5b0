"""The Spark load-replay job: inputs -> Parquet frames -> per-connection plans -> replay -> report.

``run_job(spark, options)`` is shared by ``rmqgate spark-replay`` (spark/cli.py) and
``spark-submit spark/replay_job.py``. Stages:

1. frames: pcaps / capture files (any Hadoop-compatible path, read with ``binaryFiles``) decoded with the
   project's codec into a Parquet table, cached by input path/size/mtime and reused; a ``.parquet``
   input is taken as such a table directly.
2. plan: frames grouped by (connection, clone) into tools/replay ``PlannedConnection``s, one shuffle; each unit is pinned to a
   partition by a greedy balance of request counts, so clones of a connection spread over executors.
3. replay: one Spark task per partition replays its connections with tools/replay.py's engine
   (spark/executor.py); the outcomes are written to Parquet once (never recomputed), then aggregated with Spark SQL.

With any master but local[N] the executors are other processes, maybe on other hosts: the job ships
them the code they import (spark/ship.py), hands them the inputs only the driver can read
(``addFile``), and resolves every path on the driver against the cluster's default file system, so
nothing depends on an executor's working directory. There are as many replay tasks as the executors
run at once, so that every connection starts on time.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqgate.spark.executor import OUTCOME_DDL, ReplayUnit, run_task
from rmqgate.spark.frames import (
    FRAME_COLUMNS,
    FRAME_DDL,
    is_pcap,
    read_input,
    rows_from_bytes,
    rows_from_frames,
    rows_from_shipped,
)
from rmqgate.spark.plan import (
    SEND_CODES,
    broker_name_of,
    broker_names_from_routes,
    message_count,
    planned_connection,
    role_of,
    route_bodies_from_rows,
)
from rmqgate.tools.capture import Role
from rmqgate.tools.replay import ReplayOptions, discover_brokers
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.frame import decode_frame

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
PLAN_COLUMNS = (
    "conn",
    "source",
    "idx",
    "ts",
    "direction",
    "role",
    "server",
    "code",
    "req_code",
    "opaque",
    "is_request",
    "oneway",
    "topic",
    "raw",
    "error",
)


class JobError(RuntimeError):
    """A problem the user must fix (no Java, target unreachable, no input): printed without a trace."""


@dataclass
class JobOptions:
    inputs: list[str]
    target: str
    scale: int = 1
    speed: float | None = 1.0  # None = max
    partitions: int | None = None  # default: Spark's default parallelism
    timeout: float = 10.0
    grace: float = 1.0
    start_delay: float = 1.0
    topic_map: dict[str, str] = field(default_factory=dict)
    broker_map: dict[str, str] = field(default_factory=dict)  # recorded broker name -> target name
    frames_cache: str | None = None
    outcomes: str | None = None
    report: str | None = None
    html: str | None = None
    progress: bool = True
    startup_s: float | None = None  # SparkSession start-up, measured by the caller
    masters: dict[str, str] | None = None  # target brokers if the caller probed already


def _say(opts: JobOptions, msg: str) -> None:
    if opts.progress:
        print(f"[spark-replay] {msg}", file=sys.stderr, flush=True)


# --- environment ----------------------------------------------------------------------------------


def check_java() -> str:
    """The java executable Spark will use, or JobError saying how to get one."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java:
        return java
    raise JobError(
        "Java not found: Spark needs a Java 17+ runtime. Install one (e.g. apt-get install "
        "openjdk-17-jre-headless) or set JAVA_HOME."
    )


def under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local_master(master: str | None) -> bool:
    """local / local[N] / local[*]: executors are threads of the driver's JVM and run its Python."""
    return master is None or master == "local" or master.startswith("local[")


def make_session(
    master: str | None = "local[2]",
    *,
    app_name: str = "rmqgate-spark-replay",
    conf: Sequence[tuple[str, str]] = (),
    quiet: bool = True,
) -> Any:
    """A SparkSession with rmqgate's defaults: loopback bind, no UI, quiet log, few shuffle partitions."""
    if not under_spark_submit():
        check_java()
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a declared extra
        raise JobError("pyspark is not installed (pip install 'rmqgate[spark]')") from exc
    given = dict(conf)
    local = is_local_master(master)
    if given.get("spark.pyspark.python"):
        # read from the environment when the context starts (spark-submit does this for its driver)
        os.environ["PYSPARK_PYTHON"] = given["spark.pyspark.python"]
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # executors of a local master are this machine's Python: the one rmqgate is installed in
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master and not under_spark_submit():
        builder = builder.master(master)
    elif master:
        builder = builder.config("spark.master", master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "false",
        # a retried replay task would send its requests twice: fail the job instead
        "spark.task.maxFailures": "1",
    }
    if local:
        defaults["spark.driver.host"] = os.environ["SPARK_LOCAL_IP"]
        defaults["spark.driver.bindAddress"] = os.environ["SPARK_LOCAL_IP"]
    if quiet:
        opt = f"-Dlog4j2.configurationFile=file:{QUIET_LOG4J}"
        defaults["spark.driver.extraJavaOptions"] = opt
        defaults["spark.executor.extraJavaOptions"] = opt
    for k, v in {**defaults, **given}.items():
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway" in str(exc):
            raise JobError(f"Spark could not start its JVM: {exc}") from exc
        raise
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- target ---------------------------------------------------------------------------------------


def probe_target(namesrv: str, timeout: float = 5.0) -> dict[str, str]:
    """Broker name -> master address from the target name server; JobError if it cannot be reached."""
    _host, sep, port = namesrv.rpartition(":")
    if not sep or not port.isdigit():
        raise JobError(f"--target must be NAMESRV_HOST:PORT, got {namesrv!r}")
    try:
        return asyncio.run(discover_brokers(namesrv, timeout))
    except (OSError, TimeoutError) as exc:
        raise JobError(f"target name server {namesrv} is unreachable: {exc or type(exc).__name__}") from None
    except Exception as exc:
        raise JobError(f"target name server {namesrv} sent an unreadable cluster info: {exc}") from None


# --- stage 1: frames ------------------------------------------------------------------------------


def _is_parquet(path: str) -> bool:
    p = path.rstrip("/")
    if p.endswith(".parquet"):
        return True
    local = Path(p[5:] if p.startswith("file:") else p)
    return local.is_dir() and any(local.glob("*.parquet"))


def _hadoop_exists(spark: Any, path: str) -> bool:
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(jpath))


def qualify(spark: Any, path: str) -> str:
    """``path`` as a full URI of its file system, resolved on the driver: a relative path is the
    default file system's working directory (HDFS: /user/NAME), never an executor's cwd."""
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = jpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return str(fs.makeQualified(jpath).toString())


def scratch_dir(spark: Any, name: str) -> str:
    """Where the job keeps ``name`` (frames cache, outcomes) unless told: the temp directory when the
    executors share the driver's disk (a local master or a file: default file system), else
    ``name`` under the user's directory on the cluster's default file system (HDFS, S3, ...)."""
    default_fs = str(spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///")
    if is_local_master(spark.sparkContext.master) or default_fs.startswith("file:"):
        return qualify(spark, os.path.join(tempfile.gettempdir(), name))
    return qualify(spark, name)


def ship_code(spark: Any, opts: JobOptions) -> dict[str, Any] | None:
    """Give executors outside the driver's process the code their tasks import (spark/ship.py).

    Off with ``spark.rmqgate.shipCode=false`` (executors whose Python has rmqgate installed)."""
    sc = spark.sparkContext
    if is_local_master(sc.master) or sc.getConf().get("spark.rmqgate.shipCode", "true") == "false":
        return None
    from rmqgate.spark.ship import pyfiles_zip

    t = time.perf_counter()
    path = pyfiles_zip()
    sc.addPyFile(str(path))
    info = {"py_files": str(path), "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - t, 3)}
    _say(opts, f"executors get {path.name} ({info['bytes'] / 1024:.0f} KiB) with addPyFile")
    return info


def _stage_for_add_file(uris: Sequence[str], stage: Path) -> list[tuple[str, str]]:
    """(uri, local file) for inputs SparkContext.addFile distributes. Executors get each under its
    base name (addFile resolves links), so inputs sharing a base name are copied apart into ``stage``."""
    from urllib.parse import unquote, urlparse

    local = [Path(unquote(urlparse(u).path)) if u.startswith("file:") else Path(u) for u in uris]
    names = [p.name for p in local]
    out = []
    for uri, path in zip(uris, local, strict=True):
        if names.count(path.name) > 1:
            stage.mkdir(exist_ok=True)
            copy = stage / f"{hashlib.sha1(uri.encode()).hexdigest()[:10]}-{path.name}"
            shutil.copyfile(path, copy)
            path = copy
        out.append((uri, str(path)))
    return out


def _local_meta(paths: Sequence[str]) -> list[tuple[str, str, int]] | None:
    """(uri, mtime, size) of plain local files without a Spark job; None if any is not one."""
    out = []
    for p in paths:
        local = p[5:] if p.startswith("file:") else p
        if "://" in p and not p.startswith("file:"):
            return None
        path = Path(local)
        if not path.is_file():
            return None
        st = path.stat()
        out.append((path.resolve().as_uri(), str(st.st_mtime_ns), st.st_size))
    return out


def load_frames(spark: Any, inputs: Sequence[str], cache_dir: str | None, opts: JobOptions) -> Any:
    """The frames DataFrame for ``inputs``: Parquet inputs as they are, the others converted once."""
    parquet = [qualify(spark, p) for p in inputs if _is_parquet(p)]
    raw_inputs = [p for p in inputs if not _is_parquet(p)]
    frames = [spark.read.parquet(*parquet)] if parquet else []
    if raw_inputs:
        meta = _local_meta(raw_inputs)
        driver_files = meta is not None
        if meta is None:  # URIs (hdfs://, s3a://, ...) or globs: ask the file system through Spark
            meta = [
                (m["path"], str(m["modificationTime"]), m["length"])
                for m in spark.read.format("binaryFile")
                .load(raw_inputs)
                .select("path", "modificationTime", "length")
                .collect()
            ]
        meta.sort()
        if not meta:
            raise JobError(f"no input files found at {', '.join(raw_inputs)}")
        key = hashlib.sha1(repr(meta).encode()).hexdigest()[:16]
        cache = qualify(spark, cache_dir) if cache_dir else scratch_dir(spark, "rmqgate-spark-frames")
        out = f"{cache.rstrip('/')}/frames-{key}.parquet"
        if _hadoop_exists(spark, f"{out}/_SUCCESS"):
            _say(opts, f"frames: reusing {out}")
        else:
            t = time.perf_counter()
            paths = [m[0] for m in meta]
            sc = spark.sparkContext
            stage = Path(tempfile.gettempdir()) / f"rmqgate-spark-inputs-{uuid.uuid4().hex}"
            if driver_files and not is_local_master(sc.master):
                rdd = _ship_inputs(sc, paths, stage)
            else:  # executors read the inputs where they are
                rdd = sc.binaryFiles(",".join(paths), minPartitions=len(paths)).flatMap(
                    lambda kv: rows_from_bytes(kv[0], kv[1])
                )
            rdd = rdd.map(lambda row: tuple(row[name] for name, _ in FRAME_COLUMNS))
            try:
                spark.createDataFrame(rdd, FRAME_DDL).write.mode("overwrite").parquet(out)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
            _say(opts, f"frames: {len(paths)} input(s) decoded to {out} in {time.perf_counter() - t:.1f} s")
        frames.append(spark.read.parquet(out))
    df = frames[0]
    for more in frames[1:]:
        df = df.unionByName(more)
    return df


def _ship_inputs(sc: Any, uris: Sequence[str], stage: Path) -> Any:
    """Frame rows of inputs only the driver can read: pcaps go to executors with addFile and are
    decoded there; .rmqcap files (zstd, which executors need not have) are decoded here."""
    shipped, here = [], []
    for uri, link in _stage_for_add_file(uris, stage):
        with open(link, "rb") as fh:
            (shipped if is_pcap(fh.read(4)) else here).append((uri, link))
    rdds = []
    if shipped:
        for _uri, link in shipped:
            sc.addFile(link)
        names = [(uri, os.path.basename(link)) for uri, link in shipped]
        rdds.append(sc.parallelize(names, len(names)).flatMap(lambda kv: rows_from_shipped(kv[0], kv[1])))
    for uri, link in here:
        rows = list(rows_from_frames(uri, read_input(link)))
        rdds.append(sc.parallelize(rows, max(1, min(sc.defaultParallelism, len(rows) // 5000 + 1))))
    return rdds[0] if len(rdds) == 1 else sc.union(rdds)


# --- stage 2: plan --------------------------------------------------------------------------------


def task_slots(sc: Any) -> int:
    """Tasks the executors registered now run at once (0 if Spark does not say). Replay tasks must all
    run together: Spark's default parallelism is at least 2 even for one single-core executor."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:
        return 0


def assign_partitions(weights: dict[Any, int], partitions: int) -> dict[Any, int]:
    """Greedy longest-first balance of units over partitions by request count."""
    load = [0] * partitions
    out = {}
    for key, w in sorted(weights.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        i = min(range(partitions), key=lambda j: (load[j], j))
        out[key] = i
        load[i] += w
    return out


def plan_units(
    frames: Any, scale: int
) -> tuple[dict[tuple[str, int], int], dict[str, float], dict[str, str]]:
    """((conn, clone) -> request count, conn -> time origin, server -> role) for replayable connections."""
    from pyspark.sql import functions as F

    c2s_request = (F.col("direction") == "c2s") & F.col("is_request")
    rows = (
        frames.groupBy("conn", "source", "server")
        .agg(
            F.min("ts").alias("t0"),
            F.sum(c2s_request.cast("int")).alias("n"),
            F.collect_set(F.when(c2s_request, F.col("code"))).alias("codes"),
            F.max("role").alias("role"),
        )
        .collect()
    )
    t0s: dict[str, float] = {}
    for r in rows:
        t0s[r["source"]] = min(r["t0"], t0s.get(r["source"], r["t0"]))
    weights: dict[tuple[str, int], int] = {}
    origin: dict[str, float] = {}
    roles: dict[str, str] = {}
    for r in rows:
        role = role_of(r["codes"], r["role"] or "")
        if role == "broker-self" or not r["n"]:
            continue
        roles[r["server"]] = role
        origin[r["conn"]] = t0s[r["source"]]
        for k in range(scale):
            weights[(r["conn"], k)] = int(r["n"])
    return weights, origin, roles


def run_job(spark: Any, opts: JobOptions) -> dict[str, Any]:
    """Run the whole job in ``spark``; returns the report (also written where ``opts`` says)."""
    from pyspark.sql import functions as F

    from rmqgate.spark.report import aggregate, write_outputs

    if opts.scale < 1:
        raise JobError("--scale must be at least 1")
    t_all = time.perf_counter()
    masters = opts.masters if opts.masters is not None else probe_target(opts.target)
    sc = spark.sparkContext
    shipped = ship_code(spark, opts)

    t = time.perf_counter()
    frames = load_frames(spark, opts.inputs, opts.frames_cache, opts)
    weights, origin, roles = plan_units(frames, opts.scale)
    if not weights:
        raise JobError("the inputs hold no client requests to replay")
    names = broker_names_from_routes(
        route_bodies_from_rows(
            frames.where(
                (F.col("req_code") == int(RequestCode.GET_ROUTEINFO_BY_TOPIC)) & (F.col("code") == 0)
            )
            .select("req_code", "code", "raw")
            .collect()
        )
    )
    unmatched = []
    for server, role in sorted(roles.items()):
        name = broker_name_of(server, names)
        if role == "broker" and opts.broker_map.get(name or "", name) not in masters:
            unmatched.append(f"{server} ({name or 'name unknown'})")
    if unmatched and masters:  # the engine sends them to the first target broker by name
        _say(
            opts,
            f"warning: the target has no broker for {', '.join(unmatched)}; replayed on "
            f"{sorted(masters)[0]} (target brokers: {masters})",
        )
    slots = task_slots(sc)
    partitions = max(
        1, opts.partitions or (min(sc.defaultParallelism, slots) if slots else sc.defaultParallelism)
    )
    if slots and partitions > slots:
        _say(
            opts,
            f"warning: {partitions} replay tasks, {slots} run at once: the others start their connections late",
        )
    assign = assign_partitions(weights, partitions)
    ingest_s = time.perf_counter() - t

    t = time.perf_counter()
    scale = opts.scale

    def units(row: Any) -> list[tuple[tuple[str, int], Any]]:
        if row["conn"] not in origin:
            return []
        return [((row["conn"], k), row) for k in range(scale)]

    unit_ids = {key: i for i, key in enumerate(sorted(weights))}

    def build(kv: tuple[tuple[str, int], Any]) -> Any:
        (conn, clone), rows = kv
        pc = planned_connection(rows, origin[conn], clone, unit_ids[(conn, clone)], names)
        if pc is None:
            return None
        messages = [message_count(decode_frame(r.raw)) if r.code in SEND_CODES else 0 for r in pc.requests]
        return ReplayUnit(conn, clone, "namesrv" if pc.role == Role.NAMESRV else "broker", pc, messages)

    plans = (
        frames.select(*PLAN_COLUMNS)
        .rdd.flatMap(units)
        .groupByKey(numPartitions=partitions, partitionFunc=lambda key: assign[key])
        .map(build)
        .filter(lambda p: p is not None)
        .persist()
    )
    n_plans = plans.count()
    n_requests = plans.map(lambda p: len(p.conn.requests)).sum()
    plan_s = time.perf_counter() - t
    _say(
        opts,
        f"plan: {n_plans} connection(s) ({len(origin)} recorded x scale {scale}), {n_requests} requests, "
        f"{partitions} partition(s), built in {plan_s:.1f} s",
    )

    ropts = ReplayOptions(
        speed=opts.speed,
        topic_map=dict(opts.topic_map),
        broker_map=dict(opts.broker_map),
        request_timeout=opts.timeout,
        unanswered_timeout=opts.grace,
    )
    local = is_local_master(sc.master)
    scratch = None
    if opts.outcomes:
        outcomes_path = qualify(spark, opts.outcomes)
    elif local:
        scratch = tempfile.mkdtemp(prefix="rmqgate-spark-outcomes-")
        outcomes_path = os.path.join(scratch, "outcomes.parquet")
    else:  # executors write it: on the cluster's default file system, kept for the user
        outcomes_path = f"{scratch_dir(spark, 'rmqgate-spark-outcomes')}/{uuid.uuid4().hex}.parquet"
    start_at = time.time() + opts.start_delay
    target = opts.target
    replay = plans.mapPartitionsWithIndex(lambda i, it: run_task(it, masters, target, start_at, ropts, i))
    t = time.perf_counter()
    _say(opts, f"replaying against {opts.target} at speed {opts.speed or 'max'} ...")
    spark.createDataFrame(replay, OUTCOME_DDL).write.mode("overwrite").parquet(outcomes_path)
    replay_s = time.perf_counter() - t
    plans.unpersist()

    t = time.perf_counter()
    outcomes = spark.read.parquet(outcomes_path).cache()
    report = aggregate(outcomes)
    outcomes.unpersist()
    aggregate_s = time.perf_counter() - t
    report["spark"] = {
        "master": sc.master,
        "default_parallelism": sc.defaultParallelism,
        "partitions": partitions,
        "scale": opts.scale,
        "speed": opts.speed if opts.speed else "max",
        "inputs": list(opts.inputs),
        "target": opts.target,
        "target_brokers": masters,
        "startup_s": round(opts.startup_s, 3) if opts.startup_s is not None else None,
        "ingest_s": round(ingest_s, 3),
        "plan_s": round(plan_s, 3),
        "replay_wall_s": round(replay_s, 3),
        "aggregate_s": round(aggregate_s, 3),
        "job_s": round(time.perf_counter() - t_all, 3),
        "outcomes": None if scratch else outcomes_path,
        "shipped": shipped,
    }
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    write_outputs(report, opts.report, opts.html)
    lat = report["latency_ms"]
    _say(
        opts,
        f"done: {report['requests']} requests, {report['responses']} responses, {report['errors']} errors, "
        f"{report['mismatches']} mismatches in {report['duration_s']} s "
        f"({report['requests_per_s']} req/s; p50 {lat['p50']} ms, p99 {lat['p99']} ms)",
    )
    return report
