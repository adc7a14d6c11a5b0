"""Sans-I/O codec for RocketMQ's remoting protocol and stored-message format.

Bytes in, RemotingCommand objects out, and back. Every layout is declared once in construct
(see ``layout``); hot paths use ``struct`` formats derived from those declarations.
Nothing here touches sockets or files.
"""

from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import FrameDecoder, decode_frame, encode_frame

__all__ = [
    "CodecError",
    "FrameDecoder",
    "LanguageCode",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "encode_frame",
]
