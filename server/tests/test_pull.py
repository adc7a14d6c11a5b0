"""PULL_MESSAGE around replication: which broker the answer suggests (suggestWhichBrokerId), and
what a slave answers and commits, as 4.9.8's PullMessageProcessor does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rmqgate.server.testing import LocalBroker, async_test, pull_cmd, send_v2
from rmqgate.wire.bodies import SubscriptionGroupConfig
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.message import iter_messages

FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION = 1, 4


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
