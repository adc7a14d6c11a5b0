"""Helpers for tests of rmqgate.server (no pytest-asyncio here: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqgate.tools.pcap import read_frames
from rmqgate.wire import RemotingCommand
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.message import MessageExt, decode_message, iter_messages

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.config import BrokerConfig


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async def`` test in a fresh event loop (with a hard timeout)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            await asyncio.wait_for(fn(*args, **kwargs), 120)

        asyncio.run(main())

    return wrapper


def pcap_requests(path: str | os.PathLike[str], code: int | None = None) -> list[RemotingCommand]:
    """Client requests (not responses) of a capture, in capture order (rmqgate.tools.pcap)."""
    from rmqgate.tools.pcap import read_frames

    out: list[RemotingCommand] = []
    for frame in read_frames(path):
        cmd = frame.command
        if cmd is not None and not cmd.is_response and (code is None or cmd.code == code):
            out.append(cmd)
    return out


def small_store(config: BrokerConfig, root: str | os.PathLike[str]) -> BrokerConfig:
    """``config`` on a real store in ``root`` with small segments (tests roll files cheaply)."""
    config.storePathRootDir = str(root)
    config.mappedFileSizeCommitLog = 1 << 20
    config.mappedFileSizeConsumeQueue = 6000
    config.maxHashSlotNum = 5000
    config.maxIndexNum = 20000
    return config


def stored(broker: BrokerController, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of one queue, as the broker's store holds it."""
    got = broker.store.get_messages(topic, queue_id, 0, 1000)
    return [decode_message(bytes(b), 0) for b in got.buffers]


async def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``predicate`` until it returns something true (returned); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def captured_requests_and_pulls(pcap: Path) -> Iterator[RemotingCommand | MessageExt]:
    """A capture's requests, and each message a successful PULL_MESSAGE delivered, in capture order:
    what corpus-derived tests compare rmqgate with."""
    codes: dict[tuple[int, int], int] = {}
    for frame in read_frames(pcap):
        cmd = frame.command
        if cmd is None:
            continue
        if not cmd.is_response:
            codes[(frame.conn_id, cmd.opaque)] = cmd.code
            yield cmd
        elif (
            codes.get((frame.conn_id, cmd.opaque)) == RequestCode.PULL_MESSAGE and cmd.code == 0 and cmd.body
        ):
            yield from iter_messages(cmd.body)
