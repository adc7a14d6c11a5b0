"""The asyncio remoting core: one Protocol per connection on the sans-I/O FrameDecoder.

Requests are dispatched by code to one RequestProcessor per request family (like the Java
NettyRemotingServer's processor table). A processor may answer synchronously (a plain ``def`` returning
the response: the hot send path, no task per request) or be a coroutine (run as a task, counted as
in flight). Responses echo opaque and the request's serialization type; oneway requests get none.
Backpressure: reading pauses while the transport's write buffer is above its high-water mark, or while
a connection has ``max_inflight`` unfinished requests (later frames wait in a bounded backlog).
A server's responses leave once per event-loop round (``WriteBatch``), each connection's in one write.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import logging
import resource
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, ClassVar, NamedTuple, cast

from rmqgate.wire.codes import ResponseCode, SerializeType, request_name
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError, FrameError, HeaderError
from rmqgate.wire.frame import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, encode_header
from rmqgate.wire.layout import FRAME_PREFIX, HEADER_LENGTH_MASK

log = logging.getLogger("rmqgate.server.remoting")

DEFAULT_IDLE_TIMEOUT = 120.0
DEFAULT_MAX_INFLIGHT = 256
# Per connection: what a consumer that stopped reading can hold in the broker before its reads pause
# (Netty's default high-water mark is 64 KiB; a larger one keeps big pull responses flowing).
DEFAULT_WRITE_HIGH_WATER = 1024 * 1024

# Java's RemotingCommand opaque comes from one process-wide AtomicInteger; ours is int32 too.
_opaque_counter = itertools.count(1)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel background tasks and wait until each has finished (a service's ``stop``)."""
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def raise_fd_limit() -> int:
    """Lift this process's soft open-files limit to its (finite) hard limit: a broker with 10,000 client
    connections needs more than the usual 1024. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, exc)
    return soft


def next_opaque() -> int:
    return next(_opaque_counter) & 0x7FFFFFFF


_pack_prefix = FRAME_PREFIX.pack


def frame_parts(cmd: RemotingCommand) -> tuple[bytes, Any]:
    """(prefix + header, body or None); raises HeaderError for a header the 24-bit length cannot hold."""
    header = encode_header(cmd)
    hlen = len(header)
    if hlen > HEADER_LENGTH_MASK:
        raise HeaderError(f"header of {hlen} bytes does not fit the 24-bit header length")
    body = cmd.body
    blen = len(body) if body else 0
    return _pack_prefix(4 + hlen + blen, (cmd.serialize_type << 24) | hlen) + header, body if blen else None


class Pending(NamedTuple):
    """A response that follows once ``future`` is done: ``respond(future.result())`` builds it. Cheaper
    than an awaitable (no task per request): a SYNC_FLUSH send answers from its group-commit future."""

    future: asyncio.Future[Any]
    respond: Callable[[Any], RemotingCommand | bytes | None]


class RequestProcessor:
    """One request family. ``process`` returns the response, None (no response / answered later),
    the response already encoded as a whole frame (``bytes``), a ``Pending`` response, or an
    awaitable of a response or None (an ``async def process`` is fine)."""

    codes: ClassVar[tuple[int, ...]] = ()

    def process(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand | None] | None:
        raise NotImplementedError


class _CallbackProcessor(RequestProcessor):
    """Adapts ``async fn(cmd) -> RemotingCommand | None`` (RemotingClient's on_request)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        return self.fn(request)


def _system_error(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    if isinstance(exc, CodecError):
        remark = str(exc)
    else:
        log.error("processor failed on %s from request %r", request_name(request.code), request, exc_info=exc)
        remark = f"{type(exc).__name__}: {exc}"
    return server_serialized(request.response(ResponseCode.SYSTEM_ERROR, remark))


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """The broker's default processor's answer (AdminBrokerProcessor.getUnknownCmdResponse), which
    goes back like any processor's, in the request's serialization."""
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
    )


def server_serialized(response: RemotingCommand) -> RemotingCommand:
    """For the answers Java writes itself rather than through the callback that gives a response its
    request's serialization (an exception's SYSTEM_ERROR, a woken long-poll pull, a zero-copy
    message body): they go out in the server's own, JSON."""
    response.serialize_type = SerializeType.JSON
    return response


class WriteBatch:
    """The responses of a server's connections wait until the loop has handled every socket that was
    ready (one ``call_soon`` per round), then leave back to back: a peer already awake takes several
    without a wake-up per response, which counts when the machine's cores are shared."""

    __slots__ = ("_channels", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._channels: list[Channel] = []

    def add(self, channel: Channel) -> None:
        if not self._channels:
            self._loop.call_soon(self._flush)
        self._channels.append(channel)

    def _flush(self) -> None:
        channels = self._channels
        self._channels = []
        for channel in channels:
            channel._flush_out()


class Channel(asyncio.Protocol):
    """One connection (accepted or outgoing)."""

    _PAUSE_WRITE = 1
    _PAUSE_INFLIGHT = 2

    def __init__(
        self,
        table: dict[int, RequestProcessor],
        fallback: RequestProcessor | None = None,
        *,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        on_open: Callable[[Channel], None] | None = None,
        on_close: Callable[[Channel], None] | None = None,
        batch: WriteBatch | None = None,
    ) -> None:
        self._table = table
        self._fallback = fallback
        self._decoder = FrameDecoder(max_frame_length)
        self._max_inflight = max_inflight
        self._write_high_water = write_high_water
        self._on_open = on_open
        self._on_close = on_close
        self._close_listeners: list[Callable[[Channel], None]] = []
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._backlog: collections.deque[RemotingCommand] = collections.deque()
        self._tasks: set[asyncio.Future[Any]] = set()  # unfinished requests: tasks and Pending futures
        self._paused = 0
        self._loop = asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.remote_addr = ""
        self.local_addr = ""
        self.closed = False
        self.client_id: str | None = None
        self.language: int | None = None
        self.version: int | None = None
        self.last_active = self._loop.time()
        self.connected: asyncio.Future[None] = self._loop.create_future()
        self.attrs: dict[str, Any] = {}  # per-connection state processors may keep
        self._batch = batch
        self._out: list[bytes] | None = None  # responses not yet handed to the transport
        self._out_size = 0

    # --- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport; uvloop's does not derive from asyncio.Transport, so no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=self._write_high_water)
        self.remote_addr = _addr(transport.get_extra_info("peername"))
        self.local_addr = _addr(transport.get_extra_info("sockname"))
        if not self.connected.done():
            self.connected.set_result(None)
        if self._on_open:
            self._on_open(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._out = None
        self._backlog.clear()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.remote_addr} closed"))
        self._pending.clear()
        for task in self._tasks:
            if isinstance(task, asyncio.Task):  # a Pending future belongs to its producer (the store)
                task.cancel()
        self._tasks.clear()
        for fn in (*self._close_listeners, *((self._on_close,) if self._on_close else ())):
            try:
                fn(self)
            except Exception:
                log.exception("close listener failed for %s", self.remote_addr)

    def pause_writing(self) -> None:
        self._pause(self._PAUSE_WRITE)

    def resume_writing(self) -> None:
        self._resume(self._PAUSE_WRITE)
        if self._backlog:
            self._drain()

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        decoder = self._decoder
        try:
            commands = decoder.feed(data)
        except HeaderError as exc:
            # Java's NettyDecoder closes the channel on any decode error; requests decoded before the
            # bad frame are still served.
            log.warning("closing %s: undecodable header: %s", self.remote_addr, exc)
            for cmd in getattr(exc, "decoded", ()):
                self._on_command(cmd)
            self.close()
            return
        except FrameError as exc:
            log.warning("closing %s: bad frame: %s", self.remote_addr, exc)
            self.close()
            return
        if self._batch is not None or len(commands) <= 1:  # batched writes leave once per loop round
            for cmd in commands:
                self._on_command(cmd)
            return
        # Several requests in one read (pipelining clients): their immediate responses leave in one write
        # (or several, each once past the write high-water mark).
        self._out = []
        self._out_size = 0
        try:
            for cmd in commands:
                self._on_command(cmd)
        finally:
            self._flush_out()
            self._out = None

    def _write(self, data: bytes) -> None:
        out = self._out
        if out is None:
            if self.closed or self.transport is None:
                return
            batch = self._batch
            if batch is None:
                self.transport.write(data)
                return
            self._out = [data]
            self._out_size = len(data)
            batch.add(self)
            return
        out.append(data)
        self._out_size += len(data)
        if self._out_size > self._write_high_water:
            self._flush_out()

    def _flush_out(self) -> None:
        """Hand the collected responses to the transport (which may call pause_writing at once)."""
        out = self._out
        self._out = None
        if out:
            self._out_size = 0
            if not self.closed and self.transport is not None:
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    # --- dispatch --------------------------------------------------------------------------------
    def _on_command(self, cmd: RemotingCommand) -> None:
        if self.closed:
            return
        if cmd.flag & RESPONSE_FLAG:
            fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        if self._backlog or self._paused & self._PAUSE_WRITE or len(self._tasks) >= self._max_inflight:
            # wait: too many unfinished requests, or the peer is not reading its responses
            self._backlog.append(cmd)
            self._pause(self._PAUSE_INFLIGHT)
            return
        self._dispatch(cmd)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        self.language = cmd.language
        self.version = cmd.version
        processor = self._table.get(cmd.code) or self._fallback
        if processor is None:
            if not cmd.flag & ONEWAY_FLAG:
                self.send_response(not_supported(cmd))
            return
        try:
            result = processor.process(self, cmd)
        except Exception as exc:
            result = _system_error(cmd, exc)
        kind = type(result)
        if kind is bytes:  # a pre-encoded response frame (the send hot path)
            if not cmd.flag & ONEWAY_FLAG:
                self._write(result)
            return
        if result is None:
            return
        # a decoded command may be a subclass (LayoutCommand): a processor answering with its request
        if kind is RemotingCommand or isinstance(result, RemotingCommand):
            if not cmd.flag & ONEWAY_FLAG:
                self.send_response(result)
            return
        if kind is Pending:
            fut = result.future
            self._tasks.add(fut)
            fut.add_done_callback(functools.partial(self._pending_done, cmd, result.respond))
            return
        task = self._loop.create_task(self._finish(cmd, result))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _finish(self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | bytes | None]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            response = _system_error(cmd, exc)
        if response is None or cmd.flag & ONEWAY_FLAG:
            return
        if type(response) is bytes:
            self._write(response)
        else:
            self.send_response(response)

    def _pending_done(
        self, cmd: RemotingCommand, respond: Callable[[Any], Any], fut: asyncio.Future[Any]
    ) -> None:
        self._tasks.discard(fut)
        if fut.cancelled() or self.closed:
            return
        try:
            response = respond(fut.result())
        except Exception as exc:
            response = _system_error(cmd, exc)
        if response is not None and not cmd.flag & ONEWAY_FLAG:
            if type(response) is bytes:
                self._write(response)
            else:
                self.send_response(response)
        self._drain()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._drain()

    def _drain(self) -> None:
        backlog = self._backlog
        while (
            backlog
            and len(self._tasks) < self._max_inflight
            and not self._paused & self._PAUSE_WRITE
            and not self.closed
        ):
            self._dispatch(backlog.popleft())
        if not backlog:
            self._resume(self._PAUSE_INFLIGHT)

    # --- flow control ----------------------------------------------------------------------------
    def _pause(self, reason: int) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._paused |= reason

    def _resume(self, reason: int) -> None:
        if not self._paused & reason:
            return
        self._paused &= ~reason
        if not self._paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    # --- public API ------------------------------------------------------------------------------
    @property
    def writable(self) -> bool:
        """Open and below the write-buffer high-water mark (Netty's ``isActive() && isWritable()``)."""
        return not self.closed and not self._paused & self._PAUSE_WRITE

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    def write_command(self, cmd: RemotingCommand) -> None:
        if self.closed or self.transport is None:
            return
        try:
            head, body = frame_parts(cmd)
        except CodecError as exc:  # e.g. a header over 16 MiB: the peer cannot get it; drop the connection
            log.error("cannot encode %r for %s: %s", cmd, self.remote_addr, exc)
            self.close()
            return
        self.last_active = self._loop.time()
        self._write(head if body is None else head + body)

    send_response = write_command

    def send_oneway(self, cmd: RemotingCommand) -> None:
        cmd.flag |= ONEWAY_FLAG
        if not cmd.opaque:
            cmd.opaque = next_opaque()
        self.write_command(cmd)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` with a fresh opaque and wait for the response with that opaque."""
        if self.closed:
            raise ConnectionError(f"connection to {self.remote_addr} is closed")
        cmd.opaque = opaque = next_opaque()
        cmd.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = fut
        try:
            self.write_command(cmd)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(opaque, None)

    def add_close_listener(self, fn: Callable[[Channel], None]) -> None:
        if self.closed:
            fn(self)
        else:
            self._close_listeners.append(fn)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush_out()
            self.transport.close()

    def close_idle(self) -> None:
        """Close an idle connection at once, as Netty's close does: responses a peer that stopped reading
        left in the write buffer are dropped (a plain close would wait for them to be read, forever)."""
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size():
            transport.abort()
        else:
            self.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def __repr__(self) -> str:
        return f"Channel({self.remote_addr or '?'}{' closed' if self.closed else ''})"


def _addr(info: Any) -> str:
    if not info:
        return ""
    host, port = info[0], info[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RemotingServer:
    """A listening socket whose connections dispatch to ``processors`` by request code."""

    def __init__(
        self,
        host: str,
        port: int,
        processors: Iterable[RequestProcessor],
        *,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        name: str = "remoting",
        fallback: RequestProcessor | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.idle_timeout = idle_timeout
        self.max_inflight = max_inflight
        self.write_high_water = write_high_water
        self.max_frame_length = max_frame_length
        self.table: dict[int, RequestProcessor] = {}
        self.fallback = fallback  # for codes not in the table (None: REQUEST_CODE_NOT_SUPPORTED)
        for processor in processors:
            self.register(processor)
        self.channels: set[Channel] = set()
        self._server: asyncio.base_events.Server | None = None
        self._scanner: asyncio.Task[None] | None = None
        self._batch: WriteBatch | None = None

    def register(self, processor: RequestProcessor, codes: Iterable[int] | None = None) -> None:
        for code in processor.codes if codes is None else codes:
            self.table[int(code)] = processor

    def _new_channel(self) -> Channel:
        return Channel(
            self.table,
            self.fallback,
            max_inflight=self.max_inflight,
            write_high_water=self.write_high_water,
            max_frame_length=self.max_frame_length,
            on_open=self._opened,
            on_close=self.channels.discard,
            batch=self._batch,
        )

    def _opened(self, channel: Channel) -> None:
        self.channels.add(channel)

    async def start(self) -> None:
        raise_fd_limit()
        loop = asyncio.get_running_loop()
        self._batch = WriteBatch(loop)
        self._server = await loop.create_server(
            self._new_channel, self.host, self.port, reuse_address=True, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.idle_timeout and self.idle_timeout > 0:
            self._scanner = loop.create_task(self._scan_idle())

    async def _scan_idle(self) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.05, min(self.idle_timeout / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            deadline = loop.time() - self.idle_timeout
            for channel in list(self.channels):
                if channel.last_active < deadline:
                    log.info("%s: closing idle connection %s", self.name, channel.remote_addr)
                    channel.close_idle()

    async def stop(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
            self._scanner = None
        if self._server is not None:
            self._server.close()
            for channel in list(self.channels):
                channel.close()
            await self._server.wait_closed()
            self._server = None
