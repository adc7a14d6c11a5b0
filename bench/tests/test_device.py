"""The device machine's scale-out run (bench/device/) without building its bundle: the scripts parse,
the bundle's jar and module lists cover what the stock launchers start, scaleout.sh's import links
resolve every package pyproject declares, and the report reads broker.py's CSV rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from rmqgate.compat_tests import java

BENCH = Path(__file__).resolve().parent.parent
DEVICE = BENCH / "device"
REPO = BENCH.parent

sys.path.insert(0, str(BENCH))


def listed(name: str) -> list[str]:
    lines = (DEVICE / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def stock_lib() -> Path:
    home = java.rocketmq_home()
    if not (home / "bin" / "broker.sh").exists():  # (make test's second run needs it too)
        pytest.fail(f"no stock RocketMQ distribution at {home} (set ROCKETMQ_HOME)")
    return home


def launched_main_classes(home: Path) -> list[str]:
    """The classes the name server, broker and benchmark Producer launchers start."""
    mains = []
    for launcher in ("namesrv.sh", "broker.sh", "benchmark.sh"):
        text = (home / "bin" / launcher).read_text()
        found = re.findall(r"(org\.apache\.rocketmq\.[\w.]+?)(\.\$main|\"|\s)", text)
        assert found, f"no main class in bin/{launcher}"
        for name, tail in found:
            mains.append(name + (".Producer" if tail == ".$main" else ""))
    return mains


@pytest.mark.parametrize("script", ["bundle.sh", "scaleout.sh"])
def test_script_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(DEVICE / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_listed_jars_exist_and_hold_the_launched_classes() -> None:
    home = stock_lib()
    jars = listed("jars")
    assert len(set(jars)) == len(jars), "a jar is listed twice"
    missing = [jar for jar in jars if not (home / "lib" / jar).exists()]
    assert not missing, f"listed but not in {home / 'lib'}: {missing}"
    classes = {n for jar in jars for n in zipfile.ZipFile(home / "lib" / jar).namelist()}
    mains = launched_main_classes(home)
    assert {"org.apache.rocketmq.broker.BrokerStartup", "org.apache.rocketmq.namesrv.NamesrvStartup",
            "org.apache.rocketmq.example.benchmark.Producer"} <= set(mains)  # fmt: skip
    absent = [m for m in mains if m.replace(".", "/") + ".class" not in classes]
    assert not absent, f"launched classes in no listed jar: {absent}"


def test_listed_modules_hold_what_the_launchers_open() -> None:
    env = (stock_lib() / "bin" / "env.sh").read_text()
    opened = set(re.findall(r"--add-(?:opens|exports)=([\w.]+)/", env))
    assert opened, "env.sh opens no module"
    assert opened <= set(listed("jre-modules")), f"opened but not in the runtime: {opened}"


@pytest.mark.java
def test_jdeps_finds_nothing_outside_the_lists(tmp_path: Path) -> None:
    """jdeps over the three launched jars with the whole stock lib/ on the class path: every module
    and every jar it reaches is listed."""
    reason = java.missing()
    if reason:
        pytest.fail(reason)  # the java mark selects this test: a missing JDK is a failure, not a pass
    lib = stock_lib() / "lib"
    jars = listed("jars")
    entry = [
        "rocketmq-namesrv-4.9.8.jar",
        "rocketmq-broker-4.9.8.jar",
        "rocketmq-example-benchmark-4.9.8.jar",
    ]
    classpath = ":".join(str(jar) for jar in sorted(lib.glob("*.jar")))
    base = ["jdeps", "--multi-release", "17", "-q", "--ignore-missing-deps", "--recursive", "-cp", classpath]
    modules = subprocess.run(
        [*base, "--print-module-deps", *(str(lib / j) for j in entry)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert modules.returncode == 0, modules.stderr
    needed = set(modules.stdout.strip().splitlines()[-1].split(","))
    assert needed <= set(listed("jre-modules")), f"jdeps needs {sorted(needed - set(listed('jre-modules')))}"
    summary = subprocess.run(
        [*base, "-summary", *(str(lib / j) for j in entry)], capture_output=True, text=True, timeout=240
    )
    assert summary.returncode == 0, summary.stderr
    reached = {Path(jar).name for jar in re.findall(r"-> (\S+\.jar)", summary.stdout)}
    assert reached, summary.stdout[-2000:]
    assert reached <= set(jars), f"reached but not listed: {sorted(reached - set(jars))}"


def test_import_links_resolve_every_declared_package(tmp_path: Path) -> None:
    """scaleout.sh's links make each of pyproject's packages importable from this checkout."""
    text = (DEVICE / "scaleout.sh").read_text()
    snippet = re.search(r"<<'EOF'\n(.*?)\nEOF\n", text, re.DOTALL)
    assert snippet, "scaleout.sh no longer builds its links in an EOF heredoc"
    target = tmp_path / "path" / "rmqgate"
    subprocess.run(
        [sys.executable, "-", str(REPO), str(target)], input=snippet.group(1), text=True, check=True
    )
    with (REPO / "pyproject.toml").open("rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    # -S: no site-packages, so no installed rmqgate can answer instead of the links
    probe = "import importlib.util, sys\nfor p in sys.argv[1:]: print(p, importlib.util.find_spec(p).origin)"
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe, *packages],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "path")},
    )
    assert done.returncode == 0, done.stderr
    origins = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for package in packages:
        folder = package.removeprefix("rmqgate.").replace(".", "/")
        assert origins[package] == str(target / folder / "__init__.py"), origins


def test_report_reads_the_runs(tmp_path: Path) -> None:
    import _scaleout

    def run(round_no: int, server: str, brokers: int, tps: float) -> _scaleout.ScaleRun:
        return _scaleout.ScaleRun(
            round=round_no, server=server, brokers=brokers, producers=brokers, threads=8, seconds=20.0,
            tps=tps, server_cores=1.2 * brokers, producer_cores=0.5 * brokers, busy_cores=2.0 * brokers,
            cpus=16, cpu_us_per_msg=40.0, failed=0,
        )  # fmt: skip

    rows = tmp_path / "scaleout.csv"
    for round_no in (1, 2):
        _scaleout.append_csv(rows, run(round_no, "Java 4.9.8, 1 broker", 1, 30000.0))
        _scaleout.append_csv(rows, run(round_no, "rmqgate --brokers 1", 1, 20000.0 + round_no))
        _scaleout.append_csv(rows, run(round_no, "rmqgate --brokers 2", 2, 36000.0))
        _scaleout.append_csv(rows, run(round_no, "rmqgate --brokers 4", 4, 50000.0))
    done = subprocess.run(
        [sys.executable, str(DEVICE / "report.py"), str(rows), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "scaleout.md").read_text().splitlines()
    assert all(line in done.stdout.splitlines() for line in table)
    cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in table[2:]}
    one = 20001.5
    assert cells["rmqgate --brokers 2"][5:7] == [f"{36000 / (2 * one):.2f}", "yes"]
    assert cells["rmqgate --brokers 4"][5:7] == [f"{50000 / (4 * one):.2f}", "no"]
    assert cells["rmqgate --brokers 4"][-3:] == ["2.0", "8.0 / 16", "8.0 |"]  # producer, busy, idle cores
    assert cells["Java 4.9.8, 1 broker"][2] == "2"  # runs
    assert "plot:" in done.stdout  # (matplotlib is a test dependency)
    assert (tmp_path / "scaleout.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_lists_parse_as_taskset_reads_them() -> None:
    import _scaleout

    assert _scaleout.parse_cpus("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert _scaleout.parse_cpus("5") == {5}


def test_children_started_in_the_block_run_on_the_given_cpus() -> None:
    import _scaleout

    cpus = sorted(os.sched_getaffinity(0))
    before = set(cpus)
    probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    with _scaleout.children_on({cpus[-1]}):
        inside = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    after = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    assert inside == str([cpus[-1]])
    assert after == str(cpus)
    assert os.sched_getaffinity(0) == before
