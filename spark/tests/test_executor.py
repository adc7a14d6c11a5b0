"""A Spark task's rows: one per replayed request, in order, with its status, on real sockets."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rmqgate.spark.executor import OUTCOME_COLUMNS, ReplayUnit, run_task
from rmqgate.tools.capture import Role
from rmqgate.tools.replay import ReplayOptions
from rmqgate.tools.replay_plan import PlannedConnection, PlannedRequest, header_ext
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import encode_frame

COL = {name: i for i, (name, _) in enumerate(OUTCOME_COLUMNS)}


class Silent(asyncio.Protocol):
    """Reads and never answers (a parked long-poll that never comes back)."""

    def data_received(self, data: bytes) -> None:
        pass


@pytest.fixture
def silent() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Silent, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.close()


def _unit(conn_id: int, clone: int, reqs: list[tuple[int, bool, float | None]]) -> ReplayUnit:
    pc = PlannedConnection(conn_id, Role.NAMESRV, "recorded:9876", None)
    for i, (code, oneway, resp_ts) in enumerate(reqs):
        cmd = RemotingCommand.request(code, {"topic": "T"}, opaque=i + 1, oneway=oneway)
        raw = encode_frame(cmd)
        req = PlannedRequest(i * 0.001, raw, code, i + 1, cmd.flag, header_ext(raw), resp_ts)
        req.resp_code = None if resp_ts is None else 0
        pc.requests.append(req)
    return ReplayUnit(
        "c", clone, "namesrv", pc, [1 if code == RequestCode.SEND_MESSAGE_V2 else 0 for code, _, _ in reqs]
    )


def _col(rows: list[tuple[Any, ...]], name: str) -> list[Any]:
    return [r[COL[name]] for r in rows]


def test_rows_follow_the_requests_with_their_status(silent: str) -> None:
    units = [
        _unit(1, 0, [(RequestCode.PULL_MESSAGE, False, None), (RequestCode.UNREGISTER_CLIENT, True, None)]),
        _unit(2, 1, [(RequestCode.SEND_MESSAGE_V2, False, 0.5)]),
    ]
    opts = ReplayOptions(speed=None, request_timeout=0.3, unanswered_timeout=0.2)
    started = time.perf_counter()
    rows = run_task(units, {}, silent, time.time(), opts, task=3)
    assert time.perf_counter() - started < 3.0
    assert all(len(r) == len(OUTCOME_COLUMNS) for r in rows)
    by_seq = sorted(zip(_col(rows, "clone"), _col(rows, "seq"), _col(rows, "status"), strict=True))
    assert by_seq == [(0, 0, "unanswered"), (0, 1, "oneway"), (1, 0, "timeout")]
    assert set(_col(rows, "task")) == {3}
    assert sorted(_col(rows, "messages")) == [0, 0, 1]
    assert set(_col(rows, "resp_code")) == {-1}
    assert sorted(_col(rows, "expected")) == [-1, -1, 0]
    assert len(set(_col(rows, "task_cpu_s"))) == 1 and rows[0][COL["task_cpu_s"]] > 0
