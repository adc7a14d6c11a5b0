"""JSON bodies as fastjson writes and reads them (thin wrappers over rmqgate.wire.fastjson).

fastjson writes bean fields sorted by name, skips nulls, and writes maps with integer keys as bare
numbers (``{0:"addr"}``) unless asked for standard JSON (PROTOCOL.md §6). Readers accept both.
"""

from __future__ import annotations

from typing import Any

from rmqgate.wire import fastjson
from rmqgate.wire.errors import BodyError


def dumpb(obj: Any, *, standard: bool = False) -> bytes:
    """Compact fastjson-style JSON, keys sorted. ``standard``: BrowserCompatible + QuoteFieldNames
    (integer keys quoted, non-ASCII escaped); otherwise integer keys stay bare like fastjson's default."""
    return fastjson.dumps(obj, quoted_keys=standard)


def dumps(obj: Any, *, standard: bool = False) -> str:
    return dumpb(obj, standard=standard).decode()


def loads(data: bytes | bytearray | memoryview | str | None, what: str = "body") -> Any:
    """Parse JSON from a Java peer; bare integer / object map keys (fastjson default) are accepted."""
    if data is None:
        raise BodyError(f"{what}: missing JSON body")
    try:
        return fastjson.loads(data)
    except BodyError as exc:
        raise BodyError(f"{what}: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyError(f"{what}: body is not valid JSON: {exc}") from None


def loads_object(data: bytes | bytearray | memoryview | str | None, what: str = "body") -> dict[str, Any]:
    obj = loads(data, what)
    if not isinstance(obj, dict):
        raise BodyError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj
