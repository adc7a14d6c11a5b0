"""Request-reply on a real broker (sockets, store files): SEND_REPLY_MESSAGE(_V2) pushed to the
requester's producer connection with PUSH_REPLY_MESSAGE_TO_CLIENT and stored in <cluster>_REPLY_TOPIC."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import async_test, small_broker, stored
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.headers import ReplyMessageRequestHeader
from rmqgate.wire.message import format_properties, parse_properties

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


def reply_request(
    reply_to: str, *, code: int = R.SEND_REPLY_MESSAGE_V2, body: bytes = b"pong"
) -> RemotingCommand:
    props = {"MSG_TYPE": "reply", "CORRELATION_ID": "corr-1", "REPLY_TO_CLIENT": reply_to, "TTL": "3000"}
    ext = {
        "producerGroup": "REPLIER",
        "topic": REPLY_TOPIC,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": format_properties(props),
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    if code == R.SEND_REPLY_MESSAGE_V2:
        names = "producerGroup topic defaultTopic defaultTopicQueueNums queueId sysFlag bornTimestamp flag properties reconsumeTimes unitMode"
        ext = {alias: ext[name] for alias, name in zip("abcdefghijk", names.split(), strict=True)}
    return RemotingCommand.request(code, ext, body)


async def requester(
    port: int, client_id: str, answer: int = ResponseCode.SUCCESS
) -> tuple[RemotingClient, list[RemotingCommand]]:
    """A producer connection that registers ``client_id`` and answers every push with ``answer``."""
    pushes: list[RemotingCommand] = []

    def on_request(cmd: RemotingCommand) -> RemotingCommand:
        pushes.append(cmd)
        return cmd.response(answer, None if answer == ResponseCode.SUCCESS else "process reply message fail")

    c = await RemotingClient.connect("127.0.0.1", port, on_request=on_request)
    body = json.dumps(
        {"clientID": client_id, "consumerDataSet": [], "producerDataSet": [{"groupName": "REQ"}]}
    )
    assert (await c.invoke(RemotingCommand.request(R.HEART_BEAT, {}, body.encode()))).code == 0
    return c, pushes


async def _with_broker(tmp_path: Path, fn: Any, **overrides: Any) -> None:
    broker = small_broker(tmp_path / "store", **overrides)
    await broker.start()
    try:
        await fn(broker)
    finally:
        await broker.stop()


@async_test
async def test_reply_is_pushed_to_the_requester_and_stored(tmp_path: Path) -> None:
    async def run(broker: Any) -> None:
        req, pushes = await requester(broker.port, "10.0.0.1@req")
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        for code in (R.SEND_REPLY_MESSAGE_V2, R.SEND_REPLY_MESSAGE):
            resp = await replier.invoke(reply_request("10.0.0.1@req", code=code))
            assert resp.code == ResponseCode.SUCCESS, resp
            ext = resp.ext_fields or {}
            assert ext["queueId"] == "0" and ext["msgId"] != "0"
            assert {"MSG_REGION", "TRACE_ON"} <= ext.keys()
        assert [int(ext["queueOffset"]) for ext in [resp.ext_fields or {}]] == [1]
        assert len(pushes) == 2 and all(p.code == R.PUSH_REPLY_MESSAGE_TO_CLIENT for p in pushes)
        h = ReplyMessageRequestHeader.from_ext(pushes[0].ext_fields or {})
        assert (h.topic, h.producer_group, h.queue_id, pushes[0].body) == (REPLY_TOPIC, "REPLIER", 0, b"pong")
        assert h.store_host == broker.config.broker_addr and h.born_host == replier.channel.local_addr
        props = parse_properties(h.properties or "")
        assert props["CORRELATION_ID"] == "corr-1" and "PUSH_REPLY_TIME" in props
        kept = stored(broker, REPLY_TOPIC)
        assert [m.body for m in kept] == [b"pong", b"pong"]
        # stored as sent: no PUSH_REPLY_TIME, no CLUSTER
        assert set(kept[0].properties) == {"MSG_TYPE", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL"}
        await req.aclose()
        await replier.aclose()

    await _with_broker(tmp_path, run)


@async_test
async def test_requester_gone_or_failing(tmp_path: Path) -> None:
    async def run(broker: Any) -> None:
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        resp = await replier.invoke(reply_request("nobody@here"))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "push reply message fail, channel of <nobody@here> not found.",
        )
        # still stored (storeReplyMessageEnable), and the header says where
        assert "msgId" in (resp.ext_fields or {}) and len(stored(broker, REPLY_TOPIC)) == 1

        req, pushes = await requester(broker.port, "gone@req")
        await req.aclose()
        await asyncio.sleep(0.1)
        resp = await replier.invoke(reply_request("gone@req"))
        assert resp.remark == "push reply message fail, channel of <gone@req> not found."

        failing, pushes = await requester(broker.port, "bad@req", answer=ResponseCode.SYSTEM_ERROR)
        resp = await replier.invoke(reply_request("bad@req"))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "push reply message to bad@reqfail.")
        assert len(pushes) == 1

        no_target = reply_request("x")
        props = parse_properties((no_target.ext_fields or {})["i"])
        del props["REPLY_TO_CLIENT"]
        (no_target.ext_fields or {})["i"] = format_properties(props)
        resp = await replier.invoke(no_target)
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "reply message properties[REPLY_TO_CLIENT] is null",
        )
        await failing.aclose()
        await replier.aclose()

    await _with_broker(tmp_path, run)


@async_test
async def test_store_reply_message_disabled(tmp_path: Path) -> None:
    async def run(broker: Any) -> None:
        req, pushes = await requester(broker.port, "req@1")
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        resp = await replier.invoke(reply_request("req@1"))
        assert resp.code == ResponseCode.SUCCESS
        ext = resp.ext_fields or {}
        assert (ext["msgId"], ext["queueOffset"]) == ("0", "0")
        assert len(pushes) == 1 and stored(broker, REPLY_TOPIC) == []
        resp = await replier.invoke(reply_request("nobody"))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "msgId" not in (resp.ext_fields or {})
        await req.aclose()
        await replier.aclose()

    await _with_broker(tmp_path, run, storeReplyMessageEnable=False)


@async_test
async def test_bad_queue_and_unknown_topic(tmp_path: Path) -> None:
    async def run(broker: Any) -> None:
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        cmd = reply_request("x")
        (cmd.ext_fields or {})["e"] = "5"
        resp = await replier.invoke(cmd)
        assert resp.code == ResponseCode.SYSTEM_ERROR and (resp.remark or "").startswith(
            "request queueId[5] is illegal"
        )
        cmd = reply_request("x")
        (cmd.ext_fields or {})["b"] = "bad topic!"
        resp = await replier.invoke(cmd)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        await replier.aclose()

    await _with_broker(tmp_path, run)


@async_test
async def test_any_queue_of_a_topic_without_write_queues(tmp_path: Path) -> None:
    """queueId -1 (any queue) on a topic created with writeQueueNums 0 is answered like a send to it,
    not with the processor failing on a modulo by zero."""

    async def run(broker: Any) -> None:
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        create = {"topic": "NoWriteQueues", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "0",
                  "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
        assert (await replier.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_TOPIC, create))).code == 0
        cmd = reply_request("nobody")
        (cmd.ext_fields or {}).update(b="NoWriteQueues", e="-1")
        resp = await replier.invoke(cmd)
        assert (resp.remark or "").startswith("push reply message fail"), resp
        await replier.aclose()

    await _with_broker(tmp_path, run)


@async_test
async def test_unregistering_one_producer_group_forgets_the_client(tmp_path: Path) -> None:
    """ProducerManager's clientId table (Java's clientChannelTable) drops the clientId when any of its
    groups unregisters, though the client's other group stays; its next registration of a group it
    is not in brings it back."""

    async def run(broker: Any) -> None:
        req, pushes = await requester(broker.port, "two@groups")
        body = json.dumps(
            {"clientID": "two@groups", "consumerDataSet": [], "producerDataSet": [{"groupName": "REQ2"}]}
        )
        assert (await req.invoke(RemotingCommand.request(R.HEART_BEAT, {}, body.encode()))).code == 0
        unreg = {"clientID": "two@groups", "producerGroup": "REQ2"}
        assert (await req.invoke(RemotingCommand.request(R.UNREGISTER_CLIENT, unreg))).code == 0
        assert "REQ" in broker.producers.groups
        replier = await RemotingClient.connect("127.0.0.1", broker.port)
        resp = await replier.invoke(reply_request("two@groups"))
        assert resp.remark == "push reply message fail, channel of <two@groups> not found."
        assert (await req.invoke(RemotingCommand.request(R.HEART_BEAT, {}, body.encode()))).code == 0
        assert (await replier.invoke(reply_request("two@groups"))).code == ResponseCode.SUCCESS
        assert len(pushes) == 1
        await req.aclose()
        await replier.aclose()

    await _with_broker(tmp_path, run)
