"""Typed decode/encode errors: each says what was wrong, so a server can answer or close cleanly."""


class CodecError(ValueError):
    """Base class for every error the codec raises on bad input."""


class FrameError(CodecError):
    """The frame envelope is unusable (length, header length, serialization type).

    The stream cannot be resynchronised after this; the connection must be closed.
    """


class FrameTooLarge(FrameError):
    pass


class HeaderError(CodecError):
    """The header of an otherwise well-delimited frame could not be decoded."""


class HeaderFieldError(CodecError):
    """A typed request header lacks a required field or has a value of the wrong type."""


class BodyError(CodecError):
    """A request or response body (JSON or binary) could not be decoded."""


class MessageFormatError(CodecError):
    """A stored message, batch body or properties string is malformed."""


class CompressionUnavailable(CodecError):
    """The body uses a compression type whose codec is not installed."""
