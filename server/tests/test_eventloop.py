"""The event loop choice: asyncio's own or uvloop, by ``--event-loop`` or broker.conf's eventLoop, and a
broker's send/pull round trip on each loop (real sockets, real store)."""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
from pathlib import Path

import pytest

from rmqgate.compat_tests.servers import ServerProcess
from rmqgate.compat_tests.wire_client import WireClient
from rmqgate.server import eventloop
from rmqgate.server.config import ConfigError
from rmqgate.server.main import add_arguments, build_config, event_loop
from rmqgate.server.testing import LocalBroker, async_test, pull_cmd, send_v2
from rmqgate.wire.codes import ResponseCode, SerializeType
from rmqgate.wire.message import iter_messages

# uvloop is a core dependency wherever pyproject's marker installs it: only there is its absence a skip.
needs_uvloop = pytest.mark.skipif(
    sys.platform == "win32" or platform.python_implementation() != "CPython",
    reason="uvloop is not a dependency on this platform",
)
LOOPS = ["asyncio", pytest.param("uvloop", marks=needs_uvloop)]


async def _round_trip(root: Path) -> str:
    async with LocalBroker(str(root)) as b:
        c = await b.client()
        try:
            for ser in (SerializeType.JSON, SerializeType.ROCKETMQ):
                for n in range(3):
                    resp = await c.invoke(send_v2("LoopT", b"m-%d-%d" % (ser, n), ser=ser))
                    assert resp.code == 0, resp.remark
                    assert resp.serialize_type == ser
                    assert resp.ext_fields["queueOffset"] == str(ser * 3 + n)
            resp = await c.invoke(pull_cmd("LoopT", 0))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            bodies = [bytes(m.body) for m in iter_messages(resp.body)]
            assert bodies == [b"m-%d-%d" % (ser, n) for ser in (0, 1) for n in range(3)]
        finally:
            await c.aclose()
        return eventloop.loop_name()


@pytest.mark.parametrize("loop", LOOPS)
def test_send_pull_round_trip_on_each_loop(loop: str, tmp_path: Path) -> None:
    assert eventloop.run(_round_trip(tmp_path), loop) == loop


def test_resolve() -> None:
    assert eventloop.resolve("asyncio") == "asyncio"
    assert eventloop.resolve(" AsyncIO ") == "asyncio"
    assert eventloop.resolve("auto") == eventloop.resolve(None)
    assert eventloop.resolve(None) == ("uvloop" if eventloop.uvloop_available() else "asyncio")
    with pytest.raises(ValueError, match="expected one of auto, asyncio, uvloop"):
        eventloop.resolve("tokio")


def test_unknown_loop_leaves_no_coroutine_unawaited() -> None:
    async def never() -> None:
        raise AssertionError("ran")

    coro = never()
    with pytest.raises(ValueError):
        eventloop.run(coro, "tokio")
    assert coro.cr_frame is None  # closed, not left for a "never awaited" warning


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_conf_key_and_flag(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\neventLoop=asyncio\n")
    assert event_loop(build_config(_args("--conf", str(conf)))) == "asyncio"
    assert event_loop(build_config(_args())) == eventloop.resolve("auto")
    conf.write_text("eventLoop=tokio\n")
    with pytest.raises(ConfigError, match="tokio"):
        event_loop(build_config(_args("--conf", str(conf))))
    assert (
        event_loop(build_config(_args("--conf", str(conf), "--event-loop", "asyncio"))) == "asyncio"
    )  # the flag wins


@needs_uvloop
def test_serve_runs_the_loop_asked_for(tmp_path: Path) -> None:
    for loop in ("uvloop", "asyncio"):
        (tmp_path / loop).mkdir()
        server = ServerProcess(tmp_path / loop, extra_args=("--event-loop", loop, "--log-level", "INFO"))
        try:
            server.wait_ready()
            with WireClient(server.broker) as b:
                assert b.create_topic("LoopT", 4).code == 0
                assert b.send_message("LoopT", b"hello").code == 0
                resp = b.pull("CG", "LoopT", 0, 0, sys_flag=4, subscription="*")
                assert resp.code == 0 and [bytes(m.body) for m in iter_messages(resp.body)] == [b"hello"]
        finally:
            assert server.stop() == 0
        assert f"event loop: {loop}".encode() in server.log_path.read_bytes()


def test_asyncio_loop_name() -> None:
    async def name() -> str:
        return eventloop.loop_name()

    assert asyncio.run(name()) == "asyncio"


@needs_uvloop
def test_async_test_runs_on_the_loop_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    @async_test
    async def probe() -> None:
        seen.append(eventloop.loop_name())

    monkeypatch.setenv("RMQGATE_TEST_EVENT_LOOP", "uvloop")
    probe()
    monkeypatch.delenv("RMQGATE_TEST_EVENT_LOOP")
    probe()
    assert seen == ["uvloop", "asyncio"]
