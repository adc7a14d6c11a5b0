"""The per-task replayer on real sockets: outcomes, pacing, unanswered requests, server requests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rmqgate.server.testing import async_test
from rmqgate.spark.executor import OUTCOME_COLUMNS, ReplayOptions, replay_connection, replay_plans
from rmqgate.spark.plan import ConnPlan, Step
from rmqgate.spark.responder import Responder, cluster_info
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import FrameDecoder, encode_frame

COL = {name: i for i, (name, _) in enumerate(OUTCOME_COLUMNS)}


def _step(
    seq: int, code: int, *, t: float = 0.0, expected: int | None = 0, oneway: bool = False, deps=()
) -> Step:
    cmd = RemotingCommand.request(code, {"topic": "T"}, oneway=oneway)
    return Step(seq, t, code, oneway, encode_frame(cmd), expected, tuple(deps), "T")


async def _serve(factory: Callable[[], asyncio.Protocol]) -> tuple[asyncio.base_events.Server, str]:
    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _col(rows: list[tuple[Any, ...]], name: str) -> list[Any]:
    return [r[COL[name]] for r in rows]


@async_test
async def test_every_step_gets_one_outcome_in_order() -> None:
    server, addr = await _serve(lambda: Responder(cluster_info("x:1")))
    async with server:
        steps = [_step(0, 34), _step(1, 38, deps=[0]), _step(2, 15, oneway=True, expected=None), _step(3, 14)]
        plan = ConnPlan("c", 0, "src", "broker", "orig:1", steps)
        rows = await replay_connection(plan, addr, time.time(), ReplayOptions(speed=None))
    assert _col(rows, "seq") == [0, 1, 2, 3]
    assert _col(rows, "status") == ["ok", "ok", "oneway", "ok"]
    assert _col(rows, "resp_code") == [0, 0, -1, 0]
    assert not any(_col(rows, "mismatch"))
    assert all(lat >= 0 for lat in _col(rows, "latency_ms")[:2])


@async_test
async def test_pacing_follows_recorded_time_scaled_by_speed() -> None:
    server, addr = await _serve(lambda: Responder(cluster_info("x:1")))
    async with server:
        steps = [_step(0, 34, t=0.0), _step(1, 34, t=0.4), _step(2, 34, t=0.8)]
        start = time.time() + 0.05
        rows = await replay_connection(
            ConnPlan("c", 0, "s", "broker", "o:1", steps), addr, start, ReplayOptions(speed=2.0)
        )
    sent = _col(rows, "sent_s")
    assert _col(rows, "sched_s") == [0.0, 0.2, 0.4]
    for s, want in zip(sent, (0.0, 0.2, 0.4), strict=True):
        assert want - 0.01 <= s <= want + 0.15


class Silent(asyncio.Protocol):
    """Reads and never answers (a parked long-poll that never comes back)."""

    def data_received(self, data: bytes) -> None:
        pass


@async_test
async def test_unanswered_is_not_an_error_but_a_missing_recorded_response_is() -> None:
    server, addr = await _serve(Silent)
    async with server:
        steps = [_step(0, 11, expected=None), _step(1, 14, expected=0)]
        opts = ReplayOptions(speed=None, timeout=0.3, grace=0.2)
        t = time.perf_counter()
        rows = await replay_connection(ConnPlan("c", 0, "s", "broker", "o:1", steps), addr, time.time(), opts)
        assert time.perf_counter() - t < 2.0
    assert _col(rows, "status") == ["unanswered", "timeout"]


@async_test
async def test_unroutable_and_refused_connections_are_reported_per_request() -> None:
    steps = [_step(0, 34), _step(1, 35)]
    plan = ConnPlan("c", 0, "s", "broker", "o:1", steps)
    rows = await replay_connection(plan, "", time.time(), ReplayOptions(speed=None))
    assert _col(rows, "status") == ["unroutable", "unroutable"]
    server, addr = await _serve(Silent)
    server.close()
    await server.wait_closed()
    rows = await replay_connection(plan, addr, time.time(), ReplayOptions(speed=None, connect_timeout=1.0))
    assert _col(rows, "status") == ["conn_error", "conn_error"]
    assert "connect" in _col(rows, "error")[0]


class AsksFirst(asyncio.Protocol):
    """Before answering the first request, asks the client GET_CONSUMER_RUNNING_INFO and keeps the reply."""

    replies: list[RemotingCommand] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.decoder = FrameDecoder()
        self.waiting: list[RemotingCommand] = []

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            if cmd.flag & RESPONSE_FLAG:
                AsksFirst.replies.append(cmd)
                for req in self.waiting:
                    self.transport.write(encode_frame(req.response(ResponseCode.SUCCESS)))
                self.waiting.clear()
            elif not cmd.flag & ONEWAY_FLAG:
                if not AsksFirst.replies:
                    self.waiting.append(cmd)
                    ask = RemotingCommand.request(
                        RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g"}, opaque=777
                    )
                    self.transport.write(encode_frame(ask))
                else:
                    self.transport.write(encode_frame(cmd.response(ResponseCode.SUCCESS)))


@async_test
async def test_server_requests_get_the_recorded_client_answer() -> None:
    recorded = RemotingCommand(0, opaque=5, flag=RESPONSE_FLAG, body=b'{"properties":{}}')
    plan = ConnPlan("c", 0, "s", "broker", "o:1", [_step(0, 34)], {307: [encode_frame(recorded)]})
    AsksFirst.replies = []
    server, addr = await _serve(AsksFirst)
    async with server:
        rows = await replay_connection(plan, addr, time.time(), ReplayOptions(speed=None, timeout=3))
    assert _col(rows, "status") == ["ok"]
    assert len(AsksFirst.replies) == 1
    assert AsksFirst.replies[0].opaque == 777 and bytes(AsksFirst.replies[0].body) == b'{"properties":{}}'


@async_test
async def test_many_connections_in_one_task() -> None:
    server, addr = await _serve(lambda: Responder(cluster_info("x:1")))
    async with server:
        plans = [
            ConnPlan(
                f"c{i}",
                k,
                "s",
                "broker",
                "o:1",
                [_step(j, 310, deps=[j - 1] if j else ()) for j in range(20)],
            )
            for i in range(5)
            for k in range(4)
        ]
        rows = await replay_plans(plans, {"o:1": addr}, time.time(), ReplayOptions(speed=None), task=3)
    assert len(rows) == 400
    assert set(_col(rows, "status")) == {"ok"}
    assert set(_col(rows, "task")) == {3}
    assert len({(c, k) for c, k in zip(_col(rows, "conn"), _col(rows, "clone"), strict=True)}) == 20
