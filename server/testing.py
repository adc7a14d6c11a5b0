"""Helpers for tests of rmqgate.server (no pytest-asyncio here: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async def`` test in a fresh event loop (with a hard timeout)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            await asyncio.wait_for(fn(*args, **kwargs), 120)

        asyncio.run(main())

    return wrapper
