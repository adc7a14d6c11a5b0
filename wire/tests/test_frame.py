"""Frame envelope and incremental decoding."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqgate.wire import FrameDecoder, LanguageCode, RemotingCommand, decode_frame, encode_frame
from rmqgate.wire.errors import CodecError, FrameError, FrameTooLarge, HeaderError


def _cmd(ser: int, body: bytes | None = b"payload") -> RemotingCommand:
    return RemotingCommand.request(310, {"a": "group", "b": "Topic"}, body, opaque=7, serialize_type=ser)


@pytest.mark.parametrize("ser", [0, 1])
def test_byte_by_byte_feed_yields_the_command(ser: int) -> None:
    frame = encode_frame(_cmd(ser))
    decoder = FrameDecoder()
    out = []
    for i in range(len(frame)):
        out += decoder.feed(frame[i : i + 1])
    assert out == [_cmd(ser)]
    assert decoder.buffered == 0


def test_several_frames_in_one_chunk_and_a_partial_tail() -> None:
    a, b = encode_frame(_cmd(0)), encode_frame(_cmd(1, None))
    decoder = FrameDecoder()
    assert decoder.feed(a + b + a[:5]) == [_cmd(0), _cmd(1, None)]
    assert decoder.buffered == 5
    assert decoder.feed(a[5:]) == [_cmd(0)]


def test_frame_over_the_limit_is_rejected_before_buffering_it() -> None:
    decoder = FrameDecoder(max_frame_length=64)
    with pytest.raises(FrameTooLarge, match="exceeds the limit of 64"):
        decoder.feed(b"\x00\x00\x10\x00\x00\x00\x00\x10")


@pytest.mark.parametrize("length", [0, 3, 64])
def test_a_bad_length_is_rejected_once_its_four_bytes_are_in(length: int) -> None:
    """As Netty's frame decoder: the length field alone decides; the frames before it are kept."""
    good = encode_frame(_cmd(1))
    for feed in (FrameDecoder.feed, FrameDecoder.feed_raw):
        decoder = FrameDecoder(max_frame_length=63)
        with pytest.raises(FrameError) as err:
            feed(decoder, good + length.to_bytes(4, "big"))
        kept = err.value.decoded if feed is FrameDecoder.feed else err.value.frames  # type: ignore[attr-defined]
        assert len(kept) == 1
    assert FrameDecoder().feed(good + (4).to_bytes(4, "big")) == [_cmd(1)]  # a good length: wait for more


def test_header_length_beyond_frame_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="bad header length"):
        FrameDecoder().feed(b"\x00\x00\x00\x08\x00\x00\x00\x20abcd")


def test_bad_header_consumes_its_frame_and_keeps_the_rest() -> None:
    bad = b"\x00\x00\x00\x07\x00\x00\x00\x03{x}"
    good = encode_frame(_cmd(0))
    decoder = FrameDecoder()
    with pytest.raises(HeaderError) as info:
        decoder.feed(good + bad + good)
    assert info.value.decoded == [_cmd(0)]
    assert decoder.feed(b"") == [_cmd(0)]


def test_decode_frame_round_trip() -> None:
    for ser in (0, 1):
        assert decode_frame(encode_frame(_cmd(ser))) == _cmd(ser)


# --- property-based round trips and malformed input ---------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(list(LanguageCode)).map(int),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | text.filter(bool),
    ext_fields=st.none() | st.dictionaries(text, text, min_size=1, max_size=8),
    body=st.none() | st.binary(min_size=1, max_size=300),
    serialize_type=st.sampled_from([0, 1]),
)


@given(commands, st.lists(st.integers(1, 50), max_size=20))
def test_any_command_round_trips_through_any_chunking(cmd: RemotingCommand, cuts: list[int]) -> None:
    frame = encode_frame(cmd)
    decoder = FrameDecoder()
    out, pos = [], 0
    for n in cuts:
        out += decoder.feed(frame[pos : pos + n])
        pos += n
    out += decoder.feed(frame[pos:])
    assert out == [cmd]
    assert decode_frame(frame) == cmd


@given(commands)
def test_rocketmq_header_reencodes_to_the_same_bytes(cmd: RemotingCommand) -> None:
    cmd.serialize_type = 1
    frame = encode_frame(cmd)
    assert encode_frame(decode_frame(frame)) == frame


@given(st.binary(max_size=400))
@settings(max_examples=400)
def test_random_bytes_give_commands_or_a_codec_error(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_length=4096)
    try:
        for cmd in decoder.feed(data):
            assert isinstance(cmd, RemotingCommand)
    except CodecError:
        pass


@given(commands, st.data())
def test_corrupted_header_bytes_give_a_header_error_or_a_command(
    cmd: RemotingCommand, data: st.DataObject
) -> None:
    frame = bytearray(encode_frame(cmd))
    header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    pos = data.draw(st.integers(8, 8 + header_length - 1))
    frame[pos] ^= data.draw(st.integers(1, 255))
    try:
        decode_frame(bytes(frame))
    except CodecError:
        pass


@pytest.mark.parametrize(
    ("frame", "error", "match"),
    [
        (b"\x00\x00\x00", FrameError, "shorter than its 8-byte prefix"),
        (b"\x00\x00\x00\x02\x00\x00\x00\x00", FrameError, "length 2 leaves no room"),
        (b"\x00\x00\x00\x05\x02\x00\x00\x01{", FrameError, "unknown serialization type 2"),
        (b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xfe", HeaderError, "not valid UTF-8"),
        (b"\x00\x00\x00\x06\x00\x00\x00\x02[]", HeaderError, "not an object"),
        (b'\x00\x00\x00\x0e\x00\x00\x00\x0a{"flag":1}', HeaderError, "no 'code'"),
        (b"\x00\x00\x00\x08\x01\x00\x00\x04\x00\x01\x00\x00", HeaderError, "truncated"),
        (b"\x00\x00\x00\x09\x00\x00\x00\x02{}", FrameError, "says 13 bytes but 10"),
    ],
)
def test_malformed_frames_get_the_typed_error(frame: bytes, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        decode_frame(frame)


def test_rocketmq_header_lengths_beyond_the_header_are_rejected() -> None:
    header = bytearray(encode_frame(_cmd(1, None))[8:])
    header[13:17] = (10_000).to_bytes(4, "big")  # remark length
    frame = (4 + len(header)).to_bytes(4, "big") + ((1 << 24) | len(header)).to_bytes(4, "big") + header
    with pytest.raises(HeaderError, match="remark length 10000 exceeds the header"):
        decode_frame(bytes(frame))
