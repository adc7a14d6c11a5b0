"""SlaveSynchronize: a slave copies its master's metadata on 4.9.8's schedule (3 s after start, then
every 10 s): GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG from the master's remoting address (REGISTER_BROKER's ``masterAddr``).

As in Java, topics and subscription groups are replaced only when the master's data version differs
(the version is taken with them), the master's consumer offsets are put over the slave's entry by
entry (topic@group keys only the slave has stay), and the delay offsets replace the slave's. A failed
request is logged and the next one runs; nothing is synced while no master is known.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from rmqgate.server.client import RemotingClient
from rmqgate.store.meta import CONSUMER_OFFSETS, DELAY_OFFSETS
from rmqgate.wire.bodies import (
    ConsumerOffsetSerializeWrapper,
    DelayOffsetSerializeWrapper,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import BodyError

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.slave_sync")

#: BrokerOuterAPI's timeout for each of the four requests
TIMEOUT = 3.0


class SyncError(Exception):
    """The master refused a request or answered what cannot be read."""


def _version(version: dict[str, int]) -> tuple[int, int]:
    return int(version.get("counter", 0)), int(version.get("timestamp", 0))


class _VersionedTable(Protocol):
    """TopicConfigManager and SubscriptionGroupManager: a table replaced whole with its DataVersion."""

    @property
    def data_version(self) -> dict[str, int]: ...

    def replace_all(self, table: dict[str, dict[str, Any]], version: dict[str, int]) -> None: ...


def _replace_if_changed(
    manager: _VersionedTable, version: dict[str, int], entries: Mapping[str, Any]
) -> bool:
    """Java's check: the master's table (entries' to_obj) replaces the slave's only when its data
    version differs; whether it did."""
    if _version(manager.data_version) == _version(version):
        return False
    manager.replace_all({name: entry.to_obj() for name, entry in entries.items()}, version)
    return True


class SlaveSynchronize:
    def __init__(self, broker: BrokerController, initial_delay: float = 3.0, period: float = 10.0) -> None:
        self.broker = broker
        self.initial_delay = initial_delay
        self.period = period
        self.rounds = 0  # sync rounds run with a master known (tests wait on it)
        self._client: RemotingClient | None = None
        self._client_addr: str | None = None

    async def run(self) -> None:
        """The scheduled task (``scheduleAtFixedRate``: a slow round delays the next one, no overlap)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + self.initial_delay
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            try:
                await self.sync_all()
            except Exception:
                log.exception("slave synchronize round failed")
            due = max(due + self.period, loop.time())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def sync_all(self) -> None:
        master = self.broker.master_addr
        if not master or master == self.broker.config.broker_addr:
            return
        for name, step in (
            ("topic config", self.sync_topic_config),
            ("consumer offset", self.sync_consumer_offset),
            ("delay offset", self.sync_delay_offset),
            ("subscription group", self.sync_subscription_group_config),
        ):
            try:
                await step(master)
            except (OSError, TimeoutError, ConnectionError, SyncError, BodyError) as exc:
                log.error("sync %s from master %s failed: %s", name, master, exc)
        self.rounds += 1

    async def _invoke(self, master: str, code: int) -> bytes:
        client = self._client
        if client is None or client.closed or self._client_addr != master:
            self.close()
            client = self._client = await RemotingClient.connect_addr(master, timeout=TIMEOUT)
            self._client_addr = master
        resp: RemotingCommand = await client.invoke(RemotingCommand.request(code), TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise SyncError(f"request {code} answered {resp.code}: {resp.remark}")
        if resp.body is None:
            raise SyncError(f"request {code} answered no body")
        return bytes(resp.body)

    async def sync_topic_config(self, master: str) -> None:
        body = await self._invoke(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        wrapper = TopicConfigSerializeWrapper.from_json(body)
        version = wrapper.data_version.to_obj()
        if _replace_if_changed(self.broker.topics, version, wrapper.topic_config_table):
            log.info("Update slave topic config from master, %s", master)

    async def sync_consumer_offset(self, master: str) -> None:
        body = await self._invoke(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table = ConsumerOffsetSerializeWrapper.from_json(body).offset_table
        if table:
            self.broker.store.meta.put_many(CONSUMER_OFFSETS, {k: dict(v) for k, v in table.items()})
        log.info("Update slave consumer offset from master, %s", master)

    async def sync_delay_offset(self, master: str) -> None:
        # Java writes the master's delayOffset.json text over its own file
        body = await self._invoke(master, RequestCode.GET_ALL_DELAY_OFFSET)
        offsets = DelayOffsetSerializeWrapper.from_json(body).offset_table
        table = {str(level): offset for level, offset in offsets.items()}
        self.broker.store.meta.put_many(DELAY_OFFSETS, table, replace=True)
        log.info("Update slave delay offset from master, %s", master)

    async def sync_subscription_group_config(self, master: str) -> None:
        body = await self._invoke(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        wrapper = SubscriptionGroupWrapper.from_json(body)
        version = wrapper.data_version.to_obj()
        if _replace_if_changed(self.broker.subscription_groups, version, wrapper.subscription_group_table):
            log.info("Update slave Subscription Group from master, %s", master)
