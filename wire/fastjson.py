"""JSON as RocketMQ's fastjson (1.2.69) writes and reads it.

``loads`` accepts standard JSON plus fastjson's non-string map keys: bare numbers
(``{"brokerAddrs":{0:"10.0.0.1:10911"}}``, consumerOffset.json) and objects (``{{"topic":...}:{...}}``,
TopicStatsTable/ConsumeStats offset tables). Map keys always come back as ``str`` (bare numbers as
their literal text) or, for object keys, as an ``ObjectKey``; the typed bodies convert them.
``dumps`` writes compact output with sorted keys (MapSortField) in the legacy style (integer keys bare)
or the BrowserCompatible style (keys quoted, non-ASCII and '/' escaped, longs beyond 2^53-1 quoted),
and ``pretty=True`` gives the tab-indented PrettyFormat of the broker's config files.
"""

from __future__ import annotations

import array
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from rmqgate.wire.errors import BodyError

__all__ = ["ObjectKey", "dumps", "loads"]

JS_SAFE_INTEGER = 9007199254740991
MAX_DEPTH = 200  # nesting the fallback parser accepts (RocketMQ bodies nest a handful of levels)


class ObjectKey(tuple):
    """A JSON object used as a map key (fastjson writes ``Map<MessageQueue, ...>`` keys that way).

    Hashable: the object's (name, value) pairs in document order; values must be scalars.
    """

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> ObjectKey:
        return cls(mapping.items())


# --- reading -------------------------------------------------------------------------------------

_decode = json.JSONDecoder().decode
# A string literal (consumed whole, so nothing inside a string is ever taken for a key) or a bare
# number directly after '{' or ',' and followed by ':' (only an object key can be followed by ':').
_BARE_KEY = re.compile(r'("(?:[^"\\]++|\\.)*+")|([{,])([ \t\n\r]*)(-?\d+)([ \t\n\r]*:)', re.DOTALL)
_BARE_HINT = re.compile(r"[{,][ \t\n\r]*-?\d+[ \t\n\r]*:")


def _quote_bare_key(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return m.group(1)
    return f'{m.group(2)}{m.group(3)}"{m.group(4)}"{m.group(5)}'


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson output; raises ``BodyError`` on anything that is not (fastjson) JSON."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise BodyError(f"JSON body is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        return _decode(text)
    except ValueError:
        pass
    except RecursionError:
        raise BodyError("JSON body nests too deeply") from None
    if _BARE_HINT.search(text):
        try:
            return _decode(_BARE_KEY.sub(_quote_bare_key, text))
        except ValueError:
            pass
        except RecursionError:
            raise BodyError("JSON body nests too deeply") from None
    return _TolerantParser(text).parse()


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


class _TolerantParser:
    """Recursive descent over fastjson's dialect; only used when the C parser refuses the text."""

    __slots__ = ("depth", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def fail(self, pos: int, what: str) -> BodyError:
        line = self.text.count("\n", 0, pos) + 1
        return BodyError(f"JSON body does not parse: {what} at line {line} char {pos}")

    def parse(self) -> Any:
        value, pos = self.value(_WS.match(self.text, 0).end())
        pos = _WS.match(self.text, pos).end()
        if pos != len(self.text):
            raise self.fail(pos, "extra data")
        return value

    def value(self, pos: int) -> tuple[Any, int]:
        text = self.text
        if pos >= len(text):
            raise self.fail(pos, "unexpected end")
        c = text[pos]
        if c == "{":
            return self.obj(pos + 1)
        if c == "[":
            return self.array(pos + 1)
        if c == '"':
            return self.string(pos + 1)
        m = _NUMBER.match(text, pos)
        if m:
            s = m.group()
            try:
                return (float(s) if m.group(1) or m.group(2) else int(s)), m.end()
            except ValueError:  # beyond int's digit limit
                raise self.fail(pos, "number too long") from None
        for word, val in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, pos):
                return val, pos + len(word)
        raise self.fail(pos, f"unexpected {c!r}")

    def string(self, pos: int) -> tuple[str, int]:
        try:
            return _scanstring(self.text, pos, True)
        except ValueError as exc:
            raise self.fail(pos, str(exc).split(":")[0]) from None

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(pos, "nesting too deep")

    def key(self, pos: int) -> tuple[Any, int]:
        c = self.text[pos : pos + 1]
        if c == '"':
            return self.string(pos + 1)
        if c == "{":
            obj, end = self.obj(pos + 1)
            for v in obj.values():
                if isinstance(v, dict | list):
                    raise self.fail(pos, "object used as a map key holds a non-scalar")
            return ObjectKey.of(obj), end
        m = _NUMBER.match(self.text, pos)
        if m:
            return m.group(), m.end()
        raise self.fail(pos, "expected a map key")

    def obj(self, pos: int) -> tuple[dict[Any, Any], int]:
        self.enter(pos)
        text = self.text
        out: dict[Any, Any] = {}
        pos = _WS.match(text, pos).end()
        if text.startswith("}", pos):
            self.depth -= 1
            return out, pos + 1
        while True:
            key, pos = self.key(pos)
            pos = _WS.match(text, pos).end()
            if not text.startswith(":", pos):
                raise self.fail(pos, "expected ':'")
            value, pos = self.value(_WS.match(text, pos + 1).end())
            out[key] = value
            pos = _WS.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _WS.match(text, pos + 1).end()
                continue
            if text.startswith("}", pos):
                self.depth -= 1
                return out, pos + 1
            raise self.fail(pos, "expected ',' or '}'")

    def array(self, pos: int) -> tuple[list[Any], int]:
        self.enter(pos)
        text = self.text
        out: list[Any] = []
        pos = _WS.match(text, pos).end()
        if text.startswith("]", pos):
            self.depth -= 1
            return out, pos + 1
        while True:
            value, pos = self.value(pos)
            out.append(value)
            pos = _WS.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _WS.match(text, pos + 1).end()
                continue
            if text.startswith("]", pos):
                self.depth -= 1
                return out, pos + 1
            raise self.fail(pos, "expected ',' or ']'")


# --- writing -------------------------------------------------------------------------------------

# Default fastjson escaping: '"', '\\' and \b\t\n\f\r short; other controls, DEL..0x9F, U+2028/9 as \uXXXX.
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f-\x9f\u2028\u2029]')
# BrowserCompatible: additionally '/' and everything from 0x7F up (UTF-16 code units).
_NEEDS_ESCAPE_BROWSER = re.compile(r'["\\/\x00-\x1f\x7f-\U0010ffff]')
_SHORT = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    short = _SHORT.get(c)
    if short is not None:
        return short
    code = ord(c)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


def _string(s: str, browser: bool) -> str:
    pattern = _NEEDS_ESCAPE_BROWSER if browser else _NEEDS_ESCAPE
    if pattern.search(s) is None:
        return f'"{s}"'
    return f'"{pattern.sub(_escape_char, s)}"'


def _java_double(value: float) -> str:
    """fastjson's double (RyuDouble): shortest digits, Java notation ("1.0", "1.0E7", "1.5E-4")."""
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)  # never scientific in this range
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(digits) - 1}"


def _java_order(key: Any) -> Any:
    """TreeMap order: numbers numerically, strings by UTF-16 code units like String.compareTo."""
    if isinstance(key, str):
        return key.encode("utf-16-be", "surrogatepass") if not key.isascii() else key.encode()
    if isinstance(key, ObjectKey):
        return repr(key).encode()
    return key


class _Writer:
    __slots__ = ("browser", "out", "pretty", "sort")

    def __init__(self, browser: bool, pretty: bool, sort: bool) -> None:
        self.browser = browser
        self.pretty = pretty
        self.sort = sort
        self.out: list[str] = []

    def scalar(self, value: Any) -> str:
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, str):
            return _string(value, self.browser)
        if isinstance(value, int):
            if self.browser and not -JS_SAFE_INTEGER <= value <= JS_SAFE_INTEGER:
                return f'"{int(value)}"'
            return str(int(value))
        if isinstance(value, float):
            return _java_double(value)
        raise TypeError(f"cannot write {type(value).__name__} as JSON")

    def key(self, key: Any) -> tuple[str, bool]:
        """The written key and whether fastjson puts a line break before it in PrettyFormat."""
        if isinstance(key, str):
            return _string(key, self.browser), True
        if isinstance(key, bool) or not isinstance(key, int | ObjectKey):
            raise TypeError(f"cannot write a {type(key).__name__} map key")
        if isinstance(key, ObjectKey):
            sub = _Writer(False, False, self.sort)
            sub.value(key.as_dict(), 0)
            text = "".join(sub.out)
        else:
            text = str(int(key))
        # BrowserCompatible writes non-string keys as the JSON string of their default encoding.
        return (_string(text, True) if self.browser else text), False

    def value(self, value: Any, depth: int) -> None:
        out = self.out
        if isinstance(value, Mapping):
            items = [(k, v) for k, v in value.items() if v is not None]
            if self.sort:
                items.sort(key=lambda kv: _java_order(kv[0]))
            if not items:
                out.append("{}")
                return
            out.append("{")
            indent = "\n" + "\t" * (depth + 1)
            for i, (k, v) in enumerate(items):
                if i:
                    out.append(",")
                text, breaks = self.key(k)
                if self.pretty and breaks:
                    out.append(indent)
                out.append(text)
                out.append(":")
                self.value(v, depth + 1)
            if self.pretty:
                out.append("\n" + "\t" * depth)
            out.append("}")
        elif isinstance(value, array.array):  # a Java primitive array: one line even in PrettyFormat
            out.append("[" + ",".join(self.scalar(v) for v in value) + "]")
        elif isinstance(value, list | tuple | set | frozenset):
            if not value:
                out.append("[]")
                return
            out.append("[")
            indent = "\n" + "\t" * (depth + 1)
            for i, v in enumerate(value):
                if i:
                    out.append(",")
                if self.pretty:
                    out.append(indent)
                self.value(v, depth + 1)
            if self.pretty:
                out.append("\n" + "\t" * depth)
            out.append("]")
        else:
            out.append(self.scalar(value))


def dumps(obj: Any, *, quoted_keys: bool, pretty: bool = False, sort_keys: bool = True) -> bytes:
    """Write ``obj`` (dicts, lists, str, int, float, bool, None) as fastjson would, UTF-8 encoded.

    ``quoted_keys=False``: fastjson's default features (non-string keys bare, strings escaped minimally).
    ``quoted_keys=True``: BrowserCompatible + QuoteFieldNames (what the name server uses for route data
    when the client's version is >= V4_9_4 or it sets acceptStandardJsonOnly). ``None`` values inside
    objects are skipped like fastjson does without WriteMapNullValue.
    """
    writer = _Writer(quoted_keys, pretty, sort_keys)
    writer.value(obj, 0)
    return "".join(writer.out).encode("utf-8", "replace")
