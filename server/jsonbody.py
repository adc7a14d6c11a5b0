"""JSON bodies as fastjson writes and reads them, plus typed access to extFields.

fastjson writes bean fields sorted by name, skips nulls, and writes maps with integer keys as bare
numbers (``{0:"addr"}``) unless asked for standard JSON (PROTOCOL.md §6). Readers accept both.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rmqgate.wire.errors import BodyError, HeaderFieldError
from rmqgate.wire.header import parse_bool

_encode_str = json.JSONEncoder(ensure_ascii=False).encode
_encode_str_ascii = json.JSONEncoder(ensure_ascii=True).encode


def dumps(obj: Any, *, standard: bool = False) -> str:
    """Compact fastjson-style JSON. ``standard``: quote integer keys and escape non-ASCII
    (BrowserCompatible + QuoteFieldNames); otherwise integer keys stay bare like fastjson's default."""
    enc = _encode_str_ascii if standard else _encode_str
    out: list[str] = []
    _dump(obj, out, enc, standard)
    return "".join(out)


def dumpb(obj: Any, *, standard: bool = False) -> bytes:
    return dumps(obj, standard=standard).encode()


def _dump(obj: Any, out: list[str], enc: Any, standard: bool) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for key, value in obj.items():
            if value is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(key, int) and not isinstance(key, bool):
                out.append(f'"{key}":' if standard else f"{key}:")
            else:
                out.append(enc(str(key)))
                out.append(":")
            _dump(value, out, enc, standard)
        out.append("}")
    elif isinstance(obj, list | tuple | set | frozenset):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _dump(value, out, enc, standard)
        out.append("]")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif obj is None:
        out.append("null")
    elif isinstance(obj, int | float):
        out.append(str(obj))
    else:
        out.append(enc(str(obj)))


_BARE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def loads(data: bytes | bytearray | memoryview | str | None, what: str = "body") -> Any:
    """Parse JSON from a Java peer; bare integer map keys (fastjson default) are accepted."""
    if data is None:
        raise BodyError(f"{what}: missing JSON body")
    try:
        text = data if isinstance(data, str) else str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"{what}: body is not UTF-8: {exc.reason}") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
    except ValueError as exc:
        raise BodyError(f"{what}: body is not valid JSON: {exc}") from None


def loads_object(data: bytes | bytearray | memoryview | str | None, what: str = "body") -> dict[str, Any]:
    obj = loads(data, what)
    if not isinstance(obj, dict):
        raise BodyError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


# --- extFields access (non-hot paths) -----------------------------------------------------------
def ext_str(ext: dict[str, str] | None, name: str, header: str = "header") -> str:
    if not ext or (value := ext.get(name)) is None:
        raise HeaderFieldError(f"{header}: required field {name!r} is missing")
    return value


def ext_int(ext: dict[str, str] | None, name: str, header: str = "header") -> int:
    value = ext_str(ext, name, header)
    try:
        return int(value)
    except ValueError:
        raise HeaderFieldError(f"{header}: field {name!r} = {value!r} is not a valid int") from None


def opt_str(ext: dict[str, str] | None, name: str, default: str | None = None) -> str | None:
    if not ext:
        return default
    value = ext.get(name)
    return default if value is None else value


def opt_int(
    ext: dict[str, str] | None, name: str, default: int | None = None, header: str = "header"
) -> int | None:
    if not ext or (value := ext.get(name)) is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise HeaderFieldError(f"{header}: field {name!r} = {value!r} is not a valid int") from None


def opt_bool(ext: dict[str, str] | None, name: str, default: bool = False) -> bool:
    if not ext or (value := ext.get(name)) is None:
        return default
    return parse_bool(value)
