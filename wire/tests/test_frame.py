"""Frame envelope and incremental decoding."""

import pytest

from rmqgate.wire import FrameDecoder, RemotingCommand, decode_frame, encode_frame
from rmqgate.wire.errors import FrameError, FrameTooLarge, HeaderError


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
