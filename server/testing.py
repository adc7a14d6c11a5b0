"""Helpers for tests of rmqgate.server (no pytest-asyncio here: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any

from rmqgate.wire import RemotingCommand


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
