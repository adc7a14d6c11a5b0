"""Read RocketMQ traffic out of libpcap/pcapng captures: packets, TCP streams, remoting frames.

Three layers, each usable alone and each a module: ``records.iter_packets`` (capture records with
their link type), ``tcp.iter_tcp_streams`` (per-direction reassembled byte streams with gaps and
ends) and ``frames.read_frames`` (RocketMQ frames split and decoded with ``rmqgate.wire.frame``).

Reassembly policy: a byte's value is the one carried by the *first* segment that delivered it
(first-arrival wins, like a receiver that keeps what it already queued); later retransmissions and
overlaps are trimmed against it. Bytes the capture never saw become a ``Gap`` once the peer has
acknowledged data beyond the hole, the out-of-order buffer exceeds ``PENDING_LIMIT``, the
connection is reset, or the capture ends. After a gap, and on streams whose start was not captured,
the frame splitter resynchronises on the first position that looks like a frame start.
Not handled: IP fragments (ignored and counted), TCP urgent data, checksum validation.
"""

from rmqgate.tools.pcap.frames import (
    CapturedFrame,
    FrameReader,
    Gap,
    Truncated,
    find_frame_start,
    read_frames,
)
from rmqgate.tools.pcap.records import (
    CaptureInfo,
    Packet,
    PcapError,
    StrictError,
    iter_packets,
    struct_of,
)
from rmqgate.tools.pcap.tcp import (
    Connection,
    HalfStream,
    ReaderStats,
    StreamChunk,
    StreamEnd,
    StreamGap,
    TcpReassembler,
    iter_tcp_streams,
)

__all__ = [
    "CaptureInfo",
    "CapturedFrame",
    "Connection",
    "FrameReader",
    "Gap",
    "HalfStream",
    "Packet",
    "PcapError",
    "ReaderStats",
    "StreamChunk",
    "StreamEnd",
    "StreamGap",
    "StrictError",
    "TcpReassembler",
    "Truncated",
    "find_frame_start",
    "iter_packets",
    "iter_tcp_streams",
    "read_frames",
    "struct_of",
]
