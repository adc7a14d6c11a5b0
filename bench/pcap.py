"""pcap decode throughput on the golden corpus: MB/s, frames/s and packets/s per stage.

Stages are cumulative: records (pcap/pcapng record walk), + link/IP/TCP headers, + TCP reassembly,
+ RocketMQ frame split, + header decode (the whole of ``read_frames``).
The floor, measured in the same run, reads the file bytes and walks the records with one
precompiled ``struct`` unpack each. scapy's ``PcapReader`` (TCP payload extraction only) is shown
for the reader choice. The corpus is loopback traffic with segments up to 64 KiB, so a second data
set re-cuts the same streams into 1448-byte Ethernet segments, as a real network capture would be.
Run: ``.venv/bin/python bench/pcap.py [--no-scapy]``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table

from rmqgate.tools.pcap import CaptureInfo, ReaderStats, StreamChunk, iter_tcp_streams, read_frames, tcp
from rmqgate.tools.pcap import records as pcap_records
from rmqgate.wire.frame import FrameDecoder

CORPUS = Path(os.environ.get("RMQGATE_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def floor(paths: list[Path]) -> None:
    record = struct.Struct("<IIII")
    unpack = record.unpack_from
    for path in paths:
        data = path.read_bytes()
        pos, end = 24, len(data)
        while pos < end:
            pos += 16 + unpack(data, pos)[2]


def records(paths: list[Path]) -> None:
    for path in paths:
        for _ in pcap_records.iter_records(pcap_records.open_buffer(path), CaptureInfo()):
            pass


def segments(paths: list[Path]) -> None:
    for path in paths:
        for _ in tcp._iter_segments(path, CaptureInfo(), ReaderStats()):
            pass


def streams(paths: list[Path]) -> None:
    for path in paths:
        for _ in iter_tcp_streams(path):
            pass


def split(paths: list[Path]) -> None:
    for path in paths:
        decoders: dict[int, FrameDecoder] = {}
        for event in iter_tcp_streams(path):
            if type(event) is StreamChunk:
                decoder = decoders.get(id(event.stream))
                if decoder is None:
                    decoder = decoders[id(event.stream)] = FrameDecoder()
                decoder.feed_raw(event.data)


def frames(paths: list[Path]) -> None:
    for path in paths:
        for _ in read_frames(path):
            pass


def scapy_payloads(paths: list[Path]) -> None:
    from scapy.all import TCP, PcapReader

    for path in paths:
        for pkt in PcapReader(str(path)):
            if TCP in pkt:
                bytes(pkt[TCP].payload)


def resegment(paths: list[Path], out: Path, mss: int = 1448) -> None:
    """One pcap holding every frame of ``paths``, its streams cut into ``mss``-byte Ethernet segments."""
    eth, ip4, tcp_layout = tcp._ETHERNET, tcp._IPV4, tcp._TCP
    rec = pcap_records._PCAP_RECORD["<"]
    seqs: dict[tuple[str, str], int] = {}
    with out.open("wb") as fh:
        fh.write(pcap_records._PCAP_FILE["<"].pack(pcap_records.PCAP_MAGIC_MICRO, 2, 4, 0, 0, 262144, 1))
        for n, path in enumerate(paths):
            for f in read_frames(path):
                key = (f"{n}/{f.src}", f"{n}/{f.dst}")
                sport, dport = int(f.src.rsplit(":", 1)[1]), int(f.dst.rsplit(":", 1)[1])
                src, dst = bytes([10, n, 0, 1]), bytes([10, n, 0, 2])
                for i in range(0, len(f.raw), mss):
                    chunk = f.raw[i : i + mss]
                    seq = seqs.get(key, 1)
                    seqs[key] = (seq + len(chunk)) & 0xFFFFFFFF
                    tcp_header = tcp_layout.pack(sport, dport, seq, 0, (5 << 12) | 0x18, 65535, 0, 0)
                    ip_header = ip4.pack(0x45, 0, 40 + len(chunk), 0, 0x4000, 64, 6, 0, src, dst)
                    packet = eth.pack(b"\2" * 6, b"\4" * 6, 0x0800) + ip_header + tcp_header + chunk
                    sec = int(f.ts)
                    fh.write(rec.pack(sec, int((f.ts - sec) * 1e6), len(packet), len(packet)) + packet)


def measure(label: str, paths: list[Path], repeat: int, with_scapy: bool) -> None:
    size = sum(p.stat().st_size for p in paths)
    info_packets = 0
    n_frames = 0
    for p in paths:
        reader = read_frames(p)
        n_frames += sum(1 for _ in reader)
        info_packets += reader.stats.packets
    print(f"\n{label}: {len(paths)} file(s), {size / 1e6:.2f} MB, {info_packets} packets, {n_frames} frames")
    stages = [
        ("floor: read + struct record walk", floor),
        ("records (pcap reader)", records),
        ("+ link/IP/TCP headers", segments),
        ("+ TCP reassembly", streams),
        ("+ frame split (FrameDecoder.feed_raw)", split),
        ("+ header decode = read_frames", frames),
    ]
    if with_scapy:
        stages.append(("scapy PcapReader, TCP payloads", scapy_payloads))
    base = None
    rows = []
    for name, fn in stages:
        seconds = best_of(lambda fn=fn: fn(paths), 1 if fn is scapy_payloads else repeat)
        base = base or seconds
        rows.append(
            (
                name,
                f"{size / seconds / 1e6:.1f}",
                f"{n_frames / seconds:,.0f}",
                f"{info_packets / seconds:,.0f}",
                f"{seconds * 1e6 / info_packets:.2f}",
                f"{seconds / base:.1f}x",
            )
        )
    print_table(("stage", "MB/s", "frames/s", "packets/s", "us/packet", "vs floor"), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-scapy", action="store_true", help="skip the (slow) scapy comparison")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    paths = sorted(CORPUS.glob("pcap*/*.pcap"))
    if not paths:
        sys.exit(f"no captures under {CORPUS}")
    measure("corpus (loopback, segments up to 64 KiB)", paths, args.repeat, not args.no_scapy)
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp) / "mss1448.pcap"
        resegment(paths, cut)
        measure("same streams re-cut into 1448-byte Ethernet segments", [cut], args.repeat, not args.no_scapy)


if __name__ == "__main__":
    main()
