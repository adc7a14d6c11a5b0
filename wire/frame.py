"""Framing: ``length | header word | header | body`` and a sans-I/O incremental decoder.

``FrameDecoder.feed`` takes bytes in arbitrary chunks and returns the complete RemotingCommands.
Envelope errors (``FrameError``) mean the stream is lost and the connection must close; a header
error consumes its frame first, so a caller may continue with ``feed(b"")``.
"""

from __future__ import annotations

from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import FrameError, FrameTooLarge, HeaderError
from rmqgate.wire.layout import FRAME_LENGTH, FRAME_PREFIX, HEADER_LENGTH_MASK
from rmqgate.wire.serialization import DECODERS, ENCODERS

#: Netty's LengthFieldBasedFrameDecoder limit (com.rocketmq.remoting.frameMaxLength), counting the
#: 4-byte length prefix itself.
DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024

_PREFIX_SIZE = FRAME_PREFIX.size
_LENGTH_SIZE = FRAME_LENGTH.size
_unpack_prefix = FRAME_PREFIX.unpack_from


def _check_length(length: int, max_frame_length: int) -> None:
    if length + 4 > max_frame_length:
        raise FrameTooLarge(f"frame of {length + 4} bytes exceeds the limit of {max_frame_length}")
    if length < 4:
        raise FrameError(f"frame length {length} leaves no room for the header-length word")


def _check_tail(src: bytes | bytearray, pos: int, end: int, max_frame_length: int) -> None:
    """A tail holding only the length field: judged now, as Netty's frame decoder does, rather than
    after the header word, which a peer that sent a bad length may never send."""
    if _LENGTH_SIZE <= end - pos < _PREFIX_SIZE:
        _check_length(FRAME_LENGTH.unpack_from(src, pos)[0], max_frame_length)


def _check_envelope(length: int, word: int, max_frame_length: int) -> tuple[int, int]:
    _check_length(length, max_frame_length)
    header_length = word & HEADER_LENGTH_MASK
    serialize_type = word >> 24
    if header_length > length - 4:
        raise FrameError(f"bad header length {header_length} for a frame length of {length}")
    if serialize_type > 1:
        raise FrameError(f"unknown serialization type {serialize_type} in the header-length word")
    return serialize_type, header_length


def decode_frame(
    frame: bytes | bytearray | memoryview, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH
) -> RemotingCommand:
    """Decode one complete frame (starting with its length field)."""
    if len(frame) < _PREFIX_SIZE:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than its {_PREFIX_SIZE}-byte prefix")
    length, word = _unpack_prefix(frame, 0)
    serialize_type, header_length = _check_envelope(length, word, max_frame_length)
    if len(frame) != length + 4:
        raise FrameError(f"frame says {length + 4} bytes but {len(frame)} were given")
    body_start = _PREFIX_SIZE + header_length
    cmd = DECODERS[serialize_type](frame[_PREFIX_SIZE:body_start])
    if length > 4 + header_length:
        cmd.body = bytes(frame[body_start:])
    return cmd


def encode_header(cmd: RemotingCommand) -> bytes:
    return ENCODERS[cmd.serialize_type](cmd)


def encode_frame(cmd: RemotingCommand) -> bytes:
    header = ENCODERS[cmd.serialize_type](cmd)
    header_length = len(header)
    if header_length > HEADER_LENGTH_MASK:
        raise HeaderError(f"header of {header_length} bytes does not fit the 24-bit header length")
    body = cmd.body
    if body:
        return b"".join(
            (
                FRAME_PREFIX.pack(4 + header_length + len(body), (cmd.serialize_type << 24) | header_length),
                header,
                body,
            )
        )
    return FRAME_PREFIX.pack(4 + header_length, (cmd.serialize_type << 24) | header_length) + header


class FrameDecoder:
    """Incremental frame splitter and decoder for one connection direction."""

    __slots__ = ("_buffer", "max_frame_length")

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self._buffer = bytearray()
        self.max_frame_length = max_frame_length

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame."""
        return len(self._buffer)

    def pending(self) -> bytes:
        """A copy of the bytes received that do not yet form a complete frame."""
        return bytes(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Append ``data`` and return every command completed by it.

        On a malformed header the bad frame is consumed and ``HeaderError`` raised with the commands
        decoded before it in ``exc.decoded``; later frames stay buffered for ``feed(b"")``.
        """
        buf = self._buffer
        src: bytes | bytearray
        if buf:
            buf += data
            src = buf
        else:  # the usual read: decode straight from ``data``, buffer only an incomplete tail
            src = data if type(data) is bytes else bytes(data)
        max_frame_length = self.max_frame_length
        pos = 0
        end = len(src)
        out: list[RemotingCommand] = []
        try:
            while end - pos >= _PREFIX_SIZE:
                length, word = _unpack_prefix(src, pos)
                header_length = word & HEADER_LENGTH_MASK
                serialize_type = word >> 24
                if length + 4 > max_frame_length or header_length > length - 4 or serialize_type > 1:
                    _check_envelope(length, word, max_frame_length)  # raises the typed error
                frame_end = pos + length + 4
                if end < frame_end:
                    break
                start = pos + _PREFIX_SIZE
                body_start = start + header_length
                pos = frame_end
                cmd = DECODERS[serialize_type](src[start:body_start])
                if frame_end > body_start:
                    body = src[body_start:frame_end]
                    cmd.body = body if src is not buf else bytes(body)
                out.append(cmd)
            if end - pos >= _LENGTH_SIZE:
                _check_tail(src, pos, end, max_frame_length)
        except (HeaderError, FrameError) as exc:
            exc.decoded = out  # type: ignore[attr-defined]
            raise
        finally:
            if src is buf:
                del buf[:pos]
            elif pos < end:
                buf += memoryview(src)[pos:]
        return out

    def feed_raw(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Split into complete raw frames (length prefix included) without decoding headers.

        On a bad envelope ``FrameError`` carries the frames split before it in ``exc.frames``; the
        buffer then starts at the bad frame.
        """
        frames: list[bytes] = []
        buf = self._buffer
        buf += data
        pos = 0
        end = len(buf)
        try:
            while end - pos >= _PREFIX_SIZE:
                length, word = _unpack_prefix(buf, pos)
                _check_envelope(length, word, self.max_frame_length)
                if end - pos < length + 4:
                    break
                frames.append(bytes(buf[pos : pos + length + 4]))
                pos += length + 4
            _check_tail(buf, pos, end, self.max_frame_length)
        except FrameError as exc:
            exc.frames = frames  # type: ignore[attr-defined]
            raise
        finally:
            del buf[:pos]
        return frames
