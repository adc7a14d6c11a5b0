"""Header decoding: the JSON scanner fast path and the full decoder agree; a ROCKETMQ extFields
layout seen again decodes like the construct declaration; errors stay HeaderError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqgate.wire import FrameDecoder, RemotingCommand, encode_frame, serialization
from rmqgate.wire.codes import LanguageCode, SerializeType
from rmqgate.wire.errors import HeaderError
from rmqgate.wire.frame import encode_header
from rmqgate.wire.headers import SendMessageRequestHeader
from rmqgate.wire.layout import RocketMQHeader
from rmqgate.wire.serialization import decode_json_header, decode_rocketmq_header

HEADER = b'{"code":310,"extFields":{"b":"T","e":"3"},"flag":0,"language":"CPP","opaque":7,"version":409}'


@pytest.mark.parametrize("text", [HEADER, b" " + HEADER, HEADER + b" \n", b"\t" + HEADER + b"\r\n"])
def test_surrounding_whitespace_decodes_like_the_bare_object(text: bytes) -> None:
    cmd = decode_json_header(text)
    assert (cmd.code, cmd.opaque, cmd.version, cmd.flag) == (310, 7, 409, 0)
    assert cmd.language == LanguageCode.CPP and cmd.serialize_type == SerializeType.JSON
    assert cmd.ext_fields == {"b": "T", "e": "3"}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (HEADER + b"{}", "does not parse"),
        (HEADER[:-1], "does not parse"),
        (b"", "does not parse"),
        (b"[" * 100_000, "does not parse"),  # nesting deeper than the recursion limit
        (b"[1]", "not an object"),
        (b'{"opaque":1}', "no 'code'"),
        (b'{"code":"310"}', "must be integers"),
        (b"\xff{}", "not valid UTF-8"),
    ],
)
def test_bad_json_headers_are_header_errors(text: bytes, match: str) -> None:
    with pytest.raises(HeaderError, match=match):
        decode_json_header(text)


def test_non_string_ext_values_are_normalised() -> None:
    cmd = decode_json_header(b'{"code":1,"extFields":{"a":1,"b":true,"c":null,"d":"x","e":1.5}}')
    assert cmd.ext_fields == {"a": "1", "b": "true", "d": "x", "e": "1.5"}


@pytest.mark.parametrize("value", ["-1", "0", "7", "1023", "1024", "-2", "+5", "00", "-0", "2147483647"])
def test_int_fields_parse_like_integer_parse_int(value: str) -> None:
    """The small-number shortcut and the parser agree (range and syntax: test_headers.py)."""
    ext = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": value, "f": "0", "g": "1", "h": "0"}
    assert SendMessageRequestHeader.from_ext_v2(ext).queue_id == int(value)
    ext["j"] = value
    assert SendMessageRequestHeader.from_ext_v2(ext).reconsume_times == int(value)


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_lone_surrogate_a_json_request_carried_in_is_written_as_java_writes_it(serialize_type: int) -> None:
    """A JSON header may escape a lone surrogate; an answer echoing it (a remark, an ext field) is
    written as Java's getBytes(UTF_8) writes it, "?", instead of failing to encode."""
    request = decode_json_header(b'{"code":17,"extFields":{"topic":"a\\ud800b"},"opaque":3,"version":1}')
    assert request.ext_fields == {"topic": "a\ud800b"}
    answer = RemotingCommand(
        17, flag=1, opaque=3, remark=f"topic {request.ext_fields['topic']} bad",
        ext_fields=dict(request.ext_fields), serialize_type=serialize_type,
    )  # fmt: skip
    (decoded,) = FrameDecoder().feed(encode_frame(answer))
    assert decoded.remark == "topic a?b bad" and decoded.ext_fields == {"topic": "a?b"}


def _declared_ext(header: bytes) -> dict[str, str] | None:
    """extFields as the construct declaration parses them (the reference the decoder must match)."""
    entries = RocketMQHeader.parse(header).ext_fields
    return {e.key: e.value for e in entries} or None


def _rocketmq_header(ext: dict[str, str], opaque: int = 1) -> bytes:
    return encode_header(
        RemotingCommand.request(310, ext, opaque=opaque, serialize_type=SerializeType.ROCKETMQ)
    )


@given(
    st.dictionaries(st.text(max_size=6), st.text(max_size=12), max_size=8),
    st.data(),
)
def test_a_repeated_ext_layout_decodes_like_the_declaration(ext: dict[str, str], data: st.DataObject) -> None:
    header = _rocketmq_header(ext)
    for _ in range(3):  # the third decode takes the layout seen twice
        assert decode_rocketmq_header(header).ext_fields == _declared_ext(header) == (ext or None)
    # the same layout (keys, each value's byte length) with other values, NULs and non-ASCII included
    other = {
        key: data.draw(st.text(alphabet="aZ\x00\x01é", min_size=n, max_size=n))
        for key, n in ((k, len(v.encode())) for k, v in ext.items())
    }
    other = {k: v for k, v in other.items() if len(v.encode()) == len(ext[k].encode())}
    if len(other) == len(ext):
        again = _rocketmq_header(other, opaque=2)
        cmd = decode_rocketmq_header(again)
        assert cmd.ext_fields == _declared_ext(again) == (other or None) and cmd.opaque == 2


def test_a_known_layout_with_bad_utf8_or_other_keys_is_decoded_entry_by_entry() -> None:
    ext = {"a": "group", "b": "TopicTest", "i": "UNIQ_KEY\x01" + "7F" * 16, "n": "broker-a"}
    header = _rocketmq_header(ext)
    for _ in range(3):
        assert decode_rocketmq_header(header).ext_fields == ext
    # same lengths, other keys
    renamed = _rocketmq_header({"x" if k == "a" else k: v for k, v in ext.items()})
    assert decode_rocketmq_header(renamed).ext_fields == {"x" if k == "a" else k: v for k, v in ext.items()}
    # same lengths, a value that is not UTF-8
    bad = header.replace(b"TopicTest", b"Topic\xffTst")
    with pytest.raises(HeaderError, match="not valid UTF-8"):
        decode_rocketmq_header(bad)
    # same lengths, a value holding NUL
    nul = {**ext, "b": "Topic\x00Tst"}
    assert decode_rocketmq_header(_rocketmq_header(nul)).ext_fields == nul
    assert decode_rocketmq_header(header).ext_fields == ext


def test_a_large_map_and_a_one_entry_map_repeat_like_any_other() -> None:
    large = {f"key{i}": "v" * (i % 5) for i in range(3000)}
    single = {"topic": "TopicTest"}
    for ext in (large, single, large, single):
        header = _rocketmq_header(ext)
        for _ in range(3):
            assert decode_rocketmq_header(header).ext_fields == ext


def test_a_map_with_long_keys_is_decoded_but_its_layout_not_kept() -> None:
    """The layouts are shared by every connection: one whose keys hold more than a few KiB is not
    kept (a hostile client's 32 KiB keys would otherwise stay in memory), a usual one is."""
    for ext, kept in (({"k" * 3000: "a", "K" * 3000: "b"}, False), ({"topic": "T", "queueId": "1"}, True)):
        header = _rocketmq_header(ext)
        for _ in range(3):
            assert decode_rocketmq_header(header).ext_fields == ext
        map_length = len(header) - serialization._HEAD_SIZE
        assert (map_length in serialization._ext_layouts) is kept
