"""A minimal responder: a bare asyncio server that answers every request at once with SUCCESS.

It stands in for the target when what is measured is the replayer, not a broker. One listener plays
name server and broker: GET_BROKER_CLUSTER_INFO names it as the only broker (``broker-a``), everything
else gets an empty SUCCESS in the request's serialization type; oneway requests get nothing.
Run ``python -m rmqgate.spark.responder [PORT]`` or ``start_in_subprocess()``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sys
from typing import Any

from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG
from rmqgate.wire.frame import FrameDecoder, encode_frame


class Responder(asyncio.Protocol):
    def __init__(self, cluster_body: bytes) -> None:
        self.decoder = FrameDecoder()
        self.cluster_body = cluster_body
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        out = []
        for cmd in self.decoder.feed(data):
            if cmd.flag & (ONEWAY_FLAG | RESPONSE_FLAG):
                continue
            body = self.cluster_body if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO else None
            out.append(encode_frame(cmd.response(ResponseCode.SUCCESS, body=body)))
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


def cluster_info(addr: str, broker_name: str = "broker-a", cluster: str = "DefaultCluster") -> bytes:
    return json.dumps(
        {
            "brokerAddrTable": {
                broker_name: {"cluster": cluster, "brokerName": broker_name, "brokerAddrs": {"0": addr}}
            },
            "clusterAddrTable": {cluster: [broker_name]},
        }
    ).encode()


async def serve(host: str = "127.0.0.1", port: int = 0, ready: Any = None) -> None:
    loop = asyncio.get_running_loop()
    holder: dict[str, bytes] = {}
    server = await loop.create_server(lambda: Responder(holder["body"]), host, port)
    bound = server.sockets[0].getsockname()[1]
    holder["body"] = cluster_info(f"{host}:{bound}")
    if ready is not None:
        ready.send(bound)
    else:
        print(f"responder listening on {host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def _child(conn: Any, host: str) -> None:
    asyncio.run(serve(host, 0, conn))


def start_in_subprocess(host: str = "127.0.0.1") -> tuple[multiprocessing.Process, int]:
    """Start a responder process; returns it (terminate() it when done) and its port."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, host), daemon=True)
    proc.start()
    if not parent.poll(30):
        proc.terminate()
        raise RuntimeError("responder did not start")
    return proc, int(parent.recv())


if __name__ == "__main__":
    asyncio.run(serve("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0))
