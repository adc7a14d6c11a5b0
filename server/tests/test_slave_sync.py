"""A slave broker and its master on real sockets: the slave learns its master from the name server's
REGISTER_BROKER answers and copies topics, subscription groups, consumer and delay offsets from it
as 4.9.8's SlaveSynchronize does, including what happens to offsets committed to the slave while
the master is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmqgate.compat_tests.servers import free_broker_port
from rmqgate.server.client import RemotingClient
from rmqgate.server.jsonbody import loads_object
from rmqgate.server.testing import LocalBroker, LocalNamesrv, async_test, pull_cmd, wait_for
from rmqgate.store.meta import CONSUMER_OFFSETS, DELAY_OFFSETS, TOPICS
from rmqgate.wire.bodies import SubscriptionGroupConfig
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.codes import ResponseCode
from rmqgate.wire.command import RemotingCommand


def slave_of(root: Path, namesrv: str, **overrides: Any) -> LocalBroker:
    slave = LocalBroker(str(root), namesrvAddr=namesrv, brokerRole="SLAVE", brokerId=1, **overrides)
    sync = slave.broker.slave_synchronize
    assert sync is not None
    sync.initial_delay, sync.period = 0.0, 0.05  # (4.9.8: 3 s, then every 10 s)
    return slave


async def create_topic(c: RemotingClient, topic: str, queues: int = 4) -> None:
    ext = {
        "topic": topic,
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    }
    assert (await c.invoke(RemotingCommand.request(R.UPDATE_AND_CREATE_TOPIC, ext))).code == 0


async def create_group(c: RemotingClient, group: str, **fields: Any) -> None:
    body = SubscriptionGroupConfig(group_name=group, **fields).to_json()
    req = RemotingCommand.request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    assert (await c.invoke(req)).code == 0


async def commit(c: RemotingClient, group: str, topic: str, queue_id: int, offset: int) -> None:
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    assert (await c.invoke(RemotingCommand.request(R.UPDATE_CONSUMER_OFFSET, ext))).code == 0


async def query(c: RemotingClient, group: str, topic: str, queue_id: int) -> int:
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    resp = await c.invoke(RemotingCommand.request(R.QUERY_CONSUMER_OFFSET, ext))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return int(resp.ext_fields["offset"])


async def next_round(slave: LocalBroker, check: Callable[[], Any] = lambda: True) -> None:
    """Wait for a sync round that starts after now, then for ``check``."""
    sync = slave.broker.slave_synchronize
    assert sync is not None
    start = sync.rounds
    await wait_for(lambda: sync.rounds >= start + 2)
    await wait_for(check)


@async_test
async def test_slave_copies_master_metadata(tmp_path: Path) -> None:
    async with LocalNamesrv() as ns:
        master = LocalBroker(str(tmp_path / "m"), namesrvAddr=ns.addr)
        async with master:
            c = await master.client()
            await create_topic(c, "SyncT")
            await create_group(c, "SyncG", which_broker_when_consume_slowly=1, retry_max_times=3)
            await commit(c, "SyncG", "SyncT", 0, 5)
            await commit(c, "SyncG", "SyncT", 2, 7)
            master.store.meta.set_delay_offset(3, 11)
            master.broker.schedule.offsets[3] = 11  # (as the delay service records a delivery)

            slave = slave_of(tmp_path / "s", ns.addr)
            heard: list[str] = []
            slave.broker.master_ha_addr_listeners.append(heard.append)
            # a slave-only topic@group stays; an entry the master also has is replaced as a whole
            slave.store.meta.commit_offset("SlaveOnlyG", "SyncT", 0, 9)
            slave.store.meta.commit_offset("SyncG", "SyncT", 1, 99)
            slave.store.meta.set_delay_offset(5, 1)
            async with slave:
                m_addr = master.config.broker_addr
                assert slave.broker.master_addr == m_addr
                assert master.broker.ha_service is not None
                assert slave.broker.master_ha_addr == f"127.0.0.1:{master.broker.ha_service.port}"
                assert heard and set(heard) == {slave.broker.master_ha_addr}
                await next_round(slave)
                b = slave.broker
                assert b.topics.get("SyncT") == master.broker.topics.get("SyncT")
                assert b.topics.table == master.broker.topics.table
                assert b.topics.data_version == master.broker.topics.data_version
                assert b.store.meta.get(TOPICS, "SyncT") == master.broker.topics.get("SyncT")  # persisted
                assert b.subscription_groups.table["SyncG"]["retryMaxTimes"] == 3
                assert b.subscription_groups.data_version == master.broker.subscription_groups.data_version
                table = b.store.meta.offset_table()
                assert table["SyncT@SyncG"] == {0: 5, 2: 7}
                assert table["SyncT@SlaveOnlyG"] == {0: 9}
                assert dict(b.store.meta.items(CONSUMER_OFFSETS))["SyncT@SyncG"] == {"0": 5, "2": 7}
                assert b.store.meta.delay_offsets() == {3: 11}
                assert dict(b.store.meta.items(DELAY_OFFSETS)) == {"3": 11}
                # stored for the next start; GET_ALL_DELAY_OFFSET answers the delay service's own
                # table, here the empty one it started with (4.9.8 alike: its file is written)
                sc = await slave.client()
                answer = await sc.invoke(RemotingCommand.request(R.GET_ALL_DELAY_OFFSET))
                assert answer.code == 0 and answer.body == b'{"offsetTable":{}}'
                answer = await c.invoke(RemotingCommand.request(R.GET_ALL_DELAY_OFFSET))
                assert answer.body == b'{"offsetTable":{3:11}}'
                await sc.aclose()

                # changes on the master reach the slave by the next round
                await create_topic(c, "SyncT2", 2)
                await commit(c, "SyncG", "SyncT", 0, 6)
                await next_round(slave, lambda: b.topics.get("SyncT2") is not None)
                assert b.store.meta.query_offset("SyncG", "SyncT", 0) == 6
                # a slave's own group config (auto-created by a pull) goes when the master's version differs
                b.subscription_groups.find("OnlyOnSlave")
                # (not in the same millisecond: a DataVersion is its counter and timestamp, and both
                # sides counted one change since they were equal)
                await asyncio.sleep(0.01)
                await create_group(c, "SyncG2")
                await next_round(slave, lambda: "SyncG2" in b.subscription_groups.table)
                assert "OnlyOnSlave" not in b.subscription_groups.table
            await c.aclose()


@async_test
async def test_offsets_committed_to_slave_while_master_is_gone(tmp_path: Path) -> None:
    """4.9.8: UPDATE_CONSUMER_OFFSET to a slave is stored there; nothing is synced while the name
    server names no master; when the master is back its table is put over the slave's (the slave's
    newer offset is lost there) until the client commits its offsets to the master again."""
    async with LocalNamesrv() as ns:
        m_root = str(tmp_path / "m")
        port = free_broker_port()
        master = LocalBroker(m_root, namesrvAddr=ns.addr, listenPort=port)
        slave = slave_of(tmp_path / "s", ns.addr)
        await master.__aenter__()
        try:
            mc = await master.client()
            await create_topic(mc, "T")
            await commit(mc, "G", "T", 0, 5)
            await mc.aclose()
            async with slave:
                b = slave.broker
                await next_round(slave, lambda: b.store.meta.query_offset("G", "T", 0) == 5)
                await master.__aexit__()  # unregisters
                await b.register_all()
                assert b.master_addr is None
                sc = await slave.client()
                await commit(sc, "G", "T", 0, 50)
                assert await query(sc, "G", "T", 0) == 50
                rounds = b.slave_synchronize.rounds
                await asyncio.sleep(0.25)  # (five periods)
                assert b.slave_synchronize.rounds == rounds  # no master, no round

                master = LocalBroker(m_root, namesrvAddr=ns.addr, listenPort=port)
                await master.__aenter__()
                await b.register_all()
                assert b.master_addr == master.config.broker_addr
                await next_round(slave)
                assert await query(sc, "G", "T", 0) == 5  # the master's table won
                mc = await master.client()
                await commit(mc, "G", "T", 0, 50)  # what the client's offset store does next
                await mc.aclose()
                await next_round(slave, lambda: b.store.meta.query_offset("G", "T", 0) == 50)
                await sc.aclose()
        finally:
            await master.__aexit__()


@async_test
async def test_master_without_slave_and_unreachable_master(tmp_path: Path) -> None:
    """A master runs no sync and learns no master; a slave whose master does not answer keeps its
    tables and keeps trying."""
    async with LocalNamesrv() as ns:
        master = LocalBroker(str(tmp_path / "m"), namesrvAddr=ns.addr)
        async with master:
            assert master.broker.slave_synchronize is None and master.broker.master_addr is None
        slave = slave_of(tmp_path / "s", ns.addr)
        async with slave:
            b = slave.broker
            before = dict(b.topics.table)
            b.master_addr = "127.0.0.1:1"  # nothing listens there
            await next_round(slave)
            assert b.topics.table == before


@async_test
async def test_vip_channel_serves_all_but_pulls(tmp_path: Path) -> None:
    """Java's fastRemotingServer on listenPort - 2: a Java slave asks its master there for
    GET_ALL_TOPIC_CONFIG; PULL_MESSAGE is not served on it."""
    port = free_broker_port()
    async with LocalBroker(str(tmp_path / "m"), listenPort=port) as master:
        assert master.broker.vip_server is not None and master.broker.vip_server.port == port - 2
        vip = await RemotingClient.connect("127.0.0.1", port - 2)
        resp = await vip.invoke(RemotingCommand.request(R.GET_ALL_TOPIC_CONFIG))
        assert resp.code == ResponseCode.SUCCESS
        assert loads_object(resp.body)["topicConfigTable"].keys() == master.broker.topics.table.keys()
        resp = await vip.invoke(pull_cmd("TBW102", 0))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        await vip.aclose()


@async_test
async def test_fixed_ha_master_address_is_kept(tmp_path: Path) -> None:
    """haMasterAddress set: the registration answers' HA address is not taken (4.9.8's
    updateMasterHAServerAddrPeriodically is false), the master's remoting address still is."""
    async with LocalNamesrv() as ns, LocalBroker(str(tmp_path / "m"), namesrvAddr=ns.addr) as master:
        slave = slave_of(tmp_path / "s", ns.addr, haMasterAddress="127.0.0.1:1")
        heard: list[str] = []
        slave.broker.master_ha_addr_listeners.append(heard.append)
        async with slave:
            await slave.broker.register_all()
            assert slave.broker.master_ha_addr == "127.0.0.1:1" and heard == []
            assert slave.broker.master_addr == master.config.broker_addr
