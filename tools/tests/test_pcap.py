"""pcap reading, TCP reassembly and frame splitting on captures crafted with scapy."""

from __future__ import annotations

import itertools
import random
import struct
from pathlib import Path

import pytest
from scapy.all import (
    IP,
    TCP,
    CookedLinux,
    CookedLinuxV2,
    Dot1Q,
    Ether,
    IPv6,
    Loopback,
    Packet,
    PcapWriter,
    Raw,
    wrpcap,
    wrpcapng,
)

from rmqgate.tools.pcap import (
    CapturedFrame,
    StreamChunk,
    StreamEnd,
    StreamGap,
    StrictError,
    TcpReassembler,
    iter_packets,
    iter_tcp_streams,
    read_frames,
)
from rmqgate.wire import RemotingCommand, encode_frame
from rmqgate.wire.codes import SerializeType

MASK = 0xFFFFFFFF
T0 = 1_700_000_000.0


def cmd(
    code: int, opaque: int, ser: int = SerializeType.JSON, *, body: bytes = b"", flag: int = 0, **ext: str
) -> RemotingCommand:
    return RemotingCommand(
        code, opaque=opaque, flag=flag, ext_fields=ext or None, body=body or None, serialize_type=ser
    )


class Tcp:
    """Packets of one TCP connection; sequence numbers tracked per side ("c" client, "s" server)."""

    def __init__(
        self,
        client: tuple[str, int] = ("10.0.0.1", 40001),
        server: tuple[str, int] = ("10.0.0.2", 10911),
        isn: tuple[int, int] = (1000, 900_000),
        v6: bool = False,
    ) -> None:
        self.ends = {"c": client, "s": server}
        self.seq = {"c": isn[0], "s": isn[1]}
        self.start = {"c": (isn[0] + 1) & MASK, "s": (isn[1] + 1) & MASK}  # stream offset 0
        self.ip = IPv6 if v6 else IP

    @property
    def client(self) -> str:
        host, port = self.ends["c"]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def server(self) -> str:
        host, port = self.ends["s"]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def packet(self, side: str, flags: str, seq: int, payload: bytes = b"", ack: int | None = None) -> Packet:
        other = "s" if side == "c" else "c"
        (src, sport), (dst, dport) = self.ends[side], self.ends[other]
        ack = self.seq[other] if ack is None else ack
        pkt = self.ip(src=src, dst=dst) / TCP(
            sport=sport, dport=dport, flags=flags, seq=seq & MASK, ack=ack & MASK
        )
        return pkt / Raw(payload) if payload else pkt

    def handshake(self) -> list[Packet]:
        syn = self.packet("c", "S", self.seq["c"], ack=0)
        self.seq["c"] += 1
        synack = self.packet("s", "SA", self.seq["s"])
        self.seq["s"] += 1
        return [syn, synack, self.packet("c", "A", self.seq["c"])]

    def send(self, side: str, data: bytes, mss: int = 1460) -> list[Packet]:
        out = []
        for i in range(0, len(data), mss):
            out.append(self.packet(side, "PA", self.seq[side], data[i : i + mss]))
            self.seq[side] += len(data[i : i + mss])
        return out

    def at(self, side: str, offset: int, data: bytes) -> Packet:
        """A segment carrying ``data`` at stream ``offset`` (retransmissions, overlaps)."""
        return self.packet(side, "PA", self.start[side] + offset, data)

    def ack(self, side: str) -> Packet:
        return self.packet(side, "A", self.seq[side])

    def fin(self, side: str) -> Packet:
        pkt = self.packet(side, "FA", self.seq[side])
        self.seq[side] += 1
        return pkt

    def rst(self, side: str) -> Packet:
        return self.packet(side, "R", self.seq[side])


def stamp(packets: list[Packet]) -> list[Packet]:
    for i, p in enumerate(packets):
        p.time = T0 + i / 1000
    return packets


def write(path: Path, packets: list[Packet]) -> Path:
    wrpcap(str(path), stamp([Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p for p in packets]))
    return path


def frames_of(path: Path) -> list[CapturedFrame]:
    reader = read_frames(path)
    out = list(reader)
    assert not reader.truncated and not reader.gaps
    return out


def test_interleaved_connections_json_and_rocketmq(tmp_path: Path) -> None:
    a = Tcp()
    b = Tcp(("10.0.0.3", 40002), ("10.0.0.4", 9876), isn=(7, 77))
    a_req, a_resp = cmd(310, 1, b="Topic", body=b"hello"), cmd(0, 1, flag=1, msgId="X")
    b_req = cmd(105, 9, SerializeType.ROCKETMQ, topic="T")
    b_resp = cmd(0, 9, SerializeType.ROCKETMQ, flag=1, body=b'{"brokerDatas":[]}')
    packets = [*a.handshake(), *b.handshake()]
    packets += a.send("c", encode_frame(a_req)) + b.send("c", encode_frame(b_req))
    packets += b.send("s", encode_frame(b_resp)) + a.send("s", encode_frame(a_resp))
    got = frames_of(write(tmp_path / "x.pcap", packets))
    assert [f.raw for f in got] == [encode_frame(c) for c in (a_req, b_req, b_resp, a_resp)]
    assert [f.command for f in got] == [a_req, b_req, b_resp, a_resp]
    assert [f.error for f in got] == [None] * 4
    assert [(f.src, f.dst, f.direction) for f in got] == [
        (a.client, a.server, "c2s"),
        (b.client, b.server, "c2s"),
        (b.server, b.client, "s2c"),
        (a.server, a.client, "s2c"),
    ]
    a_id, b_id = f"{a.client}-{a.server}", f"{b.client}-{b.server}"
    assert [f.conn_id for f in got] == [a_id, b_id, b_id, a_id]
    assert [f.ts for f in got] == pytest.approx([T0 + i / 1000 for i in (6, 7, 8, 9)])


def test_frame_split_across_many_tiny_segments(tmp_path: Path) -> None:
    c = Tcp()
    big = cmd(310, 3, SerializeType.ROCKETMQ, body=bytes(range(256)) * 12, a="G", b="T")
    small = cmd(34, 4, body=b"{}")
    data = encode_frame(big) + encode_frame(small)
    packets = c.handshake() + c.send("c", data, mss=7)
    assert len(packets) > 400
    got = frames_of(write(tmp_path / "x.pcap", packets))
    assert [f.command for f in got] == [big, small]
    assert got[0].ts_first == pytest.approx(T0 + 3 / 1000)  # the first data segment
    assert got[0].offset == 0 and got[1].offset == len(encode_frame(big))


def test_out_of_order_segments_complete_the_frame_when_the_hole_fills(tmp_path: Path) -> None:
    c = Tcp()
    frame = encode_frame(cmd(11, 5, body=b"x" * 600, consumerGroup="g"))
    hello = c.handshake()
    segs = c.send("c", frame, mss=100)
    order = [0, 3, 1, 7, 6, 5, 2, 4]
    packets = hello + [segs[i] for i in order]
    reader = read_frames(write(tmp_path / "x.pcap", packets))
    got = list(reader)
    assert [f.raw for f in got] == [frame]
    assert got[0].ts == pytest.approx(T0 + (3 + len(order) - 1) / 1000)  # the packet filling the last hole
    assert reader.stats.out_of_order_segments == 4


def test_retransmissions_and_overlaps_keep_the_first_arrival(tmp_path: Path) -> None:
    c = Tcp()
    one = encode_frame(cmd(10, 1, body=b"A" * 50))
    two = encode_frame(cmd(10, 2, body=b"B" * 50))
    data = one + two
    n = len(data)

    q = n // 4
    junk = b"\xee" * q
    packets = c.handshake()
    packets.append(c.at("c", 0, data[:q]))
    packets.append(c.at("c", 0, junk))  # retransmission with different bytes: the first copy stays
    packets.append(c.at("c", 2 * q, data[2 * q : 3 * q]))  # out of order, buffered
    # in order; its middle overlaps the buffered segment with other bytes: the buffered ones win
    packets.append(c.at("c", q, data[q : 2 * q] + junk + data[3 * q : 3 * q + 10]))
    packets.append(c.at("c", 3 * q + 5, b"\xee" * 5 + data[3 * q + 10 : 3 * q + 20]))  # old part junk
    packets.append(c.at("c", 3 * q, data[3 * q :]))  # the rest, overlapping what came before
    reader = read_frames(write(tmp_path / "x.pcap", packets))
    got = list(reader)
    assert [f.raw for f in got] == [one, two]
    assert reader.stats.retransmitted_bytes == q + q + 5 + 20


def test_sequence_numbers_wrap_around(tmp_path: Path) -> None:
    c = Tcp(isn=(MASK - 40, MASK - 3))
    frames = [encode_frame(cmd(15, i, SerializeType.ROCKETMQ, offset=str(i))) for i in range(5)]
    hello = c.handshake()
    segs = c.send("c", b"".join(frames), mss=30)
    segs[1], segs[2] = segs[2], segs[1]
    resp = c.send("s", encode_frame(cmd(0, 0, flag=1)))
    got = frames_of(write(tmp_path / "x.pcap", hello + segs + resp))
    assert [f.raw for f in got] == [*frames, encode_frame(cmd(0, 0, flag=1))]


def test_capture_starting_mid_stream_resynchronises_on_a_frame_start(tmp_path: Path) -> None:
    c = Tcp()
    first, second, third = (encode_frame(cmd(34, i, body=b"{}" * 40)) for i in range(3))
    packets = (
        c.send("c", first[-30:] + second) + c.send("c", third) + c.send("s", encode_frame(cmd(0, 2, flag=1)))
    )
    reader = read_frames(write(tmp_path / "x.pcap", packets))
    got = list(reader)
    assert [f.raw for f in got] == [second, third, encode_frame(cmd(0, 2, flag=1))]
    assert reader.stats.resync_skipped_bytes == 30
    # no SYN: the well-known broker port says who the server is
    assert [f.direction for f in got] == ["c2s", "c2s", "s2c"]
    assert got[0].conn_id == f"{c.client}-{c.server}"


def test_without_syn_or_known_port_the_request_sender_is_the_client(tmp_path: Path) -> None:
    c = Tcp(("10.0.0.1", 50000), ("10.0.0.2", 40000))
    resp, req = encode_frame(cmd(0, 1, flag=1)), encode_frame(cmd(11, 2))
    # the capture begins with the server's response
    got = frames_of(write(tmp_path / "x.pcap", c.send("s", resp) + c.send("c", req)))
    assert [(f.src, f.direction) for f in got] == [(c.server, "s2c"), (c.client, "c2s")]
    assert {f.conn_id for f in got} == {f"{c.client}-{c.server}"}


def test_capture_ending_mid_frame_reports_a_truncated_frame(tmp_path: Path) -> None:
    c = Tcp()
    done = encode_frame(cmd(310, 1, body=b"a" * 100))
    cut = encode_frame(cmd(310, 2, body=b"b" * 100, a="G"))
    path = write(tmp_path / "x.pcap", c.handshake() + c.send("c", done + cut[:60]))
    reader = read_frames(path)
    assert [f.raw for f in reader] == [done]
    (t,) = reader.truncated
    assert (t.data, t.expected, t.offset, t.reason) == (cut[:60], len(cut), len(done), "capture ended")
    assert (t.src, t.direction, t.command) == (c.client, "c2s", None)  # header incomplete too
    strict = read_frames(path, strict=True)
    seen = []
    with pytest.raises(StrictError, match="truncated frame"):
        seen.extend(strict)
    assert [f.raw for f in seen] == [done]


def test_lost_segment_inside_a_frame_resumes_exactly_at_the_next_frame(tmp_path: Path) -> None:
    c = Tcp()
    big = encode_frame(cmd(310, 1, body=bytes(3000)))
    after = encode_frame(cmd(310, 2, body=b"z"))
    hello = c.handshake()
    segs = c.send("c", big + after, mss=500)
    lost = segs.pop(2)
    ack = c.ack("s")  # the broker acknowledged everything, the lost segment included
    reader = read_frames(write(tmp_path / "x.pcap", hello + segs + [ack]))
    events = list(reader.events())
    got = [e for e in events if isinstance(e, CapturedFrame)]
    assert [f.raw for f in got] == [after]
    (gap,) = reader.gaps
    assert (gap.offset, gap.length, gap.reason) == (1000, len(lost[Raw].load), "not captured")
    (t,) = reader.truncated
    assert (t.expected, t.data, t.command) == (len(big), big[:1000], cmd(310, 1))
    assert reader.stats.resync_skipped_bytes == 0


def test_rst_in_the_middle_of_a_frame(tmp_path: Path) -> None:
    c = Tcp()
    frame = encode_frame(cmd(11, 1, body=b"q" * 90))
    reader = read_frames(write(tmp_path / "x.pcap", c.handshake() + c.send("c", frame[:50]) + [c.rst("s")]))
    assert list(reader) == []
    assert [(t.reason, len(t.data), t.direction) for t in reader.truncated] == [("RST", 50, "c2s")]


def test_reused_four_tuple_is_a_new_connection(tmp_path: Path) -> None:
    first, second = Tcp(isn=(10, 20)), Tcp(isn=(5000, 6000))
    packets = first.handshake() + first.send("c", encode_frame(cmd(34, 1)))
    packets += [first.fin("c"), first.fin("s"), first.ack("c")]
    packets += second.handshake() + second.send("c", encode_frame(cmd(34, 2)))
    got = frames_of(write(tmp_path / "x.pcap", packets))
    assert [f.command.opaque for f in got if f.command] == [1, 2]
    assert [f.conn_id for f in got] == [f"{first.client}-{first.server}", f"{first.client}-{first.server}#2"]


def test_undecodable_header_is_reported_and_the_stream_goes_on(tmp_path: Path) -> None:
    c = Tcp()
    header = b'{"code":'
    bad = struct.pack(">II", 4 + len(header), len(header)) + header
    good = encode_frame(cmd(34, 3))
    path = write(tmp_path / "x.pcap", c.handshake() + c.send("c", bad + good))
    got = list(read_frames(path))
    assert [(f.raw, f.command is None) for f in got] == [(bad, True), (good, False)]
    assert got[0].error.startswith("HeaderError")
    with pytest.raises(StrictError, match="HeaderError"):
        list(read_frames(path, strict=True))


def test_bad_envelope_is_reported_then_the_splitter_resynchronises(tmp_path: Path) -> None:
    c = Tcp()
    garbage = b"\x00\x00\x00\x10\x07\x00\x00\x02" + b"?" * 12  # serialization type 7
    ok1, ok2 = encode_frame(cmd(34, 1)), encode_frame(cmd(34, 2))
    got = list(
        read_frames(write(tmp_path / "x.pcap", c.handshake() + c.send("c", ok1 + garbage) + c.send("c", ok2)))
    )
    assert [f.raw for f in got] == [ok1, garbage, ok2]
    assert got[1].command is None and "unknown serialization type 7" in got[1].error


def test_iter_tcp_streams_gives_ordered_bytes_and_ends(tmp_path: Path) -> None:
    c = Tcp()
    up, down = bytes(range(256)) * 20, b"response bytes" * 100
    hello = c.handshake()
    segs = c.send("c", up, mss=333)
    random.Random(1).shuffle(segs)
    packets = hello + segs + c.send("s", down, mss=100) + [c.fin("c"), c.fin("s"), c.ack("c")]
    events = list(iter_tcp_streams(write(tmp_path / "x.pcap", packets)))
    chunks = {"c2s": b"", "s2c": b""}
    for e in events:
        if isinstance(e, StreamChunk):
            assert e.offset == len(chunks[e.stream.direction])
            chunks[e.stream.direction] += e.data
    assert chunks == {"c2s": up, "s2c": down}
    ends = [(e.stream.direction, e.reason, e.offset) for e in events if isinstance(e, StreamEnd)]
    assert ends == [("c2s", "FIN", len(up)), ("s2c", "FIN", len(down))]
    assert not [e for e in events if isinstance(e, StreamGap)]


# ---------------------------------------------------------------------------------------- formats


def _conversation(v6: bool = False) -> tuple[list[Packet], list[bytes]]:
    c = Tcp(("fd00::1", 40001), ("fd00::2", 10911), v6=True) if v6 else Tcp()
    req = encode_frame(cmd(310, 1, SerializeType.ROCKETMQ, body=b"m" * 3000, a="G"))
    resp = encode_frame(cmd(0, 1, flag=1, msgId="ID"))
    return c.handshake() + c.send("c", req, mss=1000) + c.send("s", resp), [req, resp]


LINKS = {
    "ethernet": (lambda p: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p, None),
    "vlan": (
        lambda p: Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5) / Dot1Q(vlan=6) / p,
        None,
    ),
    "sll": (lambda p: CookedLinux(proto=0x86DD if IPv6 in p else 0x0800) / p, None),
    "sll2": (lambda p: CookedLinuxV2(proto=0x86DD if IPv6 in p else 0x0800) / p, None),
    "null": (lambda p: Loopback(type=24 if IPv6 in p else 2) / p, None),
    "raw": (lambda p: p, 101),
}


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("link", list(LINKS))
def test_link_types(tmp_path: Path, link: str, v6: bool) -> None:
    packets, expected = _conversation(v6)
    wrap, linktype = LINKS[link]
    path = tmp_path / "x.pcap"
    wrpcap(str(path), stamp([wrap(p) for p in packets]), linktype=linktype)
    got = frames_of(path)
    assert [f.raw for f in got] == expected
    if v6:
        assert got[0].src == "[fd00::1]:40001"


@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
@pytest.mark.parametrize("endianness", ["<", ">"])
def test_pcap_byte_orders_and_timestamp_resolutions(tmp_path: Path, nano: bool, endianness: str) -> None:
    packets, expected = _conversation()
    path = tmp_path / "x.pcap"
    writer = PcapWriter(str(path), linktype=1, nano=nano, endianness=endianness)
    for i, p in enumerate(packets):
        pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p
        pkt.time = T0 + i / 1000 + 0.000000123
        writer.write(pkt)
    writer.close()
    got = frames_of(path)
    assert [f.raw for f in got] == expected
    n = len(packets)
    assert got[-1].ts == pytest.approx(
        T0 + (n - 1) / 1000 + (0.000000123 if nano else 0), abs=1e-7 if nano else 1e-6
    )


def test_pcapng_written_by_scapy(tmp_path: Path) -> None:
    packets, expected = _conversation(v6=True)
    path = tmp_path / "x.pcapng"
    wrpcapng(str(path), stamp([Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p for p in packets]))
    got = frames_of(path)
    assert [f.raw for f in got] == expected
    assert got[0].ts == pytest.approx(T0 + 6 / 1000, abs=1e-6)  # the fourth request segment


def _pcapng(order: str, blocks: list[tuple[int, bytes]]) -> bytes:
    out = []
    for block_type, body in [(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1)), *blocks]:
        body += b"\0" * (-len(body) % 4)
        total = 12 + len(body)
        out.append(struct.pack(order + "II", block_type, total) + body + struct.pack(order + "I", total))
    return b"".join(out)


def _option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_interfaces_link_types_and_ts_resolution(tmp_path: Path, order: str) -> None:
    """Two interfaces (Ethernet with nanosecond if_tsresol, raw IP with 2^-10 s), EPBs and an SPB."""
    packets, expected = _conversation()
    idb_eth = struct.pack(order + "HHI", 1, 0, 0) + _option(order, 9, b"\x09") + _option(order, 0, b"")
    idb_raw = struct.pack(order + "HHI", 101, 0, 0) + _option(order, 9, b"\x8a") + _option(order, 0, b"")
    blocks = [(1, idb_eth), (1, idb_raw), (5, b"statistics block: skipped")]
    stamps = []
    for i, p in enumerate(packets):
        if i == 0:  # a simple packet block (interface 0, no timestamp)
            data = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p)
            blocks.append((3, struct.pack(order + "I", len(data)) + data))
            stamps.append(0.0)
            continue
        iface = i % 2
        data = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p) if iface == 0 else bytes(p)
        ticks = (1_700_000_000 + i) * (10**9 if iface == 0 else 1024) + 7
        stamps.append(ticks / (10**9 if iface == 0 else 1024))
        epb = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & MASK, len(data), len(data)) + data
        blocks.append((6, epb))
    path = tmp_path / "x.pcapng"
    path.write_bytes(_pcapng(order, blocks))
    assert [p.linktype for p in iter_packets(path)] == [1 if i % 2 == 0 else 101 for i in range(len(packets))]
    assert [p.ts for p in iter_packets(path)] == pytest.approx(stamps, abs=1e-9, rel=0)
    got = frames_of(path)
    assert [f.raw for f in got] == expected


def _pcap(records: list[tuple[float, bytes, int]], linktype: int = 1) -> bytes:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)]
    for ts, data, orig in records:
        out.append(struct.pack("<IIII", int(ts), round((ts % 1) * 1e6), len(data), orig) + data)
    return b"".join(out)


def test_ethernet_padding_is_not_payload(tmp_path: Path) -> None:
    c = Tcp()
    frame = encode_frame(cmd(34, 1))
    packets = [
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p
        for p in c.handshake() + c.send("c", frame[:3]) + c.send("c", frame[3:])
    ]
    padded = [
        (T0 + i, bytes(p) + b"\0" * max(0, 60 - len(p)) + b"\xff\xff", len(p)) for i, p in enumerate(packets)
    ]
    path = tmp_path / "x.pcap"
    path.write_bytes(_pcap(padded))
    assert [f.raw for f in frames_of(path)] == [frame]


def test_snap_length_cut_payload_is_a_gap(tmp_path: Path) -> None:
    c = Tcp()
    big, nxt = encode_frame(cmd(310, 1, body=bytes(2000))), encode_frame(cmd(310, 2))
    packets = [
        bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p)
        for p in c.handshake() + c.send("c", big, mss=1000) + c.send("c", nxt)
    ]
    records = [(T0 + i, data[:200] if i == 4 else data, len(data)) for i, data in enumerate(packets)]
    path = tmp_path / "x.pcap"
    path.write_bytes(_pcap(records))
    reader = read_frames(path)
    assert [f.raw for f in reader] == [nxt]
    assert reader.stats.snapped == 1
    assert [(g.offset, g.reason) for g in reader.gaps] == [(1000 + 200 - 54, "cut by the snap length")]
    assert [(t.expected, t.reason) for t in reader.truncated] == [
        (len(big), f"{1000 - (200 - 54)} bytes not captured")
    ]


def test_file_cut_inside_a_record(tmp_path: Path) -> None:
    packets, expected = _conversation()
    path = write(tmp_path / "x.pcap", packets)
    data = path.read_bytes()
    path.write_bytes(data[:-50])
    reader = read_frames(path)
    assert [f.raw for f in reader] == expected[:1]  # the response was in the cut record
    assert reader.info.file_truncated and reader.info.format == "pcap"
    assert [p.linktype for p in iter_packets(data)] == [1] * len(packets)


def test_non_tcp_and_bare_acks_are_skipped(tmp_path: Path) -> None:
    from scapy.all import UDP

    packets, expected = _conversation()
    extra = [IP(src="1.1.1.1", dst="2.2.2.2") / UDP(sport=53, dport=53) / Raw(b"dns"), *packets]
    reader = read_frames(write(tmp_path / "x.pcap", extra))
    assert [f.raw for f in reader] == expected
    assert reader.stats.non_tcp == 1 and reader.stats.connections == 1


@pytest.mark.parametrize("seed", range(20))
def test_random_segmentation_order_duplicates_and_overlaps_rebuild_the_stream(seed: int) -> None:
    """Random cuts (overlapping), random order, duplicates, random ISN (wraparound included)."""
    rng = random.Random(seed)
    stream = rng.randbytes(rng.randrange(1, 20_000))
    isn = rng.choice([rng.randrange(1 << 32), (1 << 32) - rng.randrange(1, 5000)])
    segments = []
    pos = 0
    while pos < len(stream):
        start = max(0, pos - rng.randrange(0, 50))  # overlap what came before
        end = min(len(stream), pos + rng.randrange(1, 1500))
        segments.append((start, end))
        pos = end
    segments += rng.sample(segments, k=len(segments) // 3)  # retransmissions
    first = segments.pop(0)
    rng.shuffle(segments)
    reasm = TcpReassembler()
    src, dst = b"\x0a\0\0\x01", b"\x0a\0\0\x02"
    reasm.segment(0.0, src, 40000, dst, 10911, isn, 0, 0x02, b"")  # SYN
    for start, end in [first, *segments]:
        reasm.segment(0.0, src, 40000, dst, 10911, (isn + 1 + start) & MASK, 0, 0x18, stream[start:end])
    reasm.finish(1.0)
    chunks = [e for e in reasm.out if isinstance(e, StreamChunk)]
    assert b"".join(c.data for c in chunks) == stream
    assert [c.offset for c in chunks] == list(itertools.accumulate([0] + [len(c.data) for c in chunks[:-1]]))
    assert not [e for e in reasm.out if isinstance(e, StreamGap)]


def test_capture_starting_at_the_syn_ack_needs_no_resync(tmp_path: Path) -> None:
    c = Tcp(("10.0.0.1", 50001), ("10.0.0.2", 50002))  # no well-known port either
    _, synack, ack = c.handshake()  # the capture missed the SYN
    frame = encode_frame(cmd(34, 1, body=b"x" * 10))
    segs = c.send("c", frame, mss=5)
    segs[0], segs[1] = segs[1], segs[0]  # out of order from the first byte on
    reader = read_frames(write(tmp_path / "x.pcap", [synack, ack, *segs]))
    got = list(reader)
    assert [(f.raw, f.direction, f.src) for f in got] == [(frame, "c2s", c.client)]
    assert reader.stats.resync_skipped_bytes == 0


@pytest.mark.parametrize("mss", [3, 11, 64])
def test_mid_stream_resync_across_tiny_segments(tmp_path: Path, mss: int) -> None:
    c = Tcp()
    frames = [encode_frame(cmd(11, i, SerializeType(i % 2), body=b"{}" * i, topic="T")) for i in range(4)]
    tail = frames[0][-17:]
    packets = c.send("c", tail + b"".join(frames[1:]), mss=mss)
    reader = read_frames(write(tmp_path / "x.pcap", packets))
    assert [f.raw for f in reader] == frames[1:]
    assert reader.stats.resync_skipped_bytes == len(tail)
    assert [f.offset for f in read_frames(tmp_path / "x.pcap")] == [
        17,
        17 + len(frames[1]),
        17 + len(frames[1]) + len(frames[2]),
    ]


def test_first_data_segment_lost_then_resync(tmp_path: Path) -> None:
    c = Tcp()
    hello = c.handshake()
    frames = [encode_frame(cmd(34, i, body=b"{}" * 50)) for i in range(3)]
    segs = c.send("c", b"".join(frames), mss=60)
    lost = segs.pop(0)
    reader = read_frames(write(tmp_path / "x.pcap", [*hello, *segs, c.ack("s")]))
    assert [f.raw for f in reader] == frames[1:]
    assert [(g.offset, g.length) for g in reader.gaps] == [(0, len(lost[Raw].load))]
    assert reader.stats.resync_skipped_bytes == len(frames[0]) - 60
