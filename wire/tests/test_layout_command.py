"""A ROCKETMQ request whose extFields came in a known layout (``LayoutCommand``): its map, read
lazily, and its typed header, built straight from the values, are what the map decoders give, before
and after the layout gets its regular expression; bad values raise the map decoder's errors."""

from __future__ import annotations

import copy
import pickle
import tracemalloc
from collections.abc import Iterator

import pytest

from rmqgate.wire import RemotingCommand, serialization
from rmqgate.wire.codes import RequestCode, SerializeType
from rmqgate.wire.errors import HeaderFieldError
from rmqgate.wire.frame import encode_header
from rmqgate.wire.headers import PullMessageRequestHeader, SendMessageRequestHeader
from rmqgate.wire.serialization import LayoutCommand, decode_rocketmq_header

SEND_V2 = {
    "a": "producer", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "12", "f": "0",
    "g": "1795810577307", "h": "0", "i": "UNIQ_KEY\x01ABCD\x02WAIT\x01true", "j": "0", "k": "false",
    "m": "false", "n": "broker-a",
}  # fmt: skip

# values of the same byte lengths as SEND_V2's: the same layout
VALID = [
    {"e": "07", "g": "+179581057730"},  # a sign, a leading zero: Integer.parseInt / Long.parseLong
    {"e": "-1", "g": "0000000000001"},
    {"e": "\u0663", "g": "1795810577307"},  # a Unicode Nd digit (two UTF-8 bytes): Java takes it
    {"k": "FALSE", "m": "1\x00\x00\x00\x00", "j": "9"},  # a NUL in a value the typed header ignores
    {"a": "prodéer"},  # non-ASCII: split by the itemgetters
    {"b": "Topic\x00Tst"},
]
REFUSED = [
    ({"e": "x1"}, "'e' = 'x1' is not a valid Integer"),
    ({"e": "\u00b2"}, "'e' = '\u00b2' is not a valid Integer"),  # isdigit() but no digit to Java
    ({"g": " 179581057730"}, "'g' = ' 179581057730' is not a valid Long"),
    ({"j": "+"}, "'j' = '+' is not a valid Integer"),
]


def _header(ext: dict[str, str], code: int = RequestCode.SEND_MESSAGE_V2) -> bytes:
    return encode_header(RemotingCommand.request(code, ext, opaque=5, serialize_type=SerializeType.ROCKETMQ))


@pytest.fixture(autouse=True)
def _fresh_layouts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(serialization, "_ext_layouts", {})
    monkeypatch.setattr(serialization, "_ext_candidates", {})
    yield


def _warm(ext: dict[str, str], code: int, matched: bool) -> None:
    """Decode ``ext``'s layout until it is kept, and past ``_MATCH_AFTER`` where ``matched``."""
    for _ in range(serialization._MATCH_AFTER + 2 if matched else 3):
        decode_rocketmq_header(_header(ext, code))
    layout = serialization._ext_layouts[len(_header(ext, code)) - serialization._HEAD_SIZE]
    assert (layout.match is not None) is matched


@pytest.mark.parametrize("matched", [False, True], ids=["itemgetter", "regex"])
def test_the_typed_header_and_the_map_are_the_map_decoders(matched: bool) -> None:
    _warm(SEND_V2, RequestCode.SEND_MESSAGE_V2, matched)
    for change in [{}, *VALID]:
        ext = {**SEND_V2, **change}
        cmd = decode_rocketmq_header(_header(ext))
        assert type(cmd) is LayoutCommand
        header = cmd.decode_custom_header(SendMessageRequestHeader, True)
        assert header == SendMessageRequestHeader.from_ext_v2(ext)
        assert cmd.ext_fields == ext and cmd.opaque == 5 and cmd.code == RequestCode.SEND_MESSAGE_V2
        # read after the map was built, and compared with a command that holds the map
        assert cmd.decode_custom_header(SendMessageRequestHeader, True) == header
        assert cmd == RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, ext, opaque=5, serialize_type=SerializeType.ROCKETMQ
        )


@pytest.mark.parametrize("matched", [False, True], ids=["itemgetter", "regex"])
def test_a_bad_value_raises_what_the_map_decoder_raises(matched: bool) -> None:
    _warm(SEND_V2, RequestCode.SEND_MESSAGE_V2, matched)
    for change, message in REFUSED:
        cmd = decode_rocketmq_header(_header({**SEND_V2, **change}))
        assert type(cmd) is LayoutCommand
        with pytest.raises(HeaderFieldError) as raised:
            cmd.decode_custom_header(SendMessageRequestHeader, True)
        assert message in str(raised.value)


def test_numbers_at_the_edge_of_the_java_range() -> None:
    """Same byte lengths, one inside the Java type's range and one past it."""
    edge = {**SEND_V2, "e": "2147483647", "g": "9223372036854775807"}
    _warm(edge, RequestCode.SEND_MESSAGE_V2, True)
    header = decode_rocketmq_header(_header(edge)).decode_custom_header(SendMessageRequestHeader, True)
    assert (header.queue_id, header.born_timestamp) == (2**31 - 1, 2**63 - 1)
    for key, value, java in (("e", "2147483648", "Integer"), ("g", "9223372036854775808", "Long")):
        cmd = decode_rocketmq_header(_header({**edge, key: value}))
        with pytest.raises(HeaderFieldError, match=f"'{key}' = '{value}' is out of range of a Java {java}"):
            cmd.decode_custom_header(SendMessageRequestHeader, True)


def test_a_layout_without_a_required_field_and_the_long_names() -> None:
    no_topic = {k: v for k, v in SEND_V2.items() if k != "b"}
    _warm(no_topic, RequestCode.SEND_MESSAGE_V2, True)
    cmd = decode_rocketmq_header(_header(no_topic))
    with pytest.raises(HeaderFieldError, match="required field 'b' is missing"):
        cmd.decode_custom_header(SendMessageRequestHeader, True)
    # the same values under the long names (SEND_MESSAGE): the long-name decoder, not the aliases
    names = {f.alias: f.wire for f in SendMessageRequestHeader.FIELDS}
    long_names = {names[k]: v for k, v in SEND_V2.items()}
    _warm(long_names, RequestCode.SEND_MESSAGE, True)
    cmd = decode_rocketmq_header(_header(long_names, RequestCode.SEND_MESSAGE))
    assert cmd.decode_custom_header(SendMessageRequestHeader) == SendMessageRequestHeader.from_ext(long_names)
    with pytest.raises(HeaderFieldError, match="required field 'a' is missing"):
        cmd.decode_custom_header(SendMessageRequestHeader, True)
    # one layout, two header classes
    pull = {"consumerGroup": "g", "topic": "T", "queueId": "1", "queueOffset": "0", "maxMsgNums": "32"}
    pull |= {"sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "1", "subVersion": "0"}
    _warm(pull, RequestCode.PULL_MESSAGE, True)
    cmd = decode_rocketmq_header(_header(pull, RequestCode.PULL_MESSAGE))
    assert cmd.decode_custom_header(PullMessageRequestHeader) == PullMessageRequestHeader.from_ext(pull)
    with pytest.raises(HeaderFieldError, match="required field 'producerGroup' is missing"):
        cmd.decode_custom_header(SendMessageRequestHeader)


def test_a_map_set_on_the_command_replaces_the_values() -> None:
    _warm(SEND_V2, RequestCode.SEND_MESSAGE_V2, True)
    cmd = decode_rocketmq_header(_header(SEND_V2))
    cmd.ext_fields = {**SEND_V2, "b": "Other"}
    assert cmd.decode_custom_header(SendMessageRequestHeader, True).topic == "Other"
    assert cmd.ext_fields == {**SEND_V2, "b": "Other"}
    cmd.ext_fields = None
    assert cmd.ext_fields is None
    with pytest.raises(HeaderFieldError, match="the request has no extFields"):
        cmd.decode_custom_header(SendMessageRequestHeader, True)


def test_a_layout_command_pickles_and_copies_as_a_remoting_command() -> None:
    """What it is sent as between processes (a replay's outcomes): the command, not the layout cache."""
    _warm(SEND_V2, RequestCode.SEND_MESSAGE_V2, True)
    cmd = decode_rocketmq_header(_header(SEND_V2))
    cmd.body = b"payload"
    cmd.decode_custom_header(SendMessageRequestHeader, True)  # the layout now holds a generated decoder
    for other in (pickle.loads(pickle.dumps(cmd)), copy.copy(cmd), copy.deepcopy(cmd)):
        assert type(other) is RemotingCommand and other == cmd
        assert other.body == b"payload" and other.ext_fields == SEND_V2 and other.opaque == 5


def test_a_client_cycling_layouts_with_long_keys_leaves_no_compiled_patterns_behind() -> None:
    """Such layouts keep their itemgetters (and decode as before) past ``_MATCH_AFTER`` maps: a
    pattern ``re`` compiled for each would stay in its module cache after the layout is dropped."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20):
            ext = {f"{n:04d}{i:02d}" + "k" * 58: str(i) for i in range(64)}  # 64 keys, 4 KiB
            for _ in range(serialization._MATCH_AFTER + 3):
                cmd = decode_rocketmq_header(_header(ext, RequestCode.PULL_MESSAGE))
            assert type(cmd) is LayoutCommand and cmd.ext_fields == ext
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 300_000  # one layout's keys; a pattern for each would hold ~0.9 MB


@pytest.mark.parametrize("matched", [False, True], ids=["itemgetter", "regex"])
def test_one_field_is_read_without_building_the_map(matched: bool) -> None:
    _warm(SEND_V2, RequestCode.SEND_MESSAGE_V2, matched)
    ext = {**SEND_V2, "b": "OtherTopi"}
    cmd = decode_rocketmq_header(_header(ext))
    plain = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext)
    for name, default in (("b", None), ("n", None), ("topic", None), ("topic", "-"), ("b", "-")):
        assert cmd.ext_field(name, default) == plain.ext_field(name, default)
    assert cmd.ext_field("b") == "OtherTopi" and cmd.ext_field("topic", "-") == "-"
    assert cmd.ext_values is not None  # the map is still unbuilt
    cmd.ext_fields["b"] = "Changed"  # built now: what is read is the map
    assert cmd.ext_values is None and cmd.ext_field("b") == "Changed"
    assert RemotingCommand(0).ext_field("b", "-") == "-"
