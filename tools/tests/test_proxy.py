"""The recording proxy against a scripted name server + broker: rewriting, exactness, robustness."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from rmqgate.server.remoting import RemotingServer
from rmqgate.server.testing import wait_for
from rmqgate.tools.capture import CaptureWriter, Direction, Kind, Role, read_capture
from rmqgate.tools.fakecluster import FakeCluster, _Namesrv, cluster_body, route_body
from rmqgate.tools.proxy import RecordingProxy, broker_addresses, rewrite_addresses
from rmqgate.wire.codes import LanguageCode, RequestCode, SerializeType
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import decode_frame, encode_frame


class RawClient:
    """Bytes in, whole frames out: what a client really sees on its socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, addr: str) -> RawClient:
        host, _, port = addr.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def frame(self, timeout: float = 5.0) -> bytes:
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        rest = await asyncio.wait_for(self.reader.readexactly(int.from_bytes(head, "big")), timeout)
        return head + rest

    def close(self) -> None:
        self.writer.close()


def route_request(topic: str, opaque: int, version: int = 317, st: int = SerializeType.JSON) -> bytes:
    return encode_frame(
        RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": topic},
            opaque=opaque,
            version=version,
            serialize_type=st,
        )
    )


def send_request(
    opaque: int, topic: str = "T", body: bytes = b"hello", st: int = SerializeType.JSON
) -> bytes:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0", "i": ""}
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, ext, body, opaque=opaque, serialize_type=st, language=LanguageCode.CPP
    )
    return encode_frame(cmd)


def frames_of(path: Path, conn: int | None = None, direction: int | None = None) -> list[bytes]:
    return [
        r.data
        for r in read_capture(path)
        if r.kind == Kind.FRAME
        and (conn is None or r.conn_id == conn)
        and (direction is None or r.direction == direction)
    ]


async def start_proxy(cluster: FakeCluster, path: Path, **kw: object) -> RecordingProxy:
    proxy = RecordingProxy(
        cluster.namesrv_addr, CaptureWriter(path, source="test"), flush_interval=0.05, **kw
    )
    await proxy.start()
    return proxy


def test_broker_addresses_and_rewrite_keep_the_key_style() -> None:
    for body in (route_body("10.0.0.1:10911"), route_body("10.0.0.1:10911", quoted_keys=True),
                 cluster_body("10.0.0.1:10911")):  # fmt: skip
        assert broker_addresses(body) == {"10.0.0.1:10911": "broker-a"}
        out = rewrite_addresses(body, {"10.0.0.1:10911": "127.0.0.1:4000"})
        assert out == body.replace(b"10.0.0.1:10911", b"127.0.0.1:4000")
    assert b'{0:"127.0.0.1:4000"}' in rewrite_addresses(
        route_body("10.0.0.1:10911"), {"10.0.0.1:10911": "127.0.0.1:4000"}
    )


def test_route_and_cluster_responses_point_at_proxy_listeners(tmp_path: Path) -> None:
    async def main() -> None:
        async with FakeCluster() as cluster:
            proxy = await start_proxy(cluster, tmp_path / "p.rmqcap")
            c = await RawClient.connect(proxy.address)
            for opaque, version in ((1, 317), (2, 409)):
                await c.send(route_request("TopicA", opaque, version))
                raw = await c.frame()
                resp = decode_frame(raw)
                assert resp.opaque == opaque
                port = proxy.broker_ports[cluster.broker_addr]
                expected = route_body(f"127.0.0.1:{port}", quoted_keys=version >= 401)
                assert bytes(resp.body) == expected  # only the address changed, key style kept
            await c.send(encode_frame(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=3)))
            resp = decode_frame(await c.frame())
            assert bytes(resp.body) == cluster_body(f"127.0.0.1:{proxy.broker_ports[cluster.broker_addr]}")
            assert len(proxy.broker_ports) == 1
            c.close()
            await proxy.stop()
            proxy.writer.close()
        recorded = [decode_frame(f) for f in frames_of(tmp_path / "p.rmqcap", direction=Direction.S2C)]
        # the recording keeps what the name server really said
        assert cluster.broker_addr.encode() in bytes(recorded[0].body)

    asyncio.run(main())


def test_broker_traffic_is_passed_through_exactly_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "b.rmqcap"

    async def main() -> None:
        async with FakeCluster() as cluster:
            proxy = await start_proxy(cluster, path)
            ns = await RawClient.connect(proxy.address)
            await ns.send(route_request("TopicA", 1))
            await ns.frame()
            broker = await RawClient.connect(f"127.0.0.1:{proxy.broker_ports[cluster.broker_addr]}")
            sent = [send_request(10 + i, st=i % 2, body=os.urandom(100 + i)) for i in range(6)]
            await broker.send(b"".join(sent[:3]))  # pipelined in one write
            for frame in sent[3:]:  # and split into single bytes
                for b in range(len(frame)):
                    broker.writer.write(frame[b : b + 1])
                await broker.writer.drain()
            received = [await broker.frame() for _ in sent]
            assert sorted(decode_frame(r).opaque for r in received) == list(range(10, 16))
            # a server-initiated request: the client answers it through the proxy
            asking = asyncio.ensure_future(cluster.ask_client())
            srv_req = await broker.frame()
            req = decode_frame(srv_req)
            assert req.code == RequestCode.GET_CONSUMER_RUNNING_INFO
            answer = encode_frame(req.response(body=b'{"properties":{}}'))
            await broker.send(answer)
            answers = await asyncio.wait_for(asking, 5)
            assert [bytes(a.body) for a in answers] == [b'{"properties":{}}']
            broker.close()
            ns.close()
            await asyncio.sleep(0.2)
            await proxy.stop()
            proxy.writer.close()
            recs = list(read_capture(path))
            opens = [r for r in recs if r.kind == Kind.CONN_OPEN]
            assert [(r.role, r.meta.get("broker_name")) for r in opens] == [
                (Role.NAMESRV, None),
                (Role.BROKER, "broker-a"),
            ]
            assert opens[1].meta["server"] == cluster.broker_addr
            bconn = opens[1].conn_id
            assert frames_of(path, bconn, Direction.C2S) == [*sent, answer]
            assert frames_of(path, bconn, Direction.S2C) == [*received, srv_req]
            assert sum(1 for r in recs if r.kind == Kind.CONN_CLOSE) == 2

    asyncio.run(main())


def test_client_killed_mid_frame_keeps_whole_frames(tmp_path: Path) -> None:
    path = tmp_path / "k.rmqcap"

    async def main() -> None:
        async with FakeCluster() as cluster:
            proxy = await start_proxy(cluster, path)
            c = await RawClient.connect(proxy.address)
            frames = [route_request("T1", 1), route_request("T2", 2)]
            third = route_request("T3", 3)
            await c.send(b"".join(frames) + third[:10])
            await c.frame()
            await c.frame()
            c.writer.transport.abort()  # RST mid-frame, like a killed process
            await wait_for(lambda: frames_of(path, direction=Direction.C2S) == frames)  # flushed on close
            closes = [r for r in read_capture(path) if r.kind == Kind.CONN_CLOSE]
            assert closes and closes[0].meta["c2s_unfinished_bytes"] == 10
            # the proxy keeps serving
            c2 = await RawClient.connect(proxy.address)
            await c2.send(route_request("T4", 4))
            assert decode_frame(await c2.frame()).opaque == 4
            c2.close()
            await proxy.stop()
            proxy.writer.close()

    asyncio.run(main())


def test_upstream_restart(tmp_path: Path) -> None:
    path = tmp_path / "u.rmqcap"

    async def main() -> None:
        async with FakeCluster() as cluster:
            proxy = await start_proxy(cluster, path)
            c = await RawClient.connect(proxy.address)
            await c.send(route_request("T1", 1))
            first = await c.frame()
            port = cluster.namesrv.port
            await cluster.namesrv.stop()
            assert await asyncio.wait_for(c.reader.read(), 5) == b""  # the proxy closed the client side
            # while the name server is down, connections through the proxy fail cleanly
            down = await RawClient.connect(proxy.address)
            assert await asyncio.wait_for(down.reader.read(), 5) == b""
            cluster.namesrv = RemotingServer("127.0.0.1", port, [_Namesrv(cluster.state)], idle_timeout=0)
            await cluster.namesrv.start()
            c2 = await RawClient.connect(proxy.address)
            await c2.send(route_request("T2", 2))
            second = await c2.frame()
            assert decode_frame(second).opaque == 2
            c2.close()
            await asyncio.sleep(0.1)
            await proxy.stop()
            proxy.writer.close()
            assert proxy.stats.upstream_failures == 1
            got = [decode_frame(f) for f in frames_of(path, direction=Direction.S2C)]
            assert [r.opaque for r in got] == [decode_frame(first).opaque, decode_frame(second).opaque]
            # recorded as the upstream sent them
            assert all(cluster.broker_addr.encode() in bytes(r.body) for r in got)
            assert frames_of(path, direction=Direction.C2S) == [
                route_request("T1", 1),
                route_request("T2", 2),
            ]

    asyncio.run(main())


def test_proxy_process_killed_keeps_flushed_frames(tmp_path: Path) -> None:
    path = tmp_path / "killed.rmqcap"

    async def main() -> None:
        async with FakeCluster() as cluster:
            code = (
                "import sys; from rmqgate.tools import proxy, cli; import argparse; p = argparse.ArgumentParser(); "
                "proxy.add_arguments(p); sys.exit(proxy.run(p.parse_args(sys.argv[1:])))"
            )
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", code, "--listen", "127.0.0.1:0", "--upstream", cluster.namesrv_addr,
                "--record", str(path), "--flush-interval", "0.05", stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert "rmqgate proxy ready" in line, line
            addr = line.split()[3]
            c = await RawClient.connect(addr)
            sent = [route_request(f"T{i}", i) for i in range(20)]
            for f in sent:
                await c.send(f)
                await c.frame()
            await wait_for(lambda: frames_of(path, direction=Direction.C2S) == sent)  # the interval flush
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            c.close()
            assert frames_of(path, direction=Direction.C2S) == sent

    asyncio.run(main())
