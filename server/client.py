"""RemotingClient: an asyncio connection that sends requests and matches responses by opaque.

Used by the broker (registration with name servers), tests, tools and the compat suite. Requests the
server initiates (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) go to ``on_request``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rmqgate.server.remoting import Channel, _CallbackProcessor, next_opaque
from rmqgate.wire.command import RemotingCommand

RequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None] | RemotingCommand | None]


class RemotingClient:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        on_request: RequestHandler | None = None,
        timeout: float = 5.0,
    ) -> RemotingClient:
        loop = asyncio.get_running_loop()
        fallback = _CallbackProcessor(on_request) if on_request is not None else None
        _, channel = await asyncio.wait_for(
            loop.create_connection(lambda: Channel({}, fallback, max_inflight=64), host, port), timeout
        )
        return cls(channel)

    @classmethod
    async def connect_addr(cls, addr: str, **kwargs: object) -> RemotingClient:
        host, _, port = addr.rpartition(":")
        return await cls.connect(host.strip("[]"), int(port), **kwargs)  # type: ignore[arg-type]

    @property
    def closed(self) -> bool:
        return self.channel.closed

    @property
    def remote_addr(self) -> str:
        return self.channel.remote_addr

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and wait for its response (raises TimeoutError / ConnectionError)."""
        return await self.channel.request(cmd, timeout)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self.channel.send_oneway(cmd)

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (fuzzing, replay)."""
        if self.channel.transport is not None and not self.channel.closed:
            self.channel.transport.write(data)

    def close(self) -> None:
        self.channel.close()

    async def aclose(self) -> None:
        self.channel.close()
        for _ in range(100):
            if self.channel.closed:
                return
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["RemotingClient", "next_opaque"]
