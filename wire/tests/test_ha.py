"""The HA stream's layouts and decoders: frames and reports split anywhere decode the same."""

from __future__ import annotations

import pytest

from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.ha import (
    SlaveReport,
    SlaveReportDecoder,
    TransferDecoder,
    TransferFrame,
    encode_slave_report,
    encode_transfer_header,
)


def test_layouts_are_java_byte_order_and_sizes() -> None:
    frame = encode_transfer_header(0x0102030405060708, 3) + b"abc"
    assert frame == bytes.fromhex("0102030405060708 00000003") + b"abc"
    assert TransferFrame.parse(frame) == {"phy_offset": 0x0102030405060708, "body_size": 3, "body": b"abc"}
    assert encode_slave_report(1 << 40) == SlaveReport.build({"max_offset": 1 << 40})
    assert len(encode_slave_report(0)) == 8


@pytest.mark.parametrize("chunk", [1, 5, 12, 13, 1000])
def test_transfer_decoder_takes_frames_split_anywhere(chunk: int) -> None:
    frames = [(1024, b"x" * 30), (1054, b""), (1054, bytes(range(256)))]
    stream = b"".join(encode_transfer_header(off, len(body)) + body for off, body in frames)
    decoder = TransferDecoder()
    got: list[tuple[int, bytes]] = []
    for i in range(0, len(stream), chunk):
        got += decoder.feed(stream[i : i + chunk])
    assert got == frames and decoder.buffered == 0


def test_transfer_decoder_refuses_a_negative_or_oversized_body() -> None:
    with pytest.raises(MessageFormatError):
        TransferDecoder().feed(encode_transfer_header(0, 1 << 30)[:8] + (-1).to_bytes(4, "big", signed=True))
    with pytest.raises(MessageFormatError):
        TransferDecoder(max_body=10).feed(encode_transfer_header(0, 11))


def test_slave_report_decoder_keeps_the_newest_complete_report() -> None:
    d = SlaveReportDecoder()
    assert d.feed(encode_slave_report(5)[:3]) is None
    data = encode_slave_report(5)[3:] + encode_slave_report(9) + encode_slave_report(12)[:7]
    assert d.feed(data) == 9
    assert d.feed(encode_slave_report(12)[7:]) == 12
    assert d.feed(b"") is None
