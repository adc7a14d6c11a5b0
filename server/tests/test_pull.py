"""PULL_MESSAGE around replication: which broker the answer suggests (suggestWhichBrokerId), and
what a slave answers and commits, as 4.9.8's PullMessageProcessor does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import LocalBroker, async_test, pull_cmd, send_v2, wait_for
from rmqgate.wire.bodies import SubscriptionGroupConfig
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.message import iter_messages

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4


async def fill(broker: LocalBroker, topic: str, n: int) -> None:
    async with await broker.client() as c:
        for i in range(n):
            resp = await c.invoke(send_v2(topic, f"m{i}".encode()))
            assert resp.code == 0, resp.remark


async def set_group(broker: LocalBroker, group: str, **fields: object) -> None:
    body = SubscriptionGroupConfig(group_name=group, **fields).to_json()
    async with await broker.client() as c:
        resp = await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))
        assert resp.code == 0


async def pull(broker: LocalBroker, offset: int, **kwargs: object) -> RemotingCommand:
    async with await broker.client() as c:
        return await c.invoke(pull_cmd("PT", offset, **kwargs))  # type: ignore[arg-type]


@async_test
async def test_master_suggests_the_slave_to_a_consumer_behind(Broker: Callable[..., LocalBroker]) -> None:
    async with Broker() as master:
        await fill(master, "PT", 3)
        behind = master.store.config  # a pull past this share of memory behind the end is "behind"
        cases = [
            # slaveReadEnable, accessMessageInMemoryMaxRatio, group fields, expected suggestion
            (False, 0, {}, 0),
            (False, 40, {"broker_id": 1}, 0),
            (True, 0, {}, 1),
            (True, 0, {"which_broker_when_consume_slowly": 2}, 2),
            (True, 40, {}, 0),
            (True, 40, {"broker_id": 1}, 1),
        ]
        for n, (read_enable, ratio, fields, expected) in enumerate(cases):
            group = f"G{n}"
            await set_group(master, group, **fields)
            master.config.slaveReadEnable = read_enable
            behind.access_message_in_memory_max_ratio = ratio
            resp = await pull(master, 0, group=group)
            assert resp.code == ResponseCode.SUCCESS
            assert len(list(iter_messages(resp.body))) == 3
            assert resp.ext_fields["suggestWhichBrokerId"] == str(expected), (n, resp.ext_fields)
        # a pull that finds nothing suggests as well: not behind, so the group's brokerId
        master.config.slaveReadEnable = True
        resp = await pull(master, 3, group="G5", suspend_ms=0)
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["suggestWhichBrokerId"] == "1"


@async_test
async def test_slave_serves_pulls_and_commits_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    async with LocalBroker(root) as master:  # the slave opens the store this master wrote
        await fill(master, "PT", 3)
    async with LocalBroker(root, brokerRole="SLAVE", brokerId=1) as slave:
        await set_group(slave, "SG", broker_id=1, which_broker_when_consume_slowly=1)
        # slaveReadEnable off: 4.9.8's SLAVE branch sets PULL_RETRY_IMMEDIATELY, but the store's status
        # decides the code after it; the messages are served and the consumer is sent to the master
        resp = await pull(slave, 0, group="SG", sys_flag=FLAG_SUBSCRIPTION | FLAG_COMMIT_OFFSET, commit=2)
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_messages(resp.body)] == [b"m0", b"m1", b"m2"]
        assert resp.ext_fields["suggestWhichBrokerId"] == "0"
        assert slave.store.meta.query_offset("SG", "PT", 0) == -1  # a slave takes no commit from a pull
        slave.config.slaveReadEnable = True
        resp = await pull(slave, 1, group="SG")
        assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["suggestWhichBrokerId"] == "1"
        # an offset past the end: a slave corrects nothing (offsetCheckInSlave off) and sends the
        # consumer to the group's brokerId to retry at the offset it asked
        slave.config.slaveReadEnable = False
        resp = await pull(slave, 100, group="SG")
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert resp.ext_fields["nextBeginOffset"] == "100"
        assert resp.ext_fields["suggestWhichBrokerId"] == "1"
        # UPDATE_CONSUMER_OFFSET is stored on a slave
        async with await slave.client() as c:
            ext = {"consumerGroup": "SG", "topic": "PT", "queueId": "0", "commitOffset": "2"}
            assert (await c.invoke(RemotingCommand.request(R.UPDATE_CONSUMER_OFFSET, ext))).code == 0
        assert slave.store.meta.query_offset("SG", "PT", 0) == 2
        assert (await pull(slave, 0, group="SG")).code == ResponseCode.SUCCESS


def _sql92_pull(offset: int, expression: str, suspend_ms: int) -> RemotingCommand:
    flags = FLAG_SUBSCRIPTION | FLAG_SUSPEND
    cmd = pull_cmd("PT", offset, sys_flag=flags, sub=expression, suspend_ms=suspend_ms)
    assert cmd.ext_fields is not None
    cmd.ext_fields["expressionType"] = "SQL92"
    return cmd


async def _send_a(c: RemotingClient, a: int) -> None:
    """A message to PT's queue 0 with the user property ``a``."""
    cmd = send_v2("PT", f"a={a}".encode(), tags="T")
    assert cmd.ext_fields is not None
    cmd.ext_fields["i"] += f"\x02a\x01{a}"
    resp = await c.invoke(cmd)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


@async_test
async def test_held_sql92_pull_woken_only_by_a_message_its_filter_matches(
    Broker: Callable[..., LocalBroker],
) -> None:
    """notifyMessageArriving runs the held pull's MessageFilter on the arriving message's properties:
    a message the expression rejects leaves the pull parked (woken, it would answer
    PULL_RETRY_IMMEDIATELY at once); the next matching one answers it with that message."""
    async with Broker(enablePropertyFilter=True) as broker:
        hold = broker.broker.pull_processor.hold
        hold.unbind()  # the 5-s check of parked pulls off: only arrivals wake them here
        reads: list[int] = []
        read = hold._properties
        hold._properties = lambda phys: reads.append(phys) or read(phys)  # type: ignore[method-assign]
        async with await broker.client() as producer, await broker.client() as consumer:
            await _send_a(producer, 1)
            parked = asyncio.ensure_future(consumer.invoke(_sql92_pull(1, "a > 5", 30000), 30))
            await wait_for(lambda: hold.count == 1)
            await _send_a(producer, 2)
            await _send_a(producer, 3)
            assert hold.count == 1 and not parked.done()  # each send's answer follows its notify
            assert len(reads) == 2
            await _send_a(producer, 9)
            got = await parked
            assert got.code == ResponseCode.SUCCESS, got.remark
            assert [m.properties["a"] for m in iter_messages(got.body)] == ["9"]
            assert hold.count == 0
            # a TAG pull held on the queue: arrivals read no properties
            reads.clear()
            tag_pull = pull_cmd("PT", 4, sys_flag=FLAG_SUBSCRIPTION | FLAG_SUSPEND, sub="T", suspend_ms=30000)
            parked = asyncio.ensure_future(consumer.invoke(tag_pull, 30))
            await wait_for(lambda: hold.count == 1)
            await _send_a(producer, 4)
            got = await parked
            assert got.code == ResponseCode.SUCCESS and reads == []


def _sql92_heartbeat(expression: str, sub_version: int) -> RemotingCommand:
    sub = {"expressionType": "SQL92", "subString": expression, "subVersion": sub_version, "topic": "PT"}
    consumer = {"consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
                "groupName": "SG", "messageModel": "CLUSTERING", "subscriptionDataSet": [sub]}  # fmt: skip
    body = {"clientID": "cid@1", "consumerDataSet": [consumer], "producerDataSet": []}
    return RemotingCommand.request(R.HEART_BEAT, body=json.dumps(body).encode())


@async_test
async def test_filter_data_outlives_a_restart(tmp_path: Path) -> None:
    """The group's filter data is persisted: after a restart a heartbeat of the same subVersion
    revives it with the persisted expression (Java's register ignores the new text), and a pull
    without the subscription flag is filtered by it."""
    root = str(tmp_path / "store")
    async with LocalBroker(root, enablePropertyFilter=True) as broker, await broker.client() as c:
        assert (await c.invoke(_sql92_heartbeat("a > 5", 100))).code == ResponseCode.SUCCESS
        for a in (1, 9):
            await _send_a(c, a)
    async with LocalBroker(root, enablePropertyFilter=True) as broker, await broker.client() as c:
        plain = pull_cmd("PT", 0, group="SG", sys_flag=0, suspend_ms=0)
        assert (await c.invoke(plain)).code == ResponseCode.SUBSCRIPTION_NOT_EXIST  # no heartbeat yet
        data = broker.broker.consumers.filters.get("PT", "SG")
        assert data is not None and data.dead and data.expression == "a > 5"
        assert (await c.invoke(_sql92_heartbeat("a < 5", 100))).code == ResponseCode.SUCCESS
        got = await c.invoke(pull_cmd("PT", 0, group="SG", sys_flag=0, suspend_ms=0))
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert [m.properties["a"] for m in iter_messages(got.body)] == ["9"]
