"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ on a real broker: ownership, renewal, expiry, a closed connection."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.config import BrokerConfig, load_broker_conf
from rmqgate.server.locks import lock_max_live_time
from rmqgate.server.testing import async_test, small_store
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R


def make_broker(root: Path, conf: str = "") -> BrokerController:
    path = root.parent / f"{root.name}.conf"
    path.write_text(conf)
    config = load_broker_conf(
        str(path), BrokerConfig(brokerName="broker-l", listenPort=0, brokerIP1="127.0.0.1")
    )
    small_store(config, root)
    return BrokerController(config, listen_host="127.0.0.1", scan_interval=0.1)


def body(client_id: str, queues: list[int], group: str = "OG", topic: str = "OT") -> bytes:
    mqs = [{"brokerName": "broker-l", "queueId": q, "topic": topic} for q in queues]
    return json.dumps({"clientId": client_id, "consumerGroup": group, "mqSet": mqs}).encode()


async def lock(c: RemotingClient, client_id: str, queues: list[int], **kw: str) -> list[int]:
    resp = await c.invoke(RemotingCommand.request(R.LOCK_BATCH_MQ, {}, body(client_id, queues, **kw)))
    assert resp.code == 0, resp
    return sorted(mq["queueId"] for mq in json.loads(resp.body or b"{}")["lockOKMQSet"])


async def unlock(c: RemotingClient, client_id: str, queues: list[int], *, oneway: bool = False) -> None:
    cmd = RemotingCommand.request(R.UNLOCK_BATCH_MQ, {}, body(client_id, queues))
    if oneway:
        c.invoke_oneway(cmd)
        await asyncio.sleep(0.05)
    else:
        assert (await c.invoke(cmd)).code == 0


def test_lock_max_live_time_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("rocketmq.broker.rebalance.lockMaxLiveTime=1500\n")
    assert lock_max_live_time(load_broker_conf(str(conf))) == 1.5
    assert lock_max_live_time(BrokerConfig()) == 60.0


@async_test
async def test_one_owner_renewal_and_unlock(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        a = await RemotingClient.connect("127.0.0.1", broker.port)
        b = await RemotingClient.connect("127.0.0.1", broker.port)
        assert await lock(a, "A", [0, 1]) == [0, 1]
        assert await lock(b, "B", [1, 2]) == [2]  # exactly the queues locked for the caller
        assert await lock(a, "A", [0, 1, 2]) == [0, 1]  # renewal; 2 is B's
        assert await lock(b, "B", [0], group="OTHER") == [0]  # locks are per group
        await unlock(b, "B", [1])  # not B's: no effect
        assert await lock(b, "B", [1]) == []
        await unlock(a, "A", [1], oneway=True)
        assert await lock(b, "B", [1]) == [1]
        await a.aclose()
        await b.aclose()
    finally:
        await broker.stop()


@async_test
async def test_lock_expires_without_renewal(tmp_path: Path) -> None:
    # the margins are 0.8 s either side of the 2 s lifetime: a stalled VM must not decide the outcome
    broker = make_broker(tmp_path / "s", "rocketmq.broker.rebalance.lockMaxLiveTime = 2000\n")
    await broker.start()
    try:
        a = await RemotingClient.connect("127.0.0.1", broker.port)
        b = await RemotingClient.connect("127.0.0.1", broker.port)
        assert await lock(a, "A", [0]) == [0]
        await asyncio.sleep(1.2)
        assert await lock(a, "A", [0]) == [0]  # renewed
        await asyncio.sleep(1.2)
        assert await lock(b, "B", [0]) == []  # 2.4 s since the lock, 1.2 s since the renewal: still A's
        await asyncio.sleep(1.2)
        assert await lock(b, "B", [0]) == [0]  # expired
        assert await lock(a, "A", [0]) == []
        await a.aclose()
        await b.aclose()
    finally:
        await broker.stop()


@async_test
async def test_a_lock_outlives_its_connection_until_lock_max_live_time(tmp_path: Path) -> None:
    """As RebalanceLockManager: a connection closing frees nothing. The Java client reconnects after
    a timed-out call and keeps consuming what it locked, so another consumer must not get the queues
    until the locks expire; the owner re-locking from its new connection keeps them."""
    broker = make_broker(tmp_path / "s", "rocketmq.broker.rebalance.lockMaxLiveTime = 1500\n")
    await broker.start()
    try:
        a = await RemotingClient.connect("127.0.0.1", broker.port)
        b = await RemotingClient.connect("127.0.0.1", broker.port)
        assert await lock(a, "A", [0, 1]) == [0, 1]
        await a.aclose()
        await asyncio.sleep(0.1)
        assert await lock(b, "B", [0, 1]) == []
        a = await RemotingClient.connect("127.0.0.1", broker.port)
        assert await lock(a, "A", [0, 1]) == [0, 1]  # renewed from the new connection
        await a.aclose()
        await asyncio.sleep(2.3)  # 0.8 s past the lifetime: a stalled VM must not decide the outcome
        assert await lock(b, "B", [0, 1]) == [0, 1]
        await b.aclose()
    finally:
        await broker.stop()


@async_test
async def test_lock_requests_need_a_group_and_name_each_queue_once(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        mq = {"brokerName": "broker-l", "queueId": 0, "topic": "OT"}
        for code in (R.LOCK_BATCH_MQ, R.UNLOCK_BATCH_MQ):
            no_group = json.dumps({"clientId": "A", "mqSet": [mq]}).encode()
            resp = await c.invoke(RemotingCommand.request(code, {}, no_group))
            assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in resp.remark
        assert broker.locks.table == {}
        twice = json.dumps({"clientId": "A", "consumerGroup": "OG", "mqSet": [mq, mq]}).encode()
        resp = await c.invoke(RemotingCommand.request(R.LOCK_BATCH_MQ, {}, twice))
        assert json.loads(resp.body)["lockOKMQSet"] == [mq]
        await c.aclose()
    finally:
        await broker.stop()
