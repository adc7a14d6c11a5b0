"""Body compression as RocketMQ's compressors do it (zlib, zstd, LZ4 frame), selected by the
compression-type bits of the sysFlag (``MessageSysFlag.COMPRESSION_MASK``)."""

from __future__ import annotations

import zlib
from typing import Any

from rmqgate.wire.errors import CompressionUnavailable, MessageFormatError
from rmqgate.wire.message_const import MessageSysFlag

Buffer = bytes | bytearray | memoryview

_COMPRESSION_NAMES = {
    MessageSysFlag.LZ4: "lz4",
    MessageSysFlag.ZSTD: "zstd",
    MessageSysFlag.ZLIB: "zlib",
}
_COMPRESSION_BY_NAME = {name: flag for flag, name in _COMPRESSION_NAMES.items()}
#: Java producer defaults (``compressMsgBodyOverHowmuch``, ``rocketmq.message.compressLevel``).
COMPRESS_OVER_BYTES = 4096
DEFAULT_COMPRESS_LEVEL = 5


def _compression_kind(kind: int | str) -> int:
    if isinstance(kind, str):
        flag = _COMPRESSION_BY_NAME.get(kind.strip().lower())
        if flag is None:
            raise MessageFormatError(f"unknown compression type {kind!r}")
        return flag
    flag = kind & MessageSysFlag.COMPRESSION_MASK or MessageSysFlag.ZLIB
    if flag not in _COMPRESSION_NAMES:
        raise MessageFormatError(f"unknown compression type bits 0x{flag:X}")
    return flag


def compression_flags(kind: int | str) -> int:
    """sysFlag bits (COMPRESSED | type) for a compression type name or type bits."""
    return MessageSysFlag.COMPRESSED | _compression_kind(kind)


def _lz4_frame() -> Any:
    try:
        import lz4.frame
    except ImportError:
        raise CompressionUnavailable(
            "lz4 compression needs the 'lz4' package, which is not installed"
        ) from None
    return lz4.frame


def compress_body(
    body: Buffer, kind: int | str = MessageSysFlag.ZLIB, level: int = DEFAULT_COMPRESS_LEVEL
) -> bytes:
    """Compress like RocketMQ's compressors: zlib stream (Deflater), zstd frame, or LZ4 frame with
    lz4-java's ``LZ4FrameOutputStream`` defaults (4 MiB independent blocks, no checksums/size)."""
    flag = _compression_kind(kind)
    if flag == MessageSysFlag.ZLIB:
        return zlib.compress(body, level)
    if flag == MessageSysFlag.ZSTD:
        import zstandard

        return zstandard.ZstdCompressor(level=level).compress(body)
    lz4_frame = _lz4_frame()
    # A streaming compressor keeps the declared 4 MiB block size (one-shot compress shrinks it).
    compressor = lz4_frame.LZ4FrameCompressor(
        block_size=lz4_frame.BLOCKSIZE_MAX4MB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
    )
    return compressor.begin() + compressor.compress(bytes(body)) + compressor.flush()


def decompress_body(body: Buffer, sys_flag: int) -> bytes:
    """The body uncompressed if sysFlag has COMPRESSED (type bits 0 or ZLIB = zlib), else as is."""
    if not sys_flag & MessageSysFlag.COMPRESSED:
        return bytes(body)
    flag = _compression_kind(sys_flag)
    try:
        if flag == MessageSysFlag.ZLIB:
            return zlib.decompress(body)
        if flag == MessageSysFlag.ZSTD:
            import zstandard

            dobj = zstandard.ZstdDecompressor().decompressobj()
            out = dobj.decompress(bytes(body))
            if not dobj.eof:
                raise MessageFormatError("truncated zstd body")
            return out
        lz4_frame = _lz4_frame()
        return lz4_frame.decompress(bytes(body))
    except CompressionUnavailable:
        raise
    except MessageFormatError:
        raise
    except Exception as exc:  # each codec raises its own error types
        name = _COMPRESSION_NAMES[flag]
        raise MessageFormatError(f"{name} body does not decompress: {exc}") from None
