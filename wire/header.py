"""Typed custom headers: declared once as dataclasses, compiled to extFields codecs.

A header class lists its fields in RocketMQ's order with ``wire(...)``; fields without a default are
``@CFNotNull`` (required). ``@command_header`` turns the declaration into generated functions:
``from_ext`` / ``to_ext`` for the long Java field names and, when the class declares one-letter
aliases (SendMessageRequestHeaderV2), ``from_ext_v2`` / ``to_ext_v2``. Generated code avoids any
per-field reflection on the hot path, like construct's ``compile()``. A number field says which Java
type it is (``Integer`` or ``Long``): a value that type's parser would refuse (out of range, spaces,
underscores) is refused with the field's name, as RocketMQ refuses the request.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, TypeVar

from rmqgate.wire.errors import HeaderFieldError

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def wire(name: str | None = None, *, alias: str | None = None, default: Any = _MISSING) -> Any:
    """Declare a header field: its Java name (default: the attribute in camelCase) and V2 alias."""
    return dataclasses.field(default=default, metadata={"wire": name, "alias": alias})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_bool(value: str) -> bool:
    """Java's Boolean.parseBoolean, plus "1" (what the C++ client sends for true)."""
    return value == "1" or value.lower() == "true"


_BOOL_SPELLINGS = {"true": True, "false": False, "1": True}
# Queue ids, flags, counts: a dict hit is cheaper than int() for the usual spellings.
_SMALL_INTS = {str(i): i for i in range(-1, 1024)}


def format_value(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


class JavaNumber(typing.NamedTuple):
    """The Java type of a number field, and its parser: what ``Integer.parseInt`` / ``Long.parseLong``
    accept (a ValueError saying why otherwise)."""

    name: str
    low: int
    high: int
    parse: Callable[[str], int]

    @property
    def out_of_range(self) -> str:
        """Why a number outside ``low..high`` is refused (the end of an error message)."""
        return f"is out of range of a Java {self.name} ({self.low}..{self.high})"


# Java's parsers take an optional sign and decimal digits (Character.digit: any Unicode Nd digit, as
# \d here), nothing else; Python's int() would also take spaces and underscores.
_JAVA_DIGITS = re.compile(r"[+-]?\d+")


def _java_number(name: str, bits: int) -> JavaNumber:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(text: str) -> int:
        if text.isdigit() or _JAVA_DIGITS.fullmatch(text) is not None:  # isdigit: the usual case
            try:
                value = int(text)
            except ValueError:  # a digit int() does not take, e.g. a superscript (nor does Java)
                pass
            else:
                if low <= value <= high:
                    return value
                raise ValueError(java.out_of_range)
        raise ValueError(f"is not a valid {name}")

    java = JavaNumber(name, low, high, parse)
    return java


_INTEGER_HIGH = (1 << 31) - 1

#: Field types: ``queue_id: Integer``, ``queue_offset: Long`` (an ``int`` to Python and to type checkers).
Integer = Annotated[int, _java_number("Integer", 32)]
Long = Annotated[int, _java_number("Long", 64)]


def java_number_of(hint: Any) -> JavaNumber | None:
    """The Java type an ``Integer`` or ``Long`` hint declares; None for any other hint."""
    if typing.get_origin(hint) is not Annotated or typing.get_args(hint)[0] is not int:
        return None
    return next((m for m in hint.__metadata__ if isinstance(m, JavaNumber)), None)


parse_java_int: Callable[[str], int] = typing.get_args(Integer)[1].parse  # Integer.parseInt
parse_java_long: Callable[[str], int] = typing.get_args(Long)[1].parse  # Long.parseLong


class HeaderField(typing.NamedTuple):
    attr: str
    wire: str
    alias: str | None
    kind: type  # str, int or bool
    required: bool
    default: Any
    java: JavaNumber | None  # for an int: Integer or Long


class CommandHeader:
    """Base of every typed header; the decorator fills in the codec functions."""

    FIELDS: ClassVar[tuple[HeaderField, ...]] = ()
    from_ext: ClassVar[Callable[[dict[str, str]], Any]]
    from_ext_v2: ClassVar[Callable[[dict[str, str]], Any]]

    def to_ext(self) -> dict[str, str]:
        raise NotImplementedError

    def to_ext_v2(self) -> dict[str, str]:
        raise NotImplementedError


_KINDS = (str, int, bool)


def _field_kind(hint: Any) -> tuple[type, JavaNumber | None]:
    """(str, int or bool; the Java number type of an int) of a field's type hint."""
    kind = hint
    if typing.get_origin(hint) is not Annotated:  # X | None
        kind = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    java = java_number_of(kind)
    if java is not None:
        kind = int
    if kind not in _KINDS:
        raise TypeError(f"unsupported header field type {hint!r}")
    if kind is int and java is None:
        raise TypeError(f"header field type {hint!r}: declare the Java type, Integer or Long")
    return kind, java


def _gen_decoder(
    cls: type, fields: tuple[HeaderField, ...], use_alias: bool
) -> Callable[[dict[str, str]], Any]:
    lines = ["def decode(ext):", "    g = ext.get", "    try:"]
    args = []
    for i, f in enumerate(fields):
        key = f.alias if use_alias and f.alias else f.wire
        var = f"v{i}"
        args.append(var)
        if f.required:
            lines.append(f"        {var} = ext[{key!r}]")
            if f.kind is int:
                lines.append(f"        {var} = {_int_expr(var, i, f)}")
            elif f.kind is bool:
                lines.append(f"        {var} = _bool({var})")
        elif f.kind is bool:  # a dict hit for the usual spellings, parse_bool for the rest
            lines.append(f"        {var} = g({key!r})")
            lines.append(
                f"        {var} = _d{i} if {var} is None else (_bools[{var}] if {var} in _bools else _bool({var}))"
            )
        elif f.kind is int:
            lines.append(f"        {var} = g({key!r})")
            lines.append(f"        {var} = _d{i} if {var} is None else ({_int_expr(var, i, f)})")
        else:
            lines.append(f"        {var} = g({key!r})")
            lines.append(f"        {var} = _d{i} if {var} is None else {var}")
    lines.append(f"        return _cls({', '.join(args)})")
    lines.append("    except KeyError as exc:")
    lines.append("        raise _error(_cls, ext, exc, True) from None")
    lines.append("    except (ValueError, TypeError) as exc:")
    lines.append("        raise _error(_cls, ext, exc, False) from None")
    namespace = _decoder_namespace(cls, fields)
    exec("\n".join(lines), namespace)
    return namespace["decode"]


def _int_expr(var: str, i: int, f: HeaderField) -> str:
    """A number field's value from its text: ``int`` for digits too few to leave the Java type's
    range (the Java parser takes such text the same way), the Java parser for anything else; an
    ``Integer`` (queue ids, flags, counts) looks the usual small numbers up first."""
    assert f.java is not None
    digits = len(str(f.java.high)) - 1
    parse = f"(int({var}) if len({var}) <= {digits} and {var}.isdigit() else _p{i}({var}))"
    return parse if f.java.high > _INTEGER_HIGH else f"w if (w := _ints({var})) is not None else {parse}"


def _decoder_namespace(cls: type, fields: tuple[HeaderField, ...]) -> dict[str, Any]:
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_ints": _SMALL_INTS.get,
        "_bool": parse_bool,
        "_bools": _BOOL_SPELLINGS,
        "_error": _field_error,
    }
    for i, f in enumerate(fields):
        namespace[f"_d{i}"] = None if f.required else f.default
        if f.java is not None:
            namespace[f"_p{i}"] = f.java.parse
    return namespace


def values_decoder(
    cls: type[T], keys: tuple[str, ...], use_alias: bool = False
) -> Callable[[tuple[str, ...]], T] | None:
    """A decoder of the values of an extFields map whose keys are ``keys`` in this order (a request
    layout seen before) straight to ``cls``, without the map: generated like ``from_ext``. None when a
    required field is not among the keys. It raises ValueError or TypeError on a value ``from_ext``
    refuses, without naming the field: the caller then asks ``from_ext`` for the error."""
    fields: tuple[HeaderField, ...] = cls.FIELDS  # type: ignore[attr-defined]
    index = {key: i for i, key in enumerate(keys)}
    lines = ["def decode(v):"]
    args = []
    for i, f in enumerate(fields):
        at = index.get(f.alias if use_alias and f.alias else f.wire)
        if at is None:
            if f.required:
                return None
            args.append(f"_d{i}")
            continue
        var = f"v{i}"
        args.append(var)
        lines.append(f"    {var} = v[{at}]")
        if f.kind is int:
            lines.append(f"    {var} = {_int_expr(var, i, f)}")
        elif f.kind is bool:
            lines.append(
                f"    {var} = _bool({var})"
                if f.required
                else f"    {var} = _bools[{var}] if {var} in _bools else _bool({var})"
            )
    lines.append(f"    return _cls({', '.join(args)})")
    namespace = _decoder_namespace(cls, fields)
    exec("\n".join(lines), namespace)
    return namespace["decode"]


def _gen_encoder(fields: tuple[HeaderField, ...], use_alias: bool) -> Callable[[Any], dict[str, str]]:
    lines = ["def encode(self):", "    out = {}"]
    for f in fields:
        key = f.alias if use_alias and f.alias else f.wire
        lines.append(f"    v = self.{f.attr}")
        lines.append("    if v is not None:")
        lines.append(f"        out[{key!r}] = _fmt(v)" if f.kind is not str else f"        out[{key!r}] = v")
    lines.append("    return out")
    namespace: dict[str, Any] = {"_fmt": format_value}
    exec("\n".join(lines), namespace)
    return namespace["encode"]


def _field_error(cls: type, ext: dict[str, str], exc: Exception, missing: bool) -> HeaderFieldError:
    if missing:
        name = exc.args[0] if exc.args else "?"
        return HeaderFieldError(f"{cls.__name__}: required field {name!r} is missing")
    for f in cls.FIELDS:  # type: ignore[attr-defined]
        for key in (f.wire, f.alias):
            value = ext.get(key) if key else None
            if value is None or f.kind is str:
                continue
            try:
                f.java.parse(value) if f.java is not None else parse_bool(value)
            except (ValueError, TypeError, AttributeError) as bad:
                why = bad.args[0] if isinstance(bad, ValueError) else f"is not a valid {f.kind.__name__}"
                return HeaderFieldError(f"{cls.__name__}: field {key!r} = {value!r} {why}")
    return HeaderFieldError(f"{cls.__name__}: {exc}")


C = TypeVar("C", bound=type)


def command_header(cls: C) -> C:
    """Make ``cls`` a slotted dataclass with generated extFields codecs."""
    cls = dataclasses.dataclass(slots=True)(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        kind, java = _field_kind(hints[f.name])
        fields.append(
            HeaderField(
                attr=f.name,
                wire=meta.get("wire") or _camel(f.name),
                alias=meta.get("alias"),
                kind=kind,
                required=f.default is _MISSING and f.default_factory is _MISSING,
                default=None if f.default is _MISSING else f.default,
                java=java,
            )
        )
    declared = tuple(fields)
    cls.FIELDS = declared
    cls.from_ext = staticmethod(_gen_decoder(cls, declared, use_alias=False))
    cls.to_ext = _gen_encoder(declared, use_alias=False)
    if any(f.alias for f in declared):
        cls.from_ext_v2 = staticmethod(_gen_decoder(cls, declared, use_alias=True))
        cls.to_ext_v2 = _gen_encoder(declared, use_alias=True)
    return cls


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    return _SNAKE.sub("_", name).lower()
