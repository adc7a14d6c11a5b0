"""Helpers for tests of rmqgate.server (no pytest-asyncio here: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import functools
import os
import struct
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rmqgate.wire import CodecError, FrameDecoder, RemotingCommand


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async def`` test in a fresh event loop (with a hard timeout)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            await asyncio.wait_for(fn(*args, **kwargs), 120)

        asyncio.run(main())

    return wrapper


def pcap_requests(path: str | os.PathLike[str], code: int | None = None) -> list[RemotingCommand]:
    """Requests (not responses) in a libpcap capture of loopback RocketMQ traffic, in capture order.

    Minimal reader for tests: Ethernet/IPv4/TCP, payloads concatenated per direction (loopback
    captures arrive in order). Prefers rmqgate.tools.pcap.read_frames when it exists.
    """
    try:
        from rmqgate.tools.pcap import read_frames  # type: ignore[import-not-found]
    except ImportError:
        read_frames = None
    out: list[RemotingCommand] = []
    if read_frames is not None:
        for item in read_frames(path):
            cmd = getattr(item, "command", item)
            if (
                isinstance(cmd, RemotingCommand)
                and not cmd.is_response
                and (code is None or cmd.code == code)
            ):
                out.append(cmd)
        return out
    data = Path(path).read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    pos = 24
    streams: dict[tuple[bytes, int, bytes, int], FrameDecoder] = {}
    while pos + 16 <= len(data):
        _, _, incl, _ = struct.unpack_from(endian + "IIII", data, pos)
        pkt = data[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            continue
        total = struct.unpack_from(">H", ip, 2)[0]
        tcp = ip[ihl:total]
        sport, dport = struct.unpack_from(">HH", tcp, 0)
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if not payload:
            continue
        key = (ip[12:16], sport, ip[16:20], dport)
        decoder = streams.setdefault(key, FrameDecoder())
        try:
            for cmd in decoder.feed(payload):
                if not cmd.is_response and (code is None or cmd.code == code):
                    out.append(cmd)
        except CodecError:
            streams[key] = FrameDecoder()
    return out
