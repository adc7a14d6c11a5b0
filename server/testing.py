"""Helpers for tests of rmqgate.server (no pytest-asyncio here: each test runs its own loop)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from rmqgate.server import eventloop
from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.config import BrokerConfig
from rmqgate.server.namesrv import NamesrvController
from rmqgate.server.remoting import RemotingServer
from rmqgate.tools.pcap import read_frames
from rmqgate.wire import RemotingCommand
from rmqgate.wire.codes import RequestCode, SerializeType
from rmqgate.wire.message import MessageExt, decode_message, format_properties, iter_messages


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async def`` test in a fresh event loop (with a hard timeout): asyncio's own, or the
    one ``RMQGATE_TEST_EVENT_LOOP`` names (``uvloop``: the same tests under the other loop)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            await asyncio.wait_for(fn(*args, **kwargs), 120)

        eventloop.run(main(), os.environ.get("RMQGATE_TEST_EVENT_LOOP") or "asyncio")

    return wrapper


def pcap_requests(path: str | os.PathLike[str], code: int | None = None) -> list[RemotingCommand]:
    """Client requests (not responses) of a capture, in capture order (rmqgate.tools.pcap)."""
    from rmqgate.tools.pcap import read_frames

    out: list[RemotingCommand] = []
    for frame in read_frames(path):
        cmd = frame.command
        if cmd is not None and not cmd.is_response and (code is None or cmd.code == code):
            out.append(cmd)
    return out


def small_store(config: BrokerConfig, root: str | os.PathLike[str]) -> BrokerConfig:
    """``config`` on a real store in ``root`` with small segments (tests roll files cheaply)."""
    config.storePathRootDir = str(root)
    config.mappedFileSizeCommitLog = 1 << 20
    config.mappedFileSizeConsumeQueue = 6000
    config.maxHashSlotNum = 5000
    config.maxIndexNum = 20000
    return config


def small_broker(root: str | os.PathLike[str], **overrides: Any) -> BrokerController:
    """A broker named broker-t on a ``small_store`` in ``root``, on an ephemeral port of 127.0.0.1,
    scanning every 0.1 s; ``overrides`` are BrokerConfig keys, applied last."""
    config = small_store(BrokerConfig(brokerName="broker-t", listenPort=0, brokerIP1="127.0.0.1"), root)
    return BrokerController(
        dataclasses.replace(config, **overrides), listen_host="127.0.0.1", scan_interval=0.1
    )


def stored(broker: BrokerController, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of one queue, as the broker's store holds it."""
    got = broker.store.get_messages(topic, queue_id, 0, 1000)
    return [decode_message(bytes(b), 0) for b in got.buffers]


async def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``predicate`` until it returns something true (returned); AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def captured_requests_and_pulls(pcap: Path) -> Iterator[RemotingCommand | MessageExt]:
    """A capture's requests, and each message a successful PULL_MESSAGE delivered, in capture order:
    what corpus-derived tests compare rmqgate with."""
    codes: dict[tuple[int, int], int] = {}
    for frame in read_frames(pcap):
        cmd = frame.command
        if cmd is None:
            continue
        if not cmd.is_response:
            codes[(frame.conn_id, cmd.opaque)] = cmd.code
            yield cmd
        elif (
            codes.get((frame.conn_id, cmd.opaque)) == RequestCode.PULL_MESSAGE and cmd.code == 0 and cmd.body
        ):
            yield from iter_messages(cmd.body)


class LocalBroker:
    """A broker on its own real store (small segments) in ``root``, on an ephemeral port."""

    def __init__(self, root: str, **overrides: Any) -> None:
        self.broker = small_broker(root, **overrides)
        self.config = self.broker.config
        self.store = self.broker.store

    async def __aenter__(self) -> LocalBroker:
        await self.broker.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.broker.stop()

    async def client(self, **kwargs: object) -> RemotingClient:
        return await RemotingClient.connect("127.0.0.1", self.broker.port, **kwargs)  # type: ignore[arg-type]


class LocalNamesrv:
    """A name server on an ephemeral port; ``kwargs`` go to NamesrvController (expiry, scan period)."""

    def __init__(self, **kwargs: Any) -> None:
        self.controller = NamesrvController(**kwargs)
        self.server = RemotingServer("127.0.0.1", 0, self.controller.processors())

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def __aenter__(self) -> LocalNamesrv:
        await self.server.start()
        await self.controller.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.controller.stop()
        await self.server.stop()

    async def client(self) -> RemotingClient:
        return await RemotingClient.connect("127.0.0.1", self.server.port)


def send_v2(
    topic: str,
    body: bytes = b"hello",
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    uniq: str | None = None,
    ser: int = SerializeType.JSON,
    extra: dict[str, str] | None = None,
) -> RemotingCommand:
    props = {"WAIT": "true"}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    ext = {
        "a": "PG",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": format_properties(props),
        "j": "0",
        "k": "false",
        "m": "false",
        **(extra or {}),
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body, serialize_type=ser)


def pull_cmd(
    topic: str,
    offset: int,
    *,
    queue_id: int = 0,
    group: str = "CG",
    sys_flag: int = 4,
    sub: str = "*",
    suspend_ms: int = 1000,
    commit: int = 0,
    code: int = RequestCode.PULL_MESSAGE,
) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(sys_flag),
        "commitOffset": str(commit),
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": sub,
        "subVersion": "0",
        "expressionType": "TAG",
    }
    return RemotingCommand.request(code, ext)


def heartbeat(
    client_id: str, group: str, topic: str, sub: str = "*", *, ints: bool = False
) -> RemotingCommand:
    consumer = {
        "consumeFromWhere": 4 if ints else "CONSUME_FROM_FIRST_OFFSET",
        "consumeType": 1 if ints else "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": 1 if ints else "CLUSTERING",
        "subscriptionDataSet": [{"subString": sub, "subVersion": "100", "topic": topic}],
    }
    body = {"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": [{"groupName": "PG"}]}
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
