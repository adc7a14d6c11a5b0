"""The SQL92 message selector of RocketMQ 4.9.8's filter module (``SelectorParser.jj``, ``SqlFilter``).

``compile_sql92(text)`` parses an expression once into a ``CompiledExpression``: a tree of Python
closures evaluated on a message's properties (``TAGS`` included) with Java's semantics - values are
String, Boolean, Integer, Long or Double, a missing property is null (comparisons give "unknown",
AND/OR/NOT are three-valued), a String compared with a number is converted to that number's class,
and an evaluation that throws in Java (a property "abc" compared with 5) does not match. What
4.9.8's parser refuses raises ``FilterParseError`` whose ``remark`` is Java's exception text.
No I/O here: the broker's ``ConsumerFilterManager`` keeps one compiled expression per subscription.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rmqgate.wire.message import java_hashmap_order, java_string_hash
from rmqgate.wire.message_const import PROPERTY_TAGS

#: Expression types of ``ExpressionType``; an absent or empty type is TAG.
TAG = "TAG"
SQL92 = "SQL92"

_PARSE_EXCEPTION = "org.apache.rocketmq.filter.parser.ParseException"
_TOKEN_ERROR = "org.apache.rocketmq.filter.parser.TokenMgrError"
_RUNTIME = "java.lang.RuntimeException"
_NUMBER_FORMAT = "java.lang.NumberFormatException"
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_MAX = 1.7976931348623157e308
_DOUBLE_MIN = 5e-324  # Double.MIN_VALUE: the smallest positive double


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``."""
    return not expression_type or expression_type == TAG


class FilterParseError(ValueError):
    """An expression 4.9.8 does not compile; ``remark`` is the text its broker answers with
    (``MQFilterException.getMessage()``: the cause's class name and message)."""

    def __init__(self, java_class: str, message: str) -> None:
        self.remark = f"{java_class}: {message}" if message else java_class
        super().__init__(self.remark)


_BOOLEAN_CAST = (
    "java.lang.ClassCastException: class java.lang.Boolean cannot be cast to class java.lang.String "
    "(java.lang.Boolean and java.lang.String are in module java.base of loader 'bootstrap')"
)


class _EvalError(Exception):
    """What throws in Java while evaluating (NumberFormatException, ClassCastException)."""


# -- Java value classes ------------------------------------------------------------------------------
# An expression's class is known when it is compiled: a property is a String (or null), a literal is
# Integer/Long/Double/String/Boolean, a comparison is Boolean. Numbers are tagged with their class.
STR, BOOL, INT, LONG, DOUBLE, NULL, ANY = "String", "Boolean", "Integer", "Long", "Double", "null", "?"
_NUMERIC = (INT, LONG, DOUBLE)

_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?)\Z", re.ASCII
)
_JAVA_HEX_DOUBLE = re.compile(r"[+-]?0[xX]([0-9a-fA-F]*\.?[0-9a-fA-F]*)[pP][+-]?[0-9]+[fFdD]?\Z", re.ASCII)


def _nfe(text: str) -> _EvalError:
    return _EvalError(f'{_NUMBER_FORMAT}: For input string: "{text}"')


def java_integer(text: str, lo: int = _INT_MIN, hi: int = _INT_MAX) -> int:
    """``Integer.valueOf`` / ``Long.valueOf`` (with ``lo``/``hi`` of long): ASCII digits, one sign."""
    if not (text.isascii() and text.isdigit()) and not _JAVA_INT.match(text):
        raise _nfe(text)
    value = int(text)
    if value < lo or value > hi:
        raise _nfe(text)
    return value


def java_double(text: str) -> float:
    """``Double.valueOf``: trims chars up to space, takes NaN, Infinity, a trailing f/d, hex floats."""
    t = text.strip("".join(chr(c) for c in range(33)))
    if _JAVA_DOUBLE.match(t):
        t = t.rstrip("fFdD") if not t.endswith("Infinity") and not t.endswith("NaN") else t
        return float(t.replace("Infinity", "inf"))
    if _JAVA_HEX_DOUBLE.match(t):
        return float.fromhex(t.rstrip("fFdD"))
    raise _nfe(text)


def _double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN equals itself and is above everything; -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    ka, kb = _double_key(a), _double_key(b)
    return (ka > kb) - (ka < kb)


def _double_key(d: float) -> int:
    """``Double.doubleToLongBits`` as a signed long ordered like ``Double.compareTo``."""
    if math.isnan(d):
        return 0x7FF8000000000000
    bits = struct.unpack(">q", struct.pack(">d", d))[0]
    return bits if bits >= 0 else bits ^ 0x7FFFFFFFFFFFFFFF


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def _converter(lc: str, rc: str) -> Callable[[Any, Any], int]:
    """``ComparisonExpression.__compare`` (convertStringExpressions on, as ``SelectorParser.parse``
    sets it) for operands of classes ``lc`` and ``rc`` (neither null): the conversion is chosen
    once, at compile time."""
    if lc == rc:
        if lc == DOUBLE:
            return _double_compare
        return _cmp
    if lc == BOOL:
        if rc == STR:

            def cast_error(lv: Any, rv: Any) -> int:  # Java casts the Boolean to String
                raise _EvalError(_BOOLEAN_CAST)

            return cast_error
        return lambda lv, rv: -1
    if lc in (INT, LONG):
        if rc in (INT, LONG):
            return _cmp
        if rc == DOUBLE:
            return lambda lv, rv: _double_compare(float(lv), rv)
        if rc == STR:
            hi_lo = (_INT_MIN, _INT_MAX) if lc == INT else (_LONG_MIN, _LONG_MAX)
            return lambda lv, rv: _cmp(lv, java_integer(rv, *hi_lo))
        return lambda lv, rv: -1
    if lc == DOUBLE:
        if rc in (INT, LONG):
            return lambda lv, rv: _double_compare(lv, float(rv))
        if rc == STR:
            return lambda lv, rv: _double_compare(lv, java_double(rv))
        return lambda lv, rv: -1
    if lc == STR:
        if rc == BOOL:
            return lambda lv, rv: _cmp(lv.lower() == "true", rv)
        if rc in (INT, LONG):
            hi_lo = (_INT_MIN, _INT_MAX) if rc == INT else (_LONG_MIN, _LONG_MAX)
            return lambda lv, rv: _cmp(java_integer(lv, *hi_lo), rv)
        if rc == DOUBLE:
            return lambda lv, rv: _double_compare(java_double(lv), rv)
    return lambda lv, rv: -1


def _java_equals(lc: str, rc: str, lv: Any, rv: Any) -> bool:
    if lc != rc:
        return False
    if lc == DOUBLE:
        return _double_key(lv) == _double_key(rv)
    return lv == rv


def java_double_str(d: float) -> str:
    """``Double.toString`` for the values a literal can take (positive, finite)."""
    if d == 0:
        return "0.0"
    if 1e-3 <= abs(d) < 1e7:
        text = repr(d)
        return text if "." in text or "e" in text else text + ".0"
    mantissa, _, exp = f"{d!r}".partition("e")
    if not exp:  # repr printed it plainly (e.g. 12345678.0)
        digits = repr(d).rstrip("0").rstrip(".")
        int_part = digits.split(".")[0]
        frac = digits.split(".")[1] if "." in digits else ""
        exp_n = len(int_part) - 1
        all_digits = (int_part + frac).rstrip("0") or "0"
        return f"{all_digits[0]}.{all_digits[1:] or '0'}E{exp_n}"
    m = float(mantissa)
    mtext = repr(m) if "." in repr(m) else repr(m) + ".0"
    return f"{mtext}E{int(exp)}"


# -- the expression tree -------------------------------------------------------------------------------
Props = Mapping[str, str]
Eval = Callable[[Props], Any]


class Node:
    """An expression: its Java class (``ANY`` when it varies), an evaluator, its ``toString``, and
    what 4.9.8's parser checks on it (a constant's value, whether it is a BooleanExpression)."""

    __slots__ = ("boolean", "const", "fn", "is_const", "is_property", "jclass", "tags", "text")

    def __init__(
        self,
        jclass: str,
        fn: Eval,
        text: str,
        *,
        boolean: bool = False,
        is_const: bool = False,
        const: Any = None,
        is_property: bool = False,
    ) -> None:
        self.jclass, self.fn, self.text, self.boolean = jclass, fn, text, boolean
        self.is_const, self.const, self.is_property = is_const, const, is_property
        #: the TAGS values a message must have for this to be true (None: any), see ``implied_tags``
        self.tags: frozenset[str] | None = None


def _constant(jclass: str, value: Any, text: str, *, boolean: bool = False) -> Node:
    return Node(jclass, lambda p: value, text, boolean=boolean, is_const=True, const=value)


def _constant_text(jclass: str, value: Any) -> str:
    if value is None:
        return "NULL"
    if jclass == BOOL:
        return "TRUE" if value else "FALSE"
    if jclass == STR:
        return "'" + value.replace("'", "''") + "'"
    if jclass == DOUBLE:
        return java_double_str(value)
    return str(value)


def _runtime(message: str) -> FilterParseError:
    return FilterParseError(_RUNTIME, message)


def _property(name: str) -> Node:
    def get(p: Props) -> Any:
        return p.get(name)

    return Node(STR, get, name, is_property=True)


def _value_classes(node: Node) -> tuple[str, ...]:
    """The classes a non-null value of ``node`` can have."""
    return (STR, BOOL, INT, LONG, DOUBLE) if node.jclass == ANY else (node.jclass,)


def _compare_fn(left: Node, right: Node) -> Callable[[Any, Any], int]:
    """``__compare`` for the two operands, specialised on their classes once."""
    lcs, rcs = _value_classes(left), _value_classes(right)
    if len(lcs) == 1 and len(rcs) == 1:
        return _converter(lcs[0], rcs[0])
    return lambda lv, rv: _converter(_class_of(lv), _class_of(rv))(lv, rv)


def _class_of(value: Any) -> str:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, str):
        return STR
    if isinstance(value, float):
        return DOUBLE
    return LONG if value < _INT_MIN or value > _INT_MAX else INT


def _equal(left: Node, right: Node) -> Node:
    """``doCreateEqual``: null = null is true, null = x unknown, x = null false; equal objects are
    equal; else ``__compare`` decides."""
    if left.is_property and right.is_const and right.const is not None:
        node = Node(BOOL, _property_equals(left.text, right), f"({left.text} == {right.text})", boolean=True)
        if left.text == PROPERTY_TAGS and right.jclass == STR:
            node.tags = frozenset((right.const,))
        return node
    lf, rf = left.fn, right.fn
    cmp = _compare_fn(left, right)
    lc, rc = left.jclass, right.jclass
    simple_equals = lc == rc and lc in (STR, BOOL, INT, LONG)

    def equal(p: Props) -> bool | None:
        lv = lf(p)
        rv = rf(p)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if simple_equals:
            return lv == rv
        if _java_equals(_class_of(lv) if lc == ANY else lc, _class_of(rv) if rc == ANY else rc, lv, rv):
            return True
        return cmp(lv, rv) == 0

    return Node(BOOL, equal, f"({left.text} == {right.text})", boolean=True)


def _property_equals(name: str, const: Node) -> Eval:
    """``property = constant``, the common case, in one closure: a String property equals a
    String by value; against a number it is read as that number's class (or the evaluation throws);
    against a Boolean, "true" in any case is true."""
    k = const.const
    if const.jclass == STR:

        def eq_string(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else v == k

        return eq_string
    if const.jclass in (INT, LONG):
        lo, hi = (_INT_MIN, _INT_MAX) if const.jclass == INT else (_LONG_MIN, _LONG_MAX)

        def eq_integer(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else java_integer(v, lo, hi) == k

        return eq_integer
    if const.jclass == DOUBLE:

        def eq_double(p: Props) -> bool | None:
            v = p.get(name)
            return None if v is None else _double_compare(java_double(v), k) == 0

        return eq_double

    def eq_boolean(p: Props) -> bool | None:
        v = p.get(name)
        return None if v is None else (v.lower() == "true") == k

    return eq_boolean


def _ordering(left: Node, right: Node, symbol: str, test: Callable[[int], bool]) -> Node:
    """``ComparisonExpression.evaluate`` for >, >=, <, <=: two Strings are both read as doubles."""
    for operand in (left, right):  # checkLessThanOperand
        if (operand.is_const and operand.jclass not in _NUMERIC) or operand.boolean:
            raise _runtime(f"Value '{operand.text}' cannot be compared.")
    text = f"({left.text} {symbol} {right.text})"
    if left.is_property and right.is_const and right.jclass in (INT, LONG):
        name, k = left.text, right.const
        lo, hi = (_INT_MIN, _INT_MAX) if right.jclass == INT else (_LONG_MIN, _LONG_MAX)

        def property_vs_integer(p: Props) -> bool | None:  # the common case, in one closure
            v = p.get(name)
            return None if v is None else test(_cmp(java_integer(v, lo, hi), k))

        return Node(BOOL, property_vs_integer, text, boolean=True)
    lf, rf = left.fn, right.fn
    cmp = _compare_fn(left, right)
    both_strings = left.jclass == STR and right.jclass == STR

    def ordering(p: Props) -> bool | None:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if both_strings:
            try:
                return test(_double_compare(java_double(lv), java_double(rv)))
            except _EvalError:
                raise _EvalError("It's illegal to compare string by '>=', '>', '<', '<='") from None
        return test(cmp(lv, rv))

    return Node(BOOL, ordering, text, boolean=True)


def _gt(a: Node, b: Node) -> Node:
    return _ordering(a, b, ">", lambda r: r > 0)


def _ge(a: Node, b: Node) -> Node:
    return _ordering(a, b, ">=", lambda r: r >= 0)


def _lt(a: Node, b: Node) -> Node:
    return _ordering(a, b, "<", lambda r: r < 0)


def _le(a: Node, b: Node) -> Node:
    return _ordering(a, b, "<=", lambda r: r <= 0)


def _not(inner: Node) -> Node:
    f = inner.fn

    def not_(p: Props) -> bool | None:
        v = f(p)
        return None if v is None else not v

    return Node(BOOL, not_, f"(NOT {inner.text})", boolean=True)


def _and(left: Node, right: Node) -> Node:
    node = _logic(left, right, "&&", False)
    if left.tags is not None and right.tags is not None:
        node.tags = left.tags & right.tags
    else:
        node.tags = left.tags if left.tags is not None else right.tags
    return node


def _or(left: Node, right: Node) -> Node:
    node = _logic(left, right, "||", True)
    if left.tags is not None and right.tags is not None:
        node.tags = left.tags | right.tags
    return node


def _logic(left: Node, right: Node, symbol: str, decisive: bool) -> Node:
    """``LogicExpression`` AND (``decisive`` False) or OR (True): an operand equal to ``decisive``
    decides, else an unknown operand makes the result unknown."""
    lf, rf = left.fn, right.fn
    otherwise = not decisive

    def logic(p: Props) -> bool | None:
        lv = lf(p)
        if lv is decisive:
            return decisive
        rv = rf(p)
        if rv is decisive:
            return decisive
        if lv is None or rv is None:
            return None
        return otherwise

    return Node(BOOL, logic, f"({left.text} {symbol} {right.text})", boolean=True)


def _as_boolean(node: Node) -> Node:
    """``asBooleanExpression``: a property becomes a boolean cast (a String is never true)."""
    if node.boolean:
        return node
    if node.is_property:
        f = node.fn
        return Node(BOOL, lambda p: None if f(p) is None else False, node.text, boolean=True)
    raise FilterParseError(_PARSE_EXCEPTION, f"Expression will not result in a boolean value: {node.text}")


def _negate(inner: Node) -> Node:
    f = inner.fn
    jclass = inner.jclass

    def negate(p: Props) -> Any:
        v = f(p)
        if v is None or isinstance(v, (str, bool)):
            return None
        if isinstance(v, float):
            return -v
        if jclass == INT:  # Integer negation wraps
            return -v if v != _INT_MIN else v
        return -v if v != _LONG_MIN else v

    return Node(jclass if jclass in _NUMERIC else NULL, negate, f"(- {inner.text})")


def _in(prop: Node, items: list[str], negated: bool) -> Node:
    if not prop.is_property:
        raise _runtime(f"Expected a property for In expression, got: {prop.text}")
    members = frozenset(items)
    f = prop.fn

    def in_(p: Props) -> bool | None:
        v = f(p)
        if v is None:
            return None
        return (v in members) != negated

    symbol = "NOT IN" if negated else "IN"
    node = Node(BOOL, in_, f"{prop.text} {symbol} ( {', '.join(_in_list_order(items))} )", boolean=True)
    if prop.text == PROPERTY_TAGS and not negated:
        node.tags = members
    return node


def _in_list_order(items: list[str]) -> list[str]:
    """How ``createInExpression`` keeps the list: as written below 5 items, else in a HashSet."""
    if len(items) < 5:
        return items
    unique = list(dict.fromkeys(items))
    capacity = 16
    while capacity < int(len(unique) / 0.75) + 1:
        capacity <<= 1
    return java_hashmap_order(unique, capacity * 3 // 8 + 1 if capacity > 16 else None)


def _between(value: Node, low: Node, high: Node) -> Node:
    if low.is_const and high.is_const:
        if low.const is None or high.const is None:
            raise _runtime("Illegal values of between, values can not be null!")
        try:
            order = _converter(high.jclass, low.jclass)(high.const, low.const)
        except _EvalError as exc:  # __compare wraps a NumberFormatException, not a ClassCastException
            cls, _, message = str(exc).partition(": ")
            raise (
                FilterParseError(cls, message) if str(exc) == _BOOLEAN_CAST else _runtime(str(exc))
            ) from None
        if order < 0:
            raise _runtime(
                f"Illegal values of between, left value({_plain(low)}) must less than or equal to "
                f"right value({_plain(high)})"
            )
    node = _and(_ge(value, low), _le(value, high))
    if value.is_property and low.is_const and low.jclass in (INT, LONG) and high.jclass == low.jclass:
        node.fn = _property_between(value.text, low)(low.const, high.const)  # same result, one read
    return node


def _property_between(name: str, low: Node) -> Callable[[int, int], Eval]:
    """``property BETWEEN lo AND hi`` with integer bounds of one class as one closure: the property
    read once and converted once (both comparisons would convert it alike, or both throw)."""
    lo_hi = (_INT_MIN, _INT_MAX) if low.jclass == INT else (_LONG_MIN, _LONG_MAX)

    def make(lo: int, hi: int) -> Eval:
        def between(p: Props) -> bool | None:
            v = p.get(name)
            if v is None:
                return None
            x = java_integer(v, *lo_hi)
            return lo <= x <= hi

        return between

    return make


def _plain(node: Node) -> str:
    """A constant's value as Java's String.format("%s") prints it."""
    if node.jclass == BOOL:
        return "true" if node.const else "false"
    if node.jclass == DOUBLE:
        return java_double_str(node.const)
    return str(node.const)


def _check_equal_operands(left: Node, right: Node) -> None:
    for operand in (left, right):  # checkEqualOperand
        if operand.is_const and operand.const is None:
            raise _runtime(f"'{operand.text}' cannot be compared.")
    if left.is_const and right.is_const and left.boolean and not right.boolean:
        raise _runtime(f"'{left.text}' cannot be compared with '{right.text}'")


# -- tokens ---------------------------------------------------------------------------------------------
_KEYWORDS = ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS")
_TOKEN_RES = (  # in the grammar's order: of equally long matches the first wins
    ("DECIMAL", re.compile(r"(?:0|[1-9][0-9]*[lL]?)", re.ASCII)),
    (
        "FLOAT",
        re.compile(
            r"(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
        ),
    ),
    ("STRING", re.compile(r"'(?:''|[^'])*'", re.DOTALL)),
    ("ID", re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*", re.ASCII)),
)
_OPERATORS = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")
_IMAGES = {
    "DECIMAL": "<DECIMAL_LITERAL>",
    "FLOAT": "<FLOATING_POINT_LITERAL>",
    "STRING": "<STRING_LITERAL>",
    "ID": "<ID>",
    "EOF": "<EOF>",
}
#: Token kinds in SelectorParserConstants' order (how a ParseException lists what it expected).
_KIND_ORDER = {
    kind: i
    for i, kind in enumerate(
        (
            "EOF",
            *_KEYWORDS,
            "DECIMAL",
            "FLOAT",
            "STRING",
            "ID",
            "=",
            "<>",
            ">",
            ">=",
            "<",
            "<=",
            "(",
            ",",
            ")",
            "+",
            "-",
        )
    )
}
_PRIMARY_START = ("TRUE", "FALSE", "NULL", "DECIMAL", "FLOAT", "STRING", "ID", "(")


def _image(kind: str) -> str:
    return _IMAGES.get(kind) or f'"{kind}"'


_SKIP = re.compile(r"(?:[ \t\n\r\f]+|--[^\n\r]*(?:\n|\r|\r\n)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)+")


class _Token:
    __slots__ = ("column", "image", "kind", "line")

    def __init__(self, kind: str, image: str, line: int, column: int) -> None:
        self.kind, self.image, self.line, self.column = kind, image, line, column

    def describe(self) -> str:
        if self.kind == "EOF":
            return "<EOF>"
        return f' {_image(self.kind)} "{_escape(self.image)} "'


def _escape(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\b\t\n\f\r\"'\\":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}.get(ch, "\\" + ch))
        elif code < 0x20 or code > 0x7E:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _position(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of ``text[pos]`` (one past the end for ``pos == len(text)``)."""
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _lexical_error(text: str, pos: int) -> FilterParseError:
    """JavaCC's TokenMgrError where no token starts at ``pos``. The token manager read on while a
    token could still be forming (an unterminated string or comment to the end, one character past
    a "." or "/"); at the last character it read, it reports EOF if the text ends there (column one
    past it, the characters read) and else that character (the ones before it)."""
    n = len(text)
    if text.startswith("'", pos) or text.startswith("/*", pos):
        stop = n - 1
    elif text.startswith((".", "/"), pos) and pos + 1 < n:
        stop = pos + 1
    else:
        stop = pos
    read = stop - pos + 1
    line, column = _position(text, stop)
    if stop + 1 >= n:
        after = _escape(text[pos : stop + 1]) if read > 1 else ""
        if text[stop] in "\r\n":
            line, column = line + 1, 0
        else:
            column += 1
        return FilterParseError(
            _TOKEN_ERROR,
            f'Lexical error at line {line}, column {column}.  Encountered: <EOF> after : "{after}"',
        )
    ch = text[stop]
    after = _escape(text[pos:stop]) if read > 1 else ""
    return FilterParseError(
        _TOKEN_ERROR,
        f"Lexical error at line {line}, column {column}.  "
        f'Encountered: "{_escape(ch)}" ({ord(ch)}), after : "{after}"',
    )


def _tokenize(text: str) -> Iterator[_Token]:
    """The tokens of ``text`` as the parser asks for them (JavaCC's token manager is lazy: text
    after the last token the parser looked at is never read, so it cannot be a lexical error)."""
    pos, n = 0, len(text)
    while True:
        m = _SKIP.match(text, pos)
        if m:
            pos = m.end()
        line, column = _position(text, pos)
        if pos >= n:
            # JavaCC places EOF at the last character read (line 0, column 0 when there is none)
            line, column = _position(text, n - 1) if n else (0, 0)
            while True:
                yield _Token("EOF", "", line, column)
        best_kind, best_end = "", pos
        for kind, rx in _TOKEN_RES:
            m = rx.match(text, pos)
            if m and m.end() > best_end:
                best_kind, best_end = kind, m.end()
        for op in _OPERATORS:
            if text.startswith(op, pos) and pos + len(op) > best_end:
                best_kind, best_end = op, pos + len(op)
        if not best_kind:
            raise _lexical_error(text, pos)
        image = text[pos:best_end]
        if best_kind == "ID" and image.upper() in _KEYWORDS:
            best_kind = image.upper()
        yield _Token(best_kind, image, line, column)
        pos = best_end


# -- the parser (SelectorParser.jj's productions) --------------------------------------------------------
class _Parser:
    """A recursive-descent reading of SelectorParser.jj. ``expected`` collects, as JavaCC's jj_la1
    does, the kinds each choice point since the last consumed token could have taken: a
    ParseException lists them in token-kind order."""

    def __init__(self, text: str) -> None:
        self.lexer = _tokenize(text)
        self.tokens: list[_Token] = []
        self.i = 0
        self.expected: set[str] = set()

    def token(self, k: int = 0) -> _Token:
        while len(self.tokens) <= self.i + k:
            self.tokens.append(next(self.lexer))
        return self.tokens[self.i + k]

    def peek(self, k: int = 0) -> str:
        return self.token(k).kind

    def advance(self, n: int = 1) -> None:
        self.i += n
        self.expected.clear()

    def expect(self, kinds: Iterable[str]) -> None:
        self.expected.update(kinds)

    def take(self, kind: str) -> _Token:
        tok = self.token()
        if tok.kind != kind:
            self.expected.add(kind)
            self.fail()
        self.advance()
        return tok

    def fail(self) -> None:
        tok = self.token()
        kinds = sorted(self.expected, key=_KIND_ORDER.__getitem__)
        entries = "".join(f"{_image(kind)} ...\n    " for kind in kinds)
        expecting = "Was expecting:" if len(kinds) == 1 else "Was expecting one of:"
        raise FilterParseError(
            _PARSE_EXCEPTION,
            f'Encountered "{tok.describe()}" at line {tok.line}, column {tok.column}.\n{expecting}\n    {entries}',
        )

    def selector(self) -> Node:
        """``JmsSelector``: one orExpression; what follows it is not read (4.9.8's grammar has no
        <EOF> there, so "a LIKE 'x'" is the selector ``a``)."""
        return _as_boolean(self.or_expression())

    def or_expression(self) -> Node:
        left = self.and_expression()
        while self.peek() == "OR":
            self.advance()
            right = self.and_expression()
            left = _or(_as_boolean(left), _as_boolean(right))
        self.expect(("OR",))
        return left

    def and_expression(self) -> Node:
        left = self.equality_expression()
        while self.peek() == "AND":
            self.advance()
            right = self.equality_expression()
            left = _and(_as_boolean(left), _as_boolean(right))
        self.expect(("AND",))
        return left

    def equality_expression(self) -> Node:
        left = self.comparison_expression()
        null = _constant(NULL, None, "NULL", boolean=True)
        while True:
            kind = self.peek()
            if kind == "=":
                self.advance()
                right = self.comparison_expression()
                _check_equal_operands(left, right)
                left = _equal(left, right)
            elif kind == "<>":
                self.advance()
                right = self.comparison_expression()
                _check_equal_operands(left, right)
                left = _not(_equal(left, right))
            elif kind == "IS" and self.peek(1) == "NULL":
                self.advance(2)
                left = _equal(left, null)
            elif kind == "IS":
                self.advance()
                self.take("NOT")
                self.take("NULL")
                left = _not(_equal(left, null))
            else:
                self.expect(("=", "<>", "IS"))
                return left

    def comparison_expression(self) -> Node:
        left = self.unary_expr()
        while True:
            kind = self.peek()
            if kind in (">", ">=", "<", "<="):
                self.advance()
                right = self.unary_expr()
                left = {">": _gt, ">=": _ge, "<": _lt, "<=": _le}[kind](left, right)
            elif kind == "BETWEEN" or (kind == "NOT" and self.peek(1) == "BETWEEN"):
                negated = kind == "NOT"
                self.advance(2 if negated else 1)
                low = self.unary_expr()
                self.take("AND")
                high = self.unary_expr()
                left = _or(_lt(left, low), _gt(left, high)) if negated else _between(left, low, high)
            elif kind == "IN" or (kind == "NOT" and self.peek(1) == "IN"):
                negated = kind == "NOT"
                self.advance(2 if negated else 1)
                self.take("(")
                items = [self.string_literal()]
                while self.peek() == ",":
                    self.advance()
                    items.append(self.string_literal())
                self.expect((",",))
                self.take(")")
                left = _in(left, items, negated)
            elif kind == "NOT":  # the loop took NOT as the start of NOT BETWEEN / NOT IN
                self.expect((">", ">=", "<", "<=", "BETWEEN", "IN"))
                self.fail()
            else:
                self.expect((">", ">=", "<", "<=", "BETWEEN", "IN", "NOT"))
                return left

    def unary_expr(self) -> Node:
        kind = self.peek()
        if kind == "+":
            self.advance()
            return self.unary_expr()
        if kind == "-":
            self.advance()
            return _negate(self.unary_expr())
        if kind == "NOT":
            self.advance()
            return _not(_as_boolean(self.unary_expr()))
        if kind not in _PRIMARY_START:
            self.expect(("-", "NOT", *_PRIMARY_START))
            self.fail()
        return self.primary_expr()

    def primary_expr(self) -> Node:
        kind = self.peek()
        if kind == "ID":
            return _property(self.take("ID").image)
        if kind == "(":
            self.advance()
            node = self.or_expression()
            self.take(")")
            return node
        return self.literal()

    def literal(self) -> Node:
        tok = self.token()
        kind = tok.kind
        if kind == "STRING":
            value = self.string_literal()
            return _constant(STR, value, _constant_text(STR, value))
        self.advance()
        if kind == "DECIMAL":
            digits = tok.image.rstrip("lL")
            value = int(digits)
            if value > _LONG_MAX:
                raise FilterParseError(_NUMBER_FORMAT, f'For input string: "{digits}"')
            jclass = INT if value <= _INT_MAX else LONG
            return _constant(jclass, value, str(value))
        if kind == "FLOAT":
            d = float(tok.image)
            if d > _DOUBLE_MAX:
                raise _runtime(f"{tok.image} is greater than 1.7976931348623157E308")
            if d < _DOUBLE_MIN:
                raise _runtime(f"{tok.image} is less than 4.9E-324")
            return _constant(DOUBLE, d, java_double_str(d))
        if kind == "TRUE":
            return _constant(BOOL, True, "TRUE", boolean=True)
        if kind == "FALSE":
            return _constant(BOOL, False, "FALSE", boolean=True)
        return _constant(NULL, None, "NULL", boolean=True)  # unary_expr let only literals through

    def string_literal(self) -> str:
        image = self.take("STRING").image
        return image[1:-1].replace("''", "'")


class CompiledExpression:
    """One compiled selector: ``evaluate`` gives Java's evaluation result (True/False/None; a Java
    exception is None), ``matches`` whether a message with these properties is delivered."""

    __slots__ = ("_fn", "implied_tag_codes", "implied_tags", "matches", "text", "to_string")

    def __init__(self, text: str, node: Node) -> None:
        self.text = text
        self.to_string = node.text
        self._fn = node.fn
        #: TAGS values outside which the expression cannot be true ("TAGS = 'A' AND x > 1": {"A"}), or
        #: None: a pull may then skip a message by its ConsumeQueue tagsCode without reading it (an
        #: optimisation 4.9.8 does not make; what it delivers is the same)
        self.implied_tags = node.tags
        #: their String hash codes, as the ConsumeQueue's tagsCode holds them
        self.implied_tag_codes = None if node.tags is None else frozenset(map(java_string_hash, node.tags))
        #: ``isMatchedByCommitLog``: only a Boolean true matches; what throws does not (a closure:
        #: the pull's per-message call)
        self.matches: Callable[[Props], bool] = _matcher(node.fn)

    def evaluate(self, properties: Props) -> bool | None:
        try:
            result = self._fn(properties)
        except (_EvalError, ArithmeticError, ValueError, TypeError):
            return None
        return result if isinstance(result, bool) else None


def _matcher(fn: Eval) -> Callable[[Props], bool]:
    def matches(properties: Props) -> bool:
        try:
            return fn(properties) is True
        except (_EvalError, ArithmeticError, ValueError, TypeError):
            return False

    return matches


def compile_sql92(text: str) -> CompiledExpression:
    """``SqlFilter.compile``; raises ``FilterParseError`` for what 4.9.8 refuses."""
    try:
        return CompiledExpression(text, _Parser(text).selector())
    except RecursionError:
        raise FilterParseError("java.lang.StackOverflowError", "") from None


def compile_expression(expression_type: str, text: str) -> CompiledExpression:
    """``FilterFactory.INSTANCE.get(type).compile(text)``: SQL92 is the only registered type."""
    if expression_type != SQL92:
        raise FilterParseError("java.lang.NullPointerException", "")
    return compile_sql92(text)
