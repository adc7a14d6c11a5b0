"""fastjson dialect: bare/object map keys on input, legacy vs BrowserCompatible output, PrettyFormat."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqgate.wire.errors import BodyError
from rmqgate.wire.fastjson import JS_SAFE_INTEGER, ObjectKey, dumps, loads

# --- reading -------------------------------------------------------------------------------------


def test_bare_integer_keys_are_read_as_text_keys() -> None:
    assert loads(b'{"offsetTable":{"t@g":{0:12,1:3}}}\n') == {"offsetTable": {"t@g": {"0": 12, "1": 3}}}
    assert loads(b'{"brokerAddrs":{0:"10.0.0.1:10911", -1 : "x"}}') == {
        "brokerAddrs": {"0": "10.0.0.1:10911", "-1": "x"}
    }


def test_strings_that_look_like_bare_keys_are_left_alone() -> None:
    text = r'{"a":"{0:x,1:y}","b":{0:"{1:\"z\",2:3}"},"c":",7:","d":"\\",9:"\"{4:"}'
    assert loads(text) == {"a": "{0:x,1:y}", "b": {"0": '{1:"z",2:3}'}, "c": ",7:", "d": "\\", "9": '"{4:'}


def test_numbers_in_arrays_are_not_keys() -> None:
    assert loads("[1,2,{3:[4,5]}]") == [1, 2, {"3": [4, 5]}]


def test_object_keys_as_fastjson_writes_map_of_message_queue() -> None:
    text = '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5}},"consumeTps":0.0}'
    parsed = loads(text)
    (key,) = parsed["offsetTable"]
    assert isinstance(key, ObjectKey)
    assert key.as_dict() == {"brokerName": "b", "queueId": 0, "topic": "t"}
    assert parsed["offsetTable"][key] == {"maxOffset": 5}
    assert parsed["consumeTps"] == 0.0


def test_trailing_whitespace_and_cpp_newline_are_accepted() -> None:
    assert loads(b'{"clientID":"x"}\n') == {"clientID": "x"}
    assert loads(b'  {"a":{0:1}} \r\n\t') == {"a": {"0": 1}}


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"{",
        b"{0:}",
        b'{"a" 1}',
        b"[1,]",
        b"\xff\xfe",
        b'{"a":1} x',
        b'{{"a":[1]}:2}',
        b"{[1]:2}",
        b"nul",
    ],
)
def test_malformed_json_is_a_body_error(bad: bytes) -> None:
    with pytest.raises(BodyError):
        loads(bad)


def test_numbers_beyond_the_digit_limit_are_a_body_error() -> None:
    with pytest.raises(BodyError, match="number too long"):
        loads("{0:" + "9" * 5000 + "}")


def test_deep_nesting_is_a_body_error() -> None:
    with pytest.raises(BodyError):
        loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BodyError):
        loads("{0:" * 2_000 + "1" + "}" * 2_000)


# --- writing -------------------------------------------------------------------------------------


def test_legacy_style_writes_integer_keys_bare_and_sorts_like_map_sort_field() -> None:
    obj = {"b": {10: "x", 9: "y"}, "a": [1, None, True], "c": None}
    assert dumps(obj, quoted_keys=False) == b'{"a":[1,null,true],"b":{9:"y",10:"x"}}'


def test_browser_compatible_quotes_keys_escapes_and_protects_long_precision() -> None:
    obj = {"brokerAddrs": {0: "é/x"}, "big": JS_SAFE_INTEGER + 1, "ok": JS_SAFE_INTEGER, "neg": -(2**60)}
    assert dumps(obj, quoted_keys=True) == (
        b'{"big":"9007199254740992","brokerAddrs":{"0":"\\u00E9\\/x"},'
        b'"neg":"-1152921504606846976","ok":9007199254740991}'
    )
    assert (
        dumps(obj, quoted_keys=False)
        == (
            '{"big":9007199254740992,"brokerAddrs":{0:"é/x"},"neg":-1152921504606846976,"ok":9007199254740991}'
        ).encode()
    )


def test_string_escapes_match_fastjson() -> None:
    s = 'q"b\\n\nt\tc\x01d\x7fe\u2028\U0001f600'
    assert (
        dumps([s], quoted_keys=False) == ('["q\\"b\\\\n\\nt\\tc\\u0001d\\u007Fe\\u2028\U0001f600"]').encode()
    )
    assert dumps([s], quoted_keys=True) == b'["q\\"b\\\\n\\nt\\tc\\u0001d\\u007Fe\\u2028\\uD83D\\uDE00"]'


def test_doubles_are_written_in_java_notation() -> None:
    values = [0.0, 1.5, 123.0, 0.001, 1e7, 12345678.9, 1e20, 1.5e-4, -2.5e-10]
    assert (
        dumps(values, quoted_keys=False) == b"[0.0,1.5,123.0,0.001,1.0E7,1.23456789E7,1.0E20,1.5E-4,-2.5E-10]"
    )
    assert loads(dumps(values, quoted_keys=True)) == values


def test_pretty_format_shape() -> None:
    obj = {"offsetTable": {"t@g": {0: 1, 1: 2}}, "empty": {}, "list": ["a"], "none": []}
    assert dumps(obj, quoted_keys=False, pretty=True, sort_keys=False) == (
        b'{\n\t"offsetTable":{\n\t\t"t@g":{0:1,1:2\n\t\t}\n\t},\n\t"empty":{},\n\t"list":[\n\t\t"a"\n\t],'
        b'\n\t"none":[]\n}'
    )


def _typed_keys(value: Any) -> Any:
    """What the Java side held: maps whose keys were written bare are Integer/Long maps."""
    if isinstance(value, dict):
        return {(int(k) if k.lstrip("-").isdigit() else k): _typed_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed_keys(v) for v in value]
    return value


def test_store_config_files_rewrite_byte_for_byte(corpus: Path, tmp_path: Path) -> None:
    with tarfile.open(corpus / "java-4.9.8-store-clean.tgz") as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".json") and "/config/" in m.name]
        tar.extractall(tmp_path, members=members, filter="data")
    files = sorted(tmp_path.glob("*/config/*.json"))
    assert {f.name for f in files} >= {"topics.json", "consumerOffset.json", "subscriptionGroup.json"}
    for path in files:
        raw = path.read_bytes()
        assert dumps(_typed_keys(loads(raw)), quoted_keys=False, pretty=True, sort_keys=False) == raw, path


# --- properties ----------------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(['{0:"', ",1:", '\\"', "{", ":"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_text, inner, max_size=4)
        | st.dictionaries(st.integers(-(2**63), 2**63 - 1), inner, max_size=4)
    ),
    max_leaves=20,
)


def _expected(value: Any, browser: bool) -> Any:
    """``value`` as it reads back: keys as text, None members dropped, unsafe longs as text (browser)."""
    if isinstance(value, dict):
        return {str(k): _expected(v, browser) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_expected(v, browser) for v in value]
    if browser and type(value) is int and abs(value) > JS_SAFE_INTEGER:
        return str(value)
    return value


@given(_values, st.booleans(), st.booleans())
def test_round_trip(value: Any, quoted: bool, pretty: bool) -> None:
    assert loads(dumps(value, quoted_keys=quoted, pretty=pretty)) == _expected(value, quoted)


@given(_values)
def test_browser_compatible_output_is_ascii_standard_json(value: Any) -> None:
    out = dumps(value, quoted_keys=True)
    assert out.isascii()
    assert json.loads(out) == _expected(value, True)


@given(st.dictionaries(_text, _values, max_size=4))
def test_legacy_output_without_integer_keys_is_standard_json(value: dict[str, Any]) -> None:
    def has_int_keys(v: Any) -> bool:
        if isinstance(v, dict):
            return any(not isinstance(k, str) or has_int_keys(x) for k, x in v.items())
        return isinstance(v, list) and any(has_int_keys(x) for x in v)

    out = dumps(value, quoted_keys=False)
    if not has_int_keys(value):
        assert json.loads(out) == _expected(value, False)


@given(st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_arbitrary_input_parses_or_raises_body_error(data: bytes) -> None:
    try:
        loads(data)
    except BodyError:
        pass
