"""Header serializations: JSON (fastjson-compatible) and ROCKETMQ binary (``layout.RocketMQHeader``)."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rmqgate.wire.codes import LanguageCode, SerializeType
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import HeaderError
from rmqgate.wire.header import CommandHeader, values_decoder
from rmqgate.wire.layout import (
    EXT_KEY_LENGTH,
    EXT_TOTAL_LENGTH,
    EXT_VALUE_LENGTH,
    FRAME_PREFIX,
    REMARK_LENGTH,
    ROCKETMQ_FIXED,
    joined_struct,
)

_LANGUAGE_BY_NAME = {lang.name: int(lang) for lang in LanguageCode}
_LANGUAGE_NAME = {int(lang): lang.name for lang in LanguageCode}
_SERIALIZE_NAME = {int(t): t.name for t in SerializeType}
_OTHER = LanguageCode.OTHER
_JSON = SerializeType.JSON
_ROCKETMQ = SerializeType.ROCKETMQ

H = TypeVar("H", bound=CommandHeader)

_json_decoder = json.JSONDecoder()
_json_decode = _json_decoder.decode
# The decoder's (C) scanner called directly: a header is one object with no surrounding whitespace, so
# ``decode``'s two whitespace matches and Python frames are skipped; anything else takes ``decode``.
_scan_once = _json_decoder.scan_once
_json_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _ext_value(value: object) -> str:
    """Normalise a JSON extFields value to the string Java would have sent."""
    if type(value) is str:  # the other values of a map that also holds numbers or booleans
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return str(value)
    return _json_encode(value)


def _parse_json(text: str) -> object:
    """The full decoder (whitespace, trailing data, errors and their messages)."""
    try:
        return _json_decode(text)
    except (ValueError, RecursionError) as exc:
        raise HeaderError(f"JSON header does not parse: {exc}") from None


def decode_json_header(data: bytes | bytearray | memoryview) -> RemotingCommand:
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(f"JSON header is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        header, end = _scan_once(text, 0)
        if end != len(text):
            header = _parse_json(text)
    except (StopIteration, ValueError, RecursionError):
        header = _parse_json(text)
    if type(header) is not dict:
        raise HeaderError(f"JSON header is a {type(header).__name__}, not an object")
    get = header.get
    code = get("code")
    if code is None:
        raise HeaderError("JSON header has no 'code'")
    language = get("language", "JAVA")
    version = get("version", 0)
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    remark = get("remark")
    ext = get("extFields")
    if type(code) is not int or type(version) is not int or type(opaque) is not int or type(flag) is not int:
        raise HeaderError("JSON header fields code/version/opaque/flag must be integers")
    if type(language) is str:
        language = _LANGUAGE_BY_NAME.get(language, _OTHER)
    elif type(language) is not int:
        raise HeaderError(f"JSON header 'language' is {language!r}")
    if remark is not None and type(remark) is not str:
        remark = _ext_value(remark)
    if ext is not None:
        if type(ext) is not dict:
            raise HeaderError(f"JSON header 'extFields' is a {type(ext).__name__}, not an object")
        for value in ext.values():
            if type(value) is not str:
                ext = {k: _ext_value(v) for k, v in ext.items() if v is not None}
                break
    return _command(code, language, version, opaque, flag, remark, ext, _JSON)


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """fastjson's output for a RemotingCommand: keys sorted, nulls skipped."""
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        header["extFields"] = cmd.ext_fields
    header["flag"] = cmd.flag
    header["language"] = _LANGUAGE_NAME.get(cmd.language, "OTHER")
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = _SERIALIZE_NAME[cmd.serialize_type]
    header["version"] = cmd.version
    text = _json_encode(header)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate a JSON request carried in ("\\ud800")
        return _java_utf8(text)


_FIXED_SIZE = ROCKETMQ_FIXED.size
_unpack_fixed = ROCKETMQ_FIXED.unpack_from
_unpack_remark_len = REMARK_LENGTH.unpack_from
_unpack_ext_len = EXT_TOTAL_LENGTH.unpack_from
_unpack_key_len = EXT_KEY_LENGTH.unpack_from
_unpack_value_len = EXT_VALUE_LENGTH.unpack_from
_KEY_LEN_SIZE = EXT_KEY_LENGTH.size
_VALUE_LEN_SIZE = EXT_VALUE_LENGTH.size
_EXT_LEN_SIZE = EXT_TOTAL_LENGTH.size
_REMARK_START = _FIXED_SIZE + REMARK_LENGTH.size
_new_command = RemotingCommand.__new__
# the fixed fields, the remark's length and (when the remark is empty) the extFields' length
_HEAD = joined_struct(ROCKETMQ_FIXED, REMARK_LENGTH, EXT_TOTAL_LENGTH)
_HEAD_SIZE = _HEAD.size
_unpack_head = _HEAD.unpack_from


def _command(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str] | None,
    serialize_type: int,
) -> RemotingCommand:
    """A decoded RemotingCommand, without ``__init__``'s keyword handling (body: None)."""
    cmd = _new_command(RemotingCommand)
    cmd.code = code
    cmd.language = language
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext
    cmd.body = None
    cmd.serialize_type = serialize_type
    return cmd


def decode_rocketmq_header(data: bytes | bytearray | memoryview) -> RemotingCommand:
    if type(data) is not bytes:
        data = bytes(data)
    end = len(data)
    if end > _HEAD_SIZE:  # a request's usual header: no remark, extFields in a layout seen before
        code, language, version, opaque, flag, remark_length, length = _unpack_head(data, 0)
        if not remark_length and length == end - _HEAD_SIZE:
            layout = _ext_layouts.get(length)
            if layout is not None:
                values = layout.values_of(data[_HEAD_SIZE:])
                if values is not None:
                    cmd = _new_layout_command(LayoutCommand)
                    cmd.code = code
                    cmd.language = language
                    cmd.version = version
                    cmd.opaque = opaque
                    cmd.flag = flag
                    cmd.remark = None
                    cmd.ext_layout = layout
                    cmd.ext_values = values
                    cmd.body = None
                    cmd.serialize_type = _ROCKETMQ
                    return cmd
    try:
        code, language, version, opaque, flag = _unpack_fixed(data, 0)
        (length,) = _unpack_remark_len(data, _FIXED_SIZE)
        pos = _REMARK_START
        if length < 0 or pos + length > end:
            raise HeaderError(f"ROCKETMQ header remark length {length} exceeds the header ({end} bytes)")
        remark = data[pos : pos + length].decode() if length else None
        pos += length
        (length,) = _unpack_ext_len(data, pos)
        pos += _EXT_LEN_SIZE
        if length < 0 or pos + length > end:
            raise HeaderError(f"ROCKETMQ header extFields length {length} exceeds the header ({end} bytes)")
        ext = None
        if length:
            stop = pos + length
            layout = _ext_layouts.get(length)
            if layout is not None:
                ext = layout.decode(data[pos:stop])
            if ext is None:
                ext = _decode_ext_fields(data, pos, stop)
            pos = stop
        if pos != end:
            raise HeaderError(f"ROCKETMQ header has {end - pos} trailing bytes")
    except UnicodeDecodeError as exc:
        raise HeaderError(f"ROCKETMQ header string is not valid UTF-8: {exc.reason}") from None
    except HeaderError:
        raise
    except Exception as exc:  # struct.error on a short header
        raise HeaderError(f"ROCKETMQ header truncated ({end} bytes): {exc}") from None
    return _command(code, language, version, opaque, flag, remark, ext, _ROCKETMQ)


def _decode_ext_fields(data: bytes, pos: int, stop: int) -> dict[str, str]:
    """The extFields map entry by entry; a map whose layout (key and value lengths) came twice in a
    row for its byte length gets an ``_ExtLayout`` that decodes the next ones in a few calls."""
    ext = {}
    lengths: list[int] = []
    start = pos
    while pos < stop:
        (klen,) = _unpack_key_len(data, pos)
        pos += _KEY_LEN_SIZE
        key_end = pos + klen
        if klen < 0 or key_end > stop:
            raise HeaderError(f"ROCKETMQ header extFields key length {klen} overruns the map")
        (vlen,) = _unpack_value_len(data, key_end)
        value_start = key_end + _VALUE_LEN_SIZE
        value_end = value_start + vlen
        if vlen < 0 or value_end > stop:
            raise HeaderError(f"ROCKETMQ header extFields value length {vlen} overruns the map")
        ext[data[pos:key_end].decode()] = data[value_start:value_end].decode()
        lengths += (klen, vlen)
        pos = value_end
    # no key twice; two entries or more (an itemgetter of one slice returns no tuple), a bounded number
    # and bounded key bytes (a layout keeps its keys and their lengths' bytes)
    if (
        pos == stop
        and len(ext) * 2 == len(lengths)
        and 2 <= len(ext) <= _MAX_LAYOUT_ENTRIES
        and sum(lengths[0::2]) <= _MAX_LAYOUT_KEY_BYTES
    ):
        seen = tuple(lengths)
        size = stop - start
        if _ext_candidates.get(size) == seen:
            if len(_ext_layouts) >= _MAX_EXT_LAYOUTS:
                _ext_layouts.clear()
            _ext_layouts[size] = _ExtLayout(data[start:stop], seen, ext)
        else:
            if len(_ext_candidates) >= _MAX_EXT_LAYOUTS:
                _ext_candidates.clear()
            _ext_candidates[size] = seen
    return ext


class _ExtLayout:
    """One extFields layout: its keys in order and the byte length of every value. Producers send the
    same keys in the same order, and mostly values of the same lengths, request after request. In
    such a map everything but the values is the same bytes (each entry's key length, key and value
    length), so one ``itemgetter`` call compares all of it and another takes all the values. A layout
    that served ``_MATCH_AFTER`` maps gets a regular expression that does both in one call; not at
    once, as compiling it takes ~0.3 ms for a send header (~1 ms for 64 entries): a client sending
    ever new layouts costs a compile per that many requests at most. Only a layout whose fixed parts
    are at most ``_MATCH_MAX_FIXED_BYTES`` (a send header's 91 or 225, a pull header's 260) gets one:
    ``re`` keeps the last 512 patterns compiled whatever this cache drops, up to ~10 KB each within
    that bound (~5 MB held there for a client cycling layouts), ~43 KB past it (64 entries, 4 KiB of
    keys: ~22 MB)."""

    __slots__ = (
        "fixed",
        "fixed_parts",
        "headers",
        "key_index",
        "keys",
        "match",
        "matchable",
        "seen",
        "value_lengths",
        "values",
    )

    def __init__(self, region: bytes, lengths: tuple[int, ...], ext: dict[str, str]) -> None:
        fixed: list[slice] = []
        values: list[slice] = []
        pos = 0
        for klen, vlen in zip(lengths[0::2], lengths[1::2], strict=True):
            value_start = pos + _KEY_LEN_SIZE + klen + _VALUE_LEN_SIZE
            fixed.append(slice(pos, value_start))
            values.append(slice(value_start, value_start + vlen))
            pos = value_start + vlen
        self.value_lengths = lengths[1::2]
        self.fixed = operator.itemgetter(*fixed)
        self.fixed_parts = self.fixed(region)
        self.values = operator.itemgetter(*values)
        self.keys = tuple(ext)
        self.key_index = {key: i for i, key in enumerate(self.keys)}
        self.seen = 0
        self.matchable = sum(map(len, self.fixed_parts)) <= _MATCH_MAX_FIXED_BYTES
        self.match: Callable[[str], re.Match[str] | None] | None = None
        #: typed-header decoders of this layout's values, by (header class, use_alias)
        self.headers: dict[tuple[type, bool], Callable[[tuple[str, ...]], Any] | None] = {}

    def _compile(self) -> Callable[[str], re.Match[str] | None]:
        """The fixed parts as literals (as Latin-1: a byte a character, so a part holding non-ASCII
        bytes never matches the ASCII text the expression is used on), each value a group."""
        pattern = "".join(
            f"{re.escape(part.decode('latin-1'))}(.{{{length}}})"
            for part, length in zip(self.fixed_parts, self.value_lengths, strict=True)
        )
        return re.compile(pattern, re.DOTALL).fullmatch

    def values_of(self, region: bytes) -> tuple[str, ...] | None:
        """The values of the map in ``region`` if it has this layout (None otherwise, or where the
        values hold a NUL or bad UTF-8: the entry-by-entry decoder takes those)."""
        match = self.match
        if region.isascii():  # a byte per character: the same slices of the text are the values
            if match is not None:
                found = match(region.decode("ascii"))
                return None if found is None else found.groups()
            self.seen += 1
            if self.seen >= _MATCH_AFTER and self.matchable:
                self.match = self._compile()
            if self.fixed(region) != self.fixed_parts:
                return None
            return self.values(region.decode("ascii"))
        if self.fixed(region) != self.fixed_parts:
            return None
        values = self.values(region)
        joined = b"\0".join(values)
        if joined.count(0) != len(values) - 1:
            return None
        try:
            return tuple(joined.decode().split("\0"))
        except UnicodeDecodeError:
            return None

    def decode(self, region: bytes) -> dict[str, str] | None:
        """The map in ``region`` if it has this layout (None as for ``values_of``)."""
        values = self.values_of(region)
        return None if values is None else dict(zip(self.keys, values, strict=True))

    def header_decoder(self, cls: type, use_alias: bool) -> Callable[[tuple[str, ...]], Any] | None:
        """The typed-header decoder of this layout's values (None: a required field is not in it)."""
        key = (cls, use_alias)
        headers = self.headers
        if key not in headers:
            headers[key] = values_decoder(cls, self.keys, use_alias)
        return headers[key]


_MATCH_AFTER = 64
_MATCH_MAX_FIXED_BYTES = 512
_UNKNOWN: Any = object()  # a layout's typed-header decoder not generated yet
_get_ext = RemotingCommand.ext_fields.__get__  # type: ignore[attr-defined]
_set_ext = RemotingCommand.ext_fields.__set__  # type: ignore[attr-defined]


class LayoutCommand(RemotingCommand):
    """A ROCKETMQ request whose extFields came in a known layout: the values stay a tuple (a typed
    header is built straight from it) and the map is built only when ``ext_fields`` is read."""

    __slots__ = ("ext_layout", "ext_values")

    ext_layout: _ExtLayout
    ext_values: tuple[str, ...] | None

    @property  # type: ignore[override]
    def ext_fields(self) -> dict[str, str] | None:
        values = self.ext_values
        if values is None:  # built, or set
            return _get_ext(self)
        ext = dict(zip(self.ext_layout.keys, values, strict=True))
        _set_ext(self, ext)
        self.ext_values = None
        return ext

    @ext_fields.setter
    def ext_fields(self, ext: dict[str, str] | None) -> None:
        _set_ext(self, ext)
        self.ext_values = None

    def ext_field(self, name: str, default: str | None = None) -> str | None:
        values = self.ext_values
        if values is None:
            return RemotingCommand.ext_field(self, name, default)
        i = self.ext_layout.key_index.get(name)
        return default if i is None else values[i]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and copied) as the RemotingCommand it stands for: its layout is this process's."""
        fields = (self.code, self.language, self.version, self.opaque, self.flag, self.remark)
        return _plain_command, (*fields, self.ext_fields, self.body, self.serialize_type)

    def decode_custom_header(self, cls: type[H], use_alias: bool = False) -> H:
        values = self.ext_values
        if values is not None:
            layout = self.ext_layout
            decode = layout.headers.get((cls, use_alias), _UNKNOWN)
            if decode is _UNKNOWN:
                decode = layout.header_decoder(cls, use_alias)
            if decode is not None:
                try:
                    return decode(values)
                except (ValueError, TypeError):  # the map decoder names the field
                    pass
        return RemotingCommand.decode_custom_header(self, cls, use_alias)


_new_layout_command = LayoutCommand.__new__


def _plain_command(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str] | None,
    body: bytes | None,
    serialize_type: int,
) -> RemotingCommand:
    """A LayoutCommand's pickled form rebuilt as a plain RemotingCommand, its extFields as a map."""
    cmd = _command(code, language, version, opaque, flag, remark, ext, serialize_type)
    cmd.body = body
    return cmd


_MAX_EXT_LAYOUTS = 64
_MAX_LAYOUT_ENTRIES = 64  # request headers have well under 64 fields
# with 64 layouts, at most ~0.5 MiB of keys held (a key may be 32 KiB, so 64 of them would be 2 MiB)
_MAX_LAYOUT_KEY_BYTES = 4096
#: extFields layouts by the map's byte length: the last layout seen twice in a row at that length
_ext_layouts: dict[int, _ExtLayout] = {}
_ext_candidates: dict[int, tuple[int, ...]] = {}  # by the map's byte length: the last layout seen


def encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    """``RocketMQSerializable``'s encoding. Text is UTF-8 as Java's ``getBytes(UTF_8)`` makes it: a
    lone surrogate (which a JSON request can carry in, and an answer echo) becomes "?"."""
    try:
        return _encode_rocketmq_header(cmd, str.encode)
    except UnicodeEncodeError:
        return _encode_rocketmq_header(cmd, _java_utf8)


def _java_utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


def _encode_rocketmq_header(cmd: RemotingCommand, utf8: Callable[[str], bytes]) -> bytes:
    remark = utf8(cmd.remark) if cmd.remark else b""
    ext = cmd.ext_fields
    ext_bytes = encode_ext_fields(ext, utf8) if ext else b""
    return b"".join(
        (
            _pack_fixed(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag),
            _pack_remark_len(len(remark)),
            remark,
            _pack_ext_len(len(ext_bytes)),
            ext_bytes,
        )
    )


def encode_ext_fields(ext: dict[str, str], utf8: Callable[[str], bytes] = str.encode) -> bytes:
    """The entries of a ROCKETMQ header's extFields map, without the map's total length."""
    parts: list[bytes] = []
    append = parts.append
    for key, value in ext.items():
        k = utf8(key)
        v = utf8(value if type(value) is str else str(value))
        append(_pack_key_len(len(k)))
        append(k)
        append(_pack_value_len(len(v)))
        append(v)
    return b"".join(parts)


def rocketmq_frame(code: int, language: int, version: int, opaque: int, flag: int, ext: bytes) -> bytes:
    """A whole frame with a ROCKETMQ header that has no remark and no body, its extFields entries
    already encoded (``encode_ext_fields``): one pack for the frame prefix and the fixed fields."""
    header_length = _HEAD_AFTER_PREFIX + len(ext)
    return (
        _pack_frame_head(
            4 + header_length,
            _ROCKETMQ_WORD | header_length,
            code,
            language,
            version,
            opaque,
            flag,
            0,
            len(ext),
        )
        + ext
    )


_pack_fixed = ROCKETMQ_FIXED.pack
_pack_remark_len = REMARK_LENGTH.pack
_pack_ext_len = EXT_TOTAL_LENGTH.pack
_pack_key_len = EXT_KEY_LENGTH.pack
_pack_value_len = EXT_VALUE_LENGTH.pack
# frame prefix, fixed fields, remark length and extFields length: four declared layouts in one pack
_FRAME_HEAD = joined_struct(FRAME_PREFIX, ROCKETMQ_FIXED, REMARK_LENGTH, EXT_TOTAL_LENGTH)
_pack_frame_head = _FRAME_HEAD.pack
_HEAD_AFTER_PREFIX = _FRAME_HEAD.size - FRAME_PREFIX.size
_ROCKETMQ_WORD = int(_ROCKETMQ) << 24

DECODERS = (decode_json_header, decode_rocketmq_header)
ENCODERS = (encode_json_header, encode_rocketmq_header)
