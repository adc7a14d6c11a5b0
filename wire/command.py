"""RemotingCommand: the one message type of the remoting protocol (requests and responses)."""

from __future__ import annotations

from typing import TypeVar

from rmqgate.wire.codes import LanguageCode, MQVersion, SerializeType
from rmqgate.wire.errors import HeaderFieldError
from rmqgate.wire.header import CommandHeader

RESPONSE_FLAG = 0b01  # RemotingCommand RPC_TYPE bit
ONEWAY_FLAG = 0b10  # RemotingCommand RPC_ONEWAY bit

#: What rmqgate puts in the ``version`` of everything it sends (clients read the broker's version
#: from heartbeat responses and refuse SQL92/non-tag subscriptions below V4_1_0).
BROKER_VERSION = int(MQVersion.V4_9_8)

Body = bytes | bytearray | memoryview
H = TypeVar("H", bound=CommandHeader)


class RemotingCommand:
    """A request or response. ``ext_fields`` values are always strings (the custom header)."""

    __slots__ = (
        "body",
        "code",
        "ext_fields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        *,
        language: int = LanguageCode.JAVA,
        version: int = BROKER_VERSION,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: Body | None = None,
        serialize_type: int = SerializeType.JSON,
    ) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: Body | None = None,
        *,
        opaque: int = 0,
        oneway: bool = False,
        serialize_type: int = SerializeType.JSON,
        language: int = LanguageCode.JAVA,
        version: int = BROKER_VERSION,
        remark: str | None = None,
    ) -> RemotingCommand:
        return cls(
            code,
            language=language,
            version=version,
            opaque=opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: Body | None = None,
    ) -> RemotingCommand:
        """A response to this request: same opaque and serialization type, response flag set."""
        return RemotingCommand(
            code,
            language=LanguageCode.JAVA,
            version=BROKER_VERSION,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in _COMPARED) and (
            bytes(self.body or b"") == bytes(other.body or b"")
        )

    __hash__ = None  # type: ignore[assignment]

    def ext_field(self, name: str, default: str | None = None) -> str | None:
        """One extFields value (``default`` when absent), without building the map where it is
        not built yet (a LayoutCommand's)."""
        ext = self.ext_fields
        return default if ext is None else ext.get(name, default)

    def decode_custom_header(self, cls: type[H], use_alias: bool = False) -> H:
        """``decodeCommandCustomHeader``: the typed header of this request's extFields (the one-letter
        aliases where ``use_alias``); HeaderFieldError names a missing or bad field."""
        ext = self.ext_fields
        if ext is None:
            raise HeaderFieldError(f"{cls.__name__}: the request has no extFields")
        return cls.from_ext_v2(ext) if use_alias else cls.from_ext(ext)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        body_len = len(self.body) if self.body is not None else 0
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"lang={self.language} version={self.version} remark={self.remark!r} "
            f"ext={self.ext_fields!r} body={body_len}B ser={self.serialize_type})"
        )


# what __eq__ compares besides the body (a subclass's own slots are no field of the command)
_COMPARED = tuple(s for s in RemotingCommand.__slots__ if s != "body")
