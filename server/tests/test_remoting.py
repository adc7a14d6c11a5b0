"""The remoting core over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import resource
import struct
from collections.abc import AsyncIterator

from rmqgate.server.client import RemotingClient
from rmqgate.server.remoting import Channel, Pending, RemotingServer, RequestProcessor
from rmqgate.server.testing import async_test, wait_for
from rmqgate.wire import FrameDecoder, RemotingCommand, ResponseCode, SerializeType, encode_frame
from rmqgate.wire.command import RESPONSE_FLAG
from rmqgate.wire.errors import HeaderFieldError

ECHO, SLOW, BOOM, CODEC, ASK, GATE, BYE, LATER = 9001, 9002, 9003, 9004, 9005, 9006, 9007, 9008
REFLECT = 9009


class Echo(RequestProcessor):
    codes = (ECHO,)

    def __init__(self) -> None:
        self.seen: list[RemotingCommand] = []

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        self.seen.append(request)
        return request.response(0, "echo", dict(request.ext_fields or {}), request.body)


class Reflect(RequestProcessor):
    """Answers with the request object itself, made a response: whatever class the decoder gave it."""

    codes = (REFLECT,)

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        request.code = ResponseCode.SUCCESS
        request.flag |= RESPONSE_FLAG
        return request


class Bye(RequestProcessor):
    """Answers, then closes the connection at once."""

    codes = (BYE,)

    def process(self, channel: Channel, request: RemotingCommand) -> None:
        channel.send_response(request.response(0, "bye"))
        channel.close()


class Misc(RequestProcessor):
    codes = (SLOW, BOOM, CODEC, ASK, GATE)

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.running = 0
        self.max_running = 0

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == SLOW:
            await asyncio.sleep(float(request.ext_fields["s"]))
            return request.response(0, "slow")
        if request.code == BOOM:
            raise RuntimeError("kaboom")
        if request.code == CODEC:
            raise HeaderFieldError("field 'x' is missing")
        if request.code == GATE:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            await self.gate.wait()
            self.running -= 1
            return request.response(0)
        # ASK: the server asks the client something on the same connection, then answers.
        answer = await channel.request(RemotingCommand.request(40, {"consumerGroup": "g"}), 2.0)
        return request.response(0, f"client said {answer.remark}")


class Later(RequestProcessor):
    """Answers from a future the test resolves (as a SYNC_FLUSH send answers from its group commit)."""

    codes = (LATER,)

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[str]] = []

    def process(self, channel: Channel, request: RemotingCommand) -> Pending:
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)

        def respond(value: str) -> RemotingCommand:
            if value == "boom":
                raise RuntimeError("respond failed")
            return request.response(0, value)

        return Pending(fut, respond)


def with_server(fn):
    @async_test
    @functools.wraps(fn)
    async def wrapper() -> None:
        srv = RemotingServer(
            "127.0.0.1", 0, [Echo(), Misc(), Bye(), Later(), Reflect()], idle_timeout=120, max_inflight=4
        )
        await srv.start()
        try:
            await fn(srv)
        finally:
            await srv.stop()

    wrapper.__signature__ = inspect.Signature()
    return wrapper


@with_server
async def test_echo_both_serializations(server: RemotingServer) -> None:
    async with await RemotingClient.connect("127.0.0.1", server.port) as client:
        for ser in (SerializeType.JSON, SerializeType.ROCKETMQ):
            req = RemotingCommand.request(ECHO, {"k": "v"}, b"body", serialize_type=ser)
            resp = await client.invoke(req, 2)
            assert resp.is_response and resp.opaque == req.opaque
            assert resp.serialize_type == ser
            assert resp.remark == "echo" and resp.ext_fields == {"k": "v"} and resp.body == b"body"
            assert resp.version == 409


@with_server
async def test_a_processor_may_answer_with_the_request_itself(server: RemotingServer) -> None:
    """Whatever the decoder made of the request (a ROCKETMQ header in a layout it learnt is a
    LayoutCommand from the third request on), returning it as the answer sends it back."""
    ext = {"reflectA": "1", "reflectB": "two"}
    async with await RemotingClient.connect("127.0.0.1", server.port) as client:
        for n in range(4):
            req = RemotingCommand.request(
                REFLECT, dict(ext), b"b%d" % n, serialize_type=SerializeType.ROCKETMQ
            )
            resp = await client.invoke(req, 2)
            assert (resp.code, resp.remark, resp.ext_fields, resp.body) == (0, None, ext, b"b%d" % n)


@with_server
async def test_oneway_gets_no_response(server: RemotingServer) -> None:
    echo = server.table[ECHO]
    async with await RemotingClient.connect("127.0.0.1", server.port) as client:
        client.invoke_oneway(RemotingCommand.request(ECHO, {"n": "1"}))
        resp = await client.invoke(RemotingCommand.request(ECHO, {"n": "2"}), 2)
        assert resp.ext_fields == {"n": "2"}
        assert [c.ext_fields for c in echo.seen] == [{"n": "1"}, {"n": "2"}]  # type: ignore[attr-defined]


@with_server
async def test_unknown_code_and_errors(server: RemotingServer) -> None:
    async with await RemotingClient.connect("127.0.0.1", server.port) as client:
        resp = await client.invoke(RemotingCommand.request(4242), 2)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in resp.remark
        resp = await client.invoke(RemotingCommand.request(BOOM), 2)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "kaboom" in resp.remark
        resp = await client.invoke(RemotingCommand.request(CODEC), 2)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "'x' is missing" in resp.remark
        resp = await client.invoke(RemotingCommand.request(ECHO), 2)
        assert resp.code == 0


@with_server
async def test_server_initiated_request(server: RemotingServer) -> None:
    async def on_request(cmd: RemotingCommand) -> RemotingCommand:
        assert cmd.code == 40 and cmd.ext_fields == {"consumerGroup": "g"}
        return cmd.response(0, "hello")

    async with await RemotingClient.connect("127.0.0.1", server.port, on_request=on_request) as client:
        resp = await client.invoke(RemotingCommand.request(ASK), 3)
        assert resp.code == 0 and resp.remark == "client said hello"


async def _raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _stuck_peer(srv: RemotingServer, requests: int) -> tuple[asyncio.StreamWriter, Channel]:
    """A peer that sends ``requests`` 16 KiB echoes and never reads: returned once the server's channel
    to it is over its write high-water mark (no longer writable)."""
    _reader, writer = await _raw(srv.port)
    writer.transport.set_write_buffer_limits(high=1 << 30)
    writer.write(encode_frame(RemotingCommand.request(ECHO, body=b"z" * 16384)) * requests)
    (channel,) = await wait_for(lambda: srv.channels)
    await wait_for(lambda: not channel.writable)
    return writer, channel


async def _read_closed(reader: asyncio.StreamReader) -> bool:
    data = await asyncio.wait_for(reader.read(), 3)
    return data == b""


@with_server
async def test_responses_waiting_for_the_round_leave_before_a_close(server: RemotingServer) -> None:
    """Responses wait for the end of the event-loop round; closing the connection sends them first."""
    for together in (True, False):
        reader, writer = await _raw(server.port)
        echo = encode_frame(RemotingCommand.request(ECHO, {"i": "1"}, opaque=5))
        bye = encode_frame(RemotingCommand.request(BYE, opaque=6))
        if together:
            writer.write(echo + bye)
        else:
            writer.write(echo)
            await writer.drain()
            writer.write(bye)
        cmds = FrameDecoder().feed(await asyncio.wait_for(reader.read(), 3))  # everything up to EOF
        assert [(c.opaque, c.remark) for c in cmds] == [(5, "echo"), (6, "bye")]
        writer.close()


@with_server
async def test_bad_frame_closes_only_that_connection(server: RemotingServer) -> None:
    async with await RemotingClient.connect("127.0.0.1", server.port) as good:
        reader, writer = await _raw(server.port)
        writer.write(struct.pack(">ii", 8, 0x05000004) + b"abcd")  # serialization type 5
        assert await _read_closed(reader)
        writer.close()
        reader, writer = await _raw(server.port)
        writer.write(struct.pack(">ii", 10, 100) + b"x" * 6)  # header longer than the frame
        assert await _read_closed(reader)
        writer.close()
        reader, writer = await _raw(server.port)
        writer.write(struct.pack(">ii", 64 * 1024 * 1024, 4))  # over the 16 MiB limit
        assert await _read_closed(reader)
        writer.close()
        resp = await good.invoke(RemotingCommand.request(ECHO, {"a": "b"}), 2)
        assert resp.code == 0


@with_server
async def test_bad_header_closes_after_serving_earlier_frames(server: RemotingServer) -> None:
    reader, writer = await _raw(server.port)
    ok = encode_frame(RemotingCommand.request(ECHO, {"x": "1"}, opaque=77))
    bad = struct.pack(">ii", 4 + 5, 5) + b"{nope"
    writer.write(ok + bad)
    data = await asyncio.wait_for(reader.read(), 3)
    cmds = FrameDecoder().feed(data)
    assert [c.opaque for c in cmds] == [77]
    writer.close()


@contextlib.asynccontextmanager
async def flooded(
    server: RemotingServer, code: int, n: int
) -> AsyncIterator[tuple[RemotingClient, list[asyncio.Future[RemotingCommand]]]]:
    """A connection with ``n`` requests of ``code`` sent at once, given the time to reach the server."""
    async with await RemotingClient.connect("127.0.0.1", server.port) as client:
        futs = [asyncio.ensure_future(client.invoke(RemotingCommand.request(code), 5)) for _ in range(n)]
        await asyncio.sleep(0.2)
        yield client, futs


@with_server
async def test_bounded_inflight_pauses_reading(server: RemotingServer) -> None:
    misc: Misc = server.table[GATE]  # type: ignore[assignment]
    async with flooded(server, GATE, 10) as (_, futs):
        assert misc.running == 4  # max_inflight; the rest wait in the backlog
        misc.gate.set()
        resps = await asyncio.gather(*futs)
        assert all(r.code == 0 for r in resps)
        assert misc.max_running == 4


@with_server
async def test_pending_responses_follow_their_futures_and_count_as_in_flight(server: RemotingServer) -> None:
    later: Later = server.table[LATER]  # type: ignore[assignment]
    async with flooded(server, LATER, 6) as (client, futs):
        assert len(later.futures) == 4  # max_inflight: two requests wait unread
        assert not any(f.done() for f in futs)
        later.futures[2].set_result("third")
        later.futures[0].set_result("boom")
        await asyncio.sleep(0.1)
        assert futs[2].done() and futs[2].result().remark == "third"
        assert futs[0].result().code == ResponseCode.SYSTEM_ERROR  # respond raised: an error answer
        assert "respond failed" in futs[0].result().remark
        assert len(later.futures) == 6  # the two freed slots took the waiting requests
        for i in (1, 3, 4, 5):
            later.futures[i].set_result(f"r{i}")
        resps = await asyncio.gather(*futs)
        assert [r.remark for r in resps[1:]] == ["r1", "third", "r3", "r4", "r5"]
        client.invoke_oneway(RemotingCommand.request(LATER))
        await asyncio.sleep(0.1)
        later.futures[6].set_result("unheard")  # oneway: nothing is written back
        assert (await client.invoke(RemotingCommand.request(ECHO), 5)).remark == "echo"
        later.futures.clear()
        pending = asyncio.ensure_future(client.invoke(RemotingCommand.request(LATER), 5))
        await asyncio.sleep(0.1)
    assert pending.done() and (pending.cancelled() or pending.exception() is not None)  # closed: failed
    await asyncio.sleep(0.1)
    assert not later.futures[0].cancelled()  # the future belongs to its producer, not the connection
    later.futures[0].set_result("after close")  # and answering a closed connection is harmless


@async_test
async def test_idle_connection_closed() -> None:
    srv = RemotingServer("127.0.0.1", 0, [Echo()], idle_timeout=0.3)
    await srv.start()
    try:
        reader, writer = await _raw(srv.port)
        assert await _read_closed(reader)
        writer.close()
        assert not srv.channels or all(c.closed for c in srv.channels)
    finally:
        await srv.stop()


@async_test
async def test_idle_peer_that_never_reads_is_closed() -> None:
    """A peer that stopped reading with responses still buffered: the idle close drops them and ends the
    connection, rather than waiting forever for the buffer to drain."""
    srv = RemotingServer("127.0.0.1", 0, [Echo()], idle_timeout=0.5, write_high_water=64 * 1024)
    await srv.start()
    try:
        writer, channel = await _stuck_peer(srv, 400)
        assert channel.transport.get_write_buffer_size() > 0
        await wait_for(lambda: channel.closed, timeout=5)
        assert channel not in srv.channels
        writer.transport.abort()
    finally:
        await srv.stop()


@async_test
async def test_default_server_holds_about_a_mebibyte_for_a_peer_that_never_reads() -> None:
    """Thousands of stuck consumers must not cost gigabytes: with the default high-water mark a peer
    that never reads holds at most about 1 MiB of responses (plus one read's worth) in the server."""
    srv = RemotingServer("127.0.0.1", 0, [Echo()])
    await srv.start()
    try:
        writer, channel = await _stuck_peer(srv, 2000)
        assert 0 < channel.transport.get_write_buffer_size() < 1024 * 1024 + 512 * 1024
        writer.transport.abort()
    finally:
        await srv.stop()


@async_test
async def test_start_lifts_the_open_files_soft_limit() -> None:
    """The soft limit goes up to the hard one (left as it is under an unlimited hard limit). Only the
    soft limit is changed here: an unprivileged process cannot raise a hard limit it lowered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    low = min(soft, 256) if unlimited else min(soft, 256, max(hard // 2, 1))
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    srv = RemotingServer("127.0.0.1", 0, [Echo()])
    try:
        await srv.start()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (low if unlimited else hard, hard)
    finally:
        await srv.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@async_test
async def test_slow_reader_backpressure() -> None:
    """A client that never reads: the server stops reading instead of buffering without bound."""
    srv = RemotingServer("127.0.0.1", 0, [Echo()], write_high_water=64 * 1024)
    await srv.start()
    try:
        _reader, writer = await _raw(srv.port)
        frame = encode_frame(RemotingCommand.request(ECHO, body=b"z" * 16384))
        writer.transport.set_write_buffer_limits(high=1 << 30)
        for _ in range(2000):  # 32 MiB of requests whose responses are never read
            writer.write(frame)
        await asyncio.sleep(1.0)
        (channel,) = srv.channels
        buffered = channel.transport.get_write_buffer_size()
        assert buffered < 512 * 1024  # high-water mark (64 KiB) + at most one read's responses
        writer.close()
    finally:
        await srv.stop()


@with_server
async def test_pipelined_requests_answered_in_one_go(server: RemotingServer) -> None:
    reader, writer = await _raw(server.port)
    frames = b"".join(
        encode_frame(RemotingCommand.request(ECHO if i % 3 else 4242, {"i": str(i)}, b"x" * i, opaque=i + 1))
        for i in range(200)
    )
    writer.write(frames)
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    while len(got) < 200:
        got += dec.feed(await asyncio.wait_for(reader.read(65536), 3))
    assert [c.opaque for c in got] == list(range(1, 201))
    assert all(c.code == (0 if i % 3 else ResponseCode.REQUEST_CODE_NOT_SUPPORTED) for i, c in enumerate(got))
    assert all(bytes(c.body or b"") == b"x" * i for i, c in enumerate(got) if i % 3)
    writer.close()
