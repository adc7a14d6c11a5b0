"""Fixtures for the Spark job tests: one local[2] session per test session, a live rmqgate, a responder."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from rmqgate.spark.job import make_session

    session = make_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def frames_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One Parquet frames cache for the session: each capture is decoded once."""
    return str(tmp_path_factory.mktemp("frames"))


@pytest.fixture(scope="session")
def responder() -> Iterator[str]:
    from rmqgate.spark.responder import start_in_subprocess

    proc, port = start_in_subprocess()
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _cluster_has_broker(namesrv: str) -> bool:
    try:
        async with await RemotingClient.connect_addr(namesrv, timeout=1.0) as client:
            resp = await client.invoke(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 2.0)
    except (OSError, TimeoutError):
        return False
    return resp.code == ResponseCode.SUCCESS and b"brokerAddrs" in bytes(resp.body or b"")


@pytest.fixture(scope="module")
def rmqgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`rmqgate serve --role all` on free ports; yields the name server address once a broker registered."""
    work = tmp_path_factory.mktemp("rmqgate")
    log_path = work / "serve.log"
    args = [sys.executable, "-m", "rmqgate.tools.cli", "serve", "--role", "all", "--listen", "127.0.0.1"]
    args += ["--namesrv-port", "0", "--broker-port", "0", "--store", str(work / "store")]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
    try:
        namesrv = _wait_ready(proc, log_path)
        yield namesrv
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"rmqgate serve exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        for line in log_path.read_text().splitlines():
            if line.startswith("rmqgate ready:"):
                # "rmqgate ready: namesrv HOST:PORT broker HOST:PORT"
                namesrv = line.split("namesrv", 1)[1].split()[0]
                if _port_open(int(namesrv.rsplit(":", 1)[1])) and asyncio.run(_cluster_has_broker(namesrv)):
                    return namesrv
        time.sleep(0.1)
    pytest.fail(f"rmqgate serve not ready after {timeout} s:\n{log_path.read_text()[-3000:]}")
