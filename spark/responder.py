"""A minimal responder: a bare asyncio server that answers every request at once with SUCCESS.

It stands in for the target when what is measured is the replayer, not a broker. One listener plays
name server and broker: GET_BROKER_CLUSTER_INFO names it as the only broker (``broker-a``), everything
else gets an empty SUCCESS (ROCKETMQ header); oneway requests get nothing.
Run ``python -m rmqgate.spark.responder [PORT]`` or ``start_in_subprocess()``.
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import subprocess
import sys
from typing import Any

from rmqgate.wire.codes import RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import FrameDecoder, encode_frame
from rmqgate.wire.layout import FRAME_PREFIX, HEADER_LENGTH_MASK, ROCKETMQ_FIXED

_JSON_CODE = re.compile(rb'"code"\s*:\s*(-?\d+)')
_JSON_OPAQUE = re.compile(rb'"opaque"\s*:\s*(-?\d+)')
_JSON_FLAG = re.compile(rb'"flag"\s*:\s*(-?\d+)')
_PREFIX = FRAME_PREFIX.size


def _int(pattern: re.Pattern[bytes], header: bytes) -> int:
    m = pattern.search(header)
    return int(m.group(1)) if m else 0


class Responder(asyncio.Protocol):
    """Splits frames without decoding headers; reads code/opaque/flag with a regex (JSON headers) or
    the fixed fields (ROCKETMQ headers), answers with a ROCKETMQ-header SUCCESS. Cheap on purpose:
    the replayer, not this, must be the bottleneck."""

    def __init__(self, cluster_body: bytes) -> None:
        self.decoder = FrameDecoder()
        self.cluster_body = cluster_body
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        out = []
        for frame in self.decoder.feed_raw(data):
            _, word = FRAME_PREFIX.unpack_from(frame, 0)
            if word >> 24 == SerializeType.ROCKETMQ:
                code, _, _, opaque, flag = ROCKETMQ_FIXED.unpack_from(frame, _PREFIX)
            else:
                header = frame[_PREFIX : _PREFIX + (word & HEADER_LENGTH_MASK)]
                code, opaque, flag = (
                    _int(_JSON_CODE, header),
                    _int(_JSON_OPAQUE, header),
                    _int(_JSON_FLAG, header),
                )
            if flag & (ONEWAY_FLAG | RESPONSE_FLAG):
                continue
            body = self.cluster_body if code == RequestCode.GET_BROKER_CLUSTER_INFO else None
            resp = RemotingCommand(
                ResponseCode.SUCCESS,
                opaque=opaque,
                flag=RESPONSE_FLAG,
                body=body,
                serialize_type=SerializeType.ROCKETMQ,
            )
            out.append(encode_frame(resp))
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


async def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    loop = asyncio.get_running_loop()
    holder: dict[str, bytes] = {}
    server = await loop.create_server(lambda: Responder(holder["body"]), host, port)
    bound = server.sockets[0].getsockname()[1]
    holder["body"] = cluster_info(f"{host}:{bound}")
    print(f"responder listening on {host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def start_in_subprocess(
    host: str = "127.0.0.1", timeout: float = 30.0
) -> tuple[subprocess.Popen[bytes], int]:
    """Start a responder process; returns it (terminate() it when done) and its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqgate.spark.responder", "0", host],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("responder listening on"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"responder did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


if __name__ == "__main__":
    asyncio.run(
        serve(sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    )
