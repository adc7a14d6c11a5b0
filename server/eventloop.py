"""Which event loop a server process runs: asyncio's own or uvloop (libuv), chosen by ``rmqgate serve
--event-loop`` or broker.conf's ``eventLoop`` key; ``auto`` takes uvloop where it is importable.

Both run the same protocol code (server/remoting.py); uvloop's transports honour the same write-buffer
limits, pause/resume reading and abort, and cost less per socket read and write.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
_T = TypeVar("_T")


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def resolve(choice: str | None) -> str:
    """``asyncio`` or ``uvloop`` for a choice of EVENT_LOOPS (None = auto); ValueError for another word,
    ImportError for ``uvloop`` where it is not installed."""
    choice = (choice or "auto").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop {choice!r}: expected one of {', '.join(EVENT_LOOPS)}")
    if choice == "auto":
        return "uvloop" if uvloop_available() else "asyncio"
    if choice == "uvloop" and not uvloop_available():
        raise ImportError("event loop uvloop: the uvloop package is not installed")
    return choice


def loop_factory(choice: str | None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A new-loop factory for ``asyncio.Runner`` for ``choice`` (see ``resolve``)."""
    if resolve(choice) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, _T], choice: str | None = None) -> _T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except (ValueError, ImportError):
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """``uvloop`` or ``asyncio``: the loop running now (or ``loop``)."""
    loop = loop or asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
