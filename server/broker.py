"""BrokerController: the store, the topic/group/client tables, one processor per request family, the
name-server registration loop (at start, every registerNameServerPeriod, at once after topic changes)
and the client-channel expiry scan.

Further processors plug into ``extra_processors`` (transactions: END_TRANSACTION;
retry: CONSUMER_SEND_MSG_BACK); anything unregistered answers REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rmqgate.server import acl, acl_admin, consumer_filter, ha, locks, schedule, sendback, transaction
from rmqgate.server.admin import AdminBrokerProcessor
from rmqgate.server.client import RemotingClient
from rmqgate.server.config import BrokerConfig, parse_properties_text
from rmqgate.server.consumer import (
    ClientManageProcessor,
    ConsumerManageProcessor,
    ConsumerManager,
    ProducerManager,
)
from rmqgate.server.namesrv import encode_register_body
from rmqgate.server.offsets import OffsetProcessor
from rmqgate.server.pull import PullMessageProcessor
from rmqgate.server.query import QueryMessageProcessor
from rmqgate.server.remoting import Channel, RemotingServer, RequestProcessor, cancel_and_wait
from rmqgate.server.reply import ReplyMessageProcessor
from rmqgate.server.send import SendMessageProcessor
from rmqgate.server.slave_sync import SlaveSynchronize
from rmqgate.server.stats import BrokerStats
from rmqgate.server.topics import PERM_RW, SubscriptionGroupManager, TopicConfigManager, topic_config
from rmqgate.store.api import MessageStore, open_store
from rmqgate.wire.bodies import KVTable
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import BodyError

if TYPE_CHECKING:
    from rmqgate.server.metrics import MetricsServer

log = logging.getLogger("rmqgate.server.broker")


class BrokerController:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore | None = None,
        *,
        listen_host: str = "0.0.0.0",
        idle_timeout: float | None = None,
        extra_processors: Iterable[RequestProcessor] = (),
        scan_interval: float = 10.0,
        config_path: str | None = None,
        acl_file: str | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path  # broker.conf: UPDATE_BROKER_CONFIG writes the config back
        self.store = store if store is not None else open_store(config.store_config())
        # a slave's store takes no puts: no delayed delivery, no transaction check-backs (as Java's)
        self.slave = self.store.config.slave
        self.topics = TopicConfigManager(config, self.store.meta)
        self.subscription_groups = SubscriptionGroupManager(config, self.store.meta)
        self.consumers = ConsumerManager(self.notify_consumer_ids_changed)
        self.consumers.filters.load(self.store.meta, consumer_filter.clean_time_span(config.extra))
        self.producers = ProducerManager()
        self.locks = locks.RebalanceLockManager(locks.lock_max_live_time(config))
        self.transactions = transaction.TransactionalMessageService(self)
        self.schedule = schedule.ScheduleMessageService(self)
        self.stats = BrokerStats(self.store, config.brokerClusterName)
        self.topics.on_change = self.request_register
        # HA: a master's listener for its slaves, a slave's client of its master (server/ha.py)
        self.ha_service = None if self.slave else ha.HAService(config, self.store, listen_host)
        self.ha_client = ha.HAClient(config, self.store) if self.slave else None
        self.send_processor = SendMessageProcessor(self)
        self.pull_processor = PullMessageProcessor(self)
        self.admin_processor = AdminBrokerProcessor(self)
        processors: list[RequestProcessor] = [
            self.send_processor,
            self.pull_processor,
            ClientManageProcessor(self),
            ConsumerManageProcessor(self),
            locks.LockProcessor(self),
            OffsetProcessor(self),
            QueryMessageProcessor(self),
            ReplyMessageProcessor(self),
            self.admin_processor,
            transaction.EndTransactionProcessor(self),
            sendback.ConsumerSendMsgBackProcessor(self),
            *extra_processors,
        ]
        # ACL on: every processor behind the validator (off: nothing in the request path)
        self.acl: acl.PlainAccessValidator | None = None
        if config.aclEnable:
            self.acl = acl.PlainAccessValidator(acl_file or acl.default_acl_file())
            processors.append(acl_admin.AclAdminProcessor(self, self.acl))
            processors = acl.guard(processors, self.acl)
        self.server = RemotingServer(
            listen_host,
            config.listenPort,
            processors,
            idle_timeout=config.serverChannelMaxIdleTimeSeconds if idle_timeout is None else idle_timeout,
            name="broker",
            fallback=None if self.acl is None else acl.guarded_unknown_codes(self.acl),
        )
        self.vip_server: RemotingServer | None = None
        self.scan_interval = scan_interval
        self._namesrv_clients: dict[str, RemotingClient] = {}
        self._register_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.registered: dict[str, int] = {}  # namesrv addr -> number of successful registrations
        # a slave's master, from the name server's REGISTER_BROKER answers (doRegisterBrokerAll):
        # master_addr (remoting; SlaveSynchronize reads it) and master_ha_addr (HA), which the
        # listeners hear of whenever an answer names one, unless haMasterAddress fixes it
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = config.haMasterAddress or None
        self.update_master_ha_addr_periodically = self.slave and not self.master_ha_addr
        self.master_ha_addr_listeners: list[Callable[[str], None]] = []
        self.slave_synchronize = SlaveSynchronize(self) if self.slave else None
        if self.ha_client is not None:
            self.ha_client.set_master_ha_addr(self.master_ha_addr)
            self.master_ha_addr_listeners.append(self.ha_client.set_master_ha_addr)
        self.metrics: MetricsServer | None = None
        if config.metricsPort:  # (off: nothing in the request path)
            from rmqgate.server.metrics import MetricsServer

            self.metrics = MetricsServer([self], config.metricsPort, listen_host)
            self.metrics.install()

    # -- lifecycle --
    def persist_config(self, updated: dict[str, str]) -> None:
        """Keys UPDATE_BROKER_CONFIG set, written into the broker.conf the broker started with (none
        given: nothing is written), so they outlive a restart as Java's ``Configuration.persist``
        makes them. Java writes every key; here the file keeps its other keys as they were, so a
        value rmqgate derived at start (the embedded name server's address) is not pinned."""
        if self.config_path is None:
            return
        tmp = f"{self.config_path}.tmp"
        try:
            with open(self.config_path, encoding="utf-8") as f:
                props = parse_properties_text(f.read()) | updated
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("".join(f"{k}={v}\n" for k, v in props.items()))
            os.replace(tmp, self.config_path)
        except OSError as exc:  # (Java logs it; the update stays applied)
            log.error("could not write the broker config back to %s: %s", self.config_path, exc)

    async def start(self) -> None:
        await self.server.start()
        if self.config.listenPort != 0:
            await self._start_vip_channel(self.config.listenPort - 2)
        if self.config.listenPort == 0:  # ephemeral port (tests): advertise the real one
            self.config.listenPort = self.server.port
            self.store.config.store_port = self.server.port
        if self.ha_service is not None:
            await self.ha_service.start()
        if self.ha_client is not None:
            self.ha_client.start()
        loop = asyncio.get_running_loop()
        c = self.config
        self.pull_processor.hold.bind(loop, 5.0 if c.longPollingEnable else c.shortPollingTimeMills / 1000.0)
        if self.slave_synchronize is not None:
            self._tasks.append(loop.create_task(self.slave_synchronize.run()))
        await self.register_all()
        self._tasks.append(loop.create_task(self._register_loop()))
        if not self.slave:
            self.transactions.start()
            self.schedule.start()
        self._tasks.append(loop.create_task(self._scan_loop()))
        self._tasks.append(loop.create_task(self._stats_loop()))
        if self.acl is not None:
            self.acl.start()
        if self.metrics is not None:
            self.metrics.start()

    async def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self.slave_synchronize is not None:
            self.slave_synchronize.close()
        if self.acl is not None:
            await self.acl.stop()
        await self.schedule.stop()
        await self.transactions.stop()
        self.pull_processor.stop()
        await self.unregister_all()
        for client in self._namesrv_clients.values():
            client.close()
        self._namesrv_clients.clear()
        if self.ha_client is not None:
            await self.ha_client.stop()
        if self.ha_service is not None:
            await self.ha_service.stop()
        if self.vip_server is not None:
            await self.vip_server.stop()
        await self.server.stop()
        self.store.shutdown()

    @property
    def port(self) -> int:
        return self.server.port

    async def _start_vip_channel(self, port: int) -> None:
        """Java's second listener (fastRemotingServer, listenPort - 2) with every request but pulls: a
        Java slave asks its master's for GET_ALL_TOPIC_CONFIG, and clients with vipChannelEnabled
        send there. A port already taken is logged and the broker runs without it."""
        if port <= 0:
            return
        vip = RemotingServer(
            self.server.host,
            port,
            (),
            idle_timeout=self.server.idle_timeout,
            name="broker-vip",
            fallback=self.server.fallback,
        )
        pulls = {int(c) for c in PullMessageProcessor.codes}
        vip.table.update({c: p for c, p in self.server.table.items() if c not in pulls})
        try:
            await vip.start()
        except OSError as exc:
            log.warning("VIP channel port %d not opened: %s", port, exc)
            return
        self.vip_server = vip

    # -- clients --
    def watch_channel(self, channel: Channel) -> None:
        """Drop a client's producer/consumer registrations when its connection closes."""
        if channel.attrs.get("broker_watch"):
            return
        channel.attrs["broker_watch"] = True
        channel.add_close_listener(self._channel_closed)

    def _channel_closed(self, channel: Channel) -> None:
        self.consumers.channel_closed(channel)
        self.producers.channel_closed(channel)

    def notify_consumer_ids_changed(self, group: str, channels: list[Channel]) -> None:
        if not self.config.notifyConsumerIdsChangedEnable:  # for every change: join, leave, close
            return
        for channel in channels:
            if not channel.closed:
                channel.send_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
                )

    def check_transaction_state(self, producer_group: str, ext: dict[str, str], body: bytes) -> bool:
        """Send CHECK_TRANSACTION_STATE (oneway, its own opaque) to a live producer of the group
        (the transaction check service uses this). False when no producer is connected."""
        channel = self.producers.any_channel(producer_group)
        if channel is None:
            return False
        channel.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, body))
        return True

    async def _scan_loop(self) -> None:
        timeout = self.config.channelExpiredTimeout / 1000.0
        while True:
            await asyncio.sleep(self.scan_interval)
            try:
                self.consumers.scan_expired(timeout)
                self.producers.scan_expired(timeout)
            except Exception:
                log.exception("client channel scan failed")

    async def _stats_loop(self) -> None:
        while True:
            try:
                self.stats.sample()
            except Exception:
                log.exception("stats sampling failed")
            await asyncio.sleep(1.0)

    # -- name server registration --
    def request_register(self) -> None:
        self._register_now.set()

    async def _register_loop(self) -> None:
        period = max(10.0, min(self.config.registerNameServerPeriod / 1000.0, 60.0))
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._register_now.wait(), period)
            self._register_now.clear()
            await self.register_all()

    def _header(self) -> dict[str, str]:
        c = self.config
        return {
            "brokerName": c.brokerName,
            "brokerAddr": c.broker_addr,
            "clusterName": c.brokerClusterName,
            "brokerId": str(c.brokerId),
        }

    async def _client(self, addr: str) -> RemotingClient:
        client = self._namesrv_clients.get(addr)
        if client is None or client.closed:
            client = await RemotingClient.connect_addr(addr)
            self._namesrv_clients[addr] = client
        return client

    async def register_all(self) -> None:
        addrs = self.config.namesrv_addrs
        if not addrs:
            return
        c = self.config
        table = self.topics.wrapper()["topicConfigTable"]
        if c.brokerPermission & PERM_RW != PERM_RW:  # read-only / write-only: every topic says so
            table = {
                name: topic_config(name, tc["readQueueNums"], tc["writeQueueNums"], c.brokerPermission)
                for name, tc in table.items()
            }
        body = encode_register_body(
            table,
            self.topics.data_version,
            [],
            compressed=c.compressedRegister,
        )
        ext = self._header()
        ha_port = self.ha_service.port if self.ha_service is not None else c.ha_listen_port
        ext["haServerAddr"] = f"{c.brokerIP2 or c.brokerIP1}:{ha_port}"
        ext["compressed"] = "true" if c.compressedRegister else "false"
        ext["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)
        timeout = c.registerBrokerTimeoutMills / 1000.0
        answers = await asyncio.gather(*(self._register_one(addr, ext, body, timeout) for addr in addrs))
        # the first answer's ORDER_TOPIC_CONFIG table, if it has one, says which topics are order
        # topics (doRegisterBrokerAll's updateOrderTopicConfig)
        answer = next((a for a in answers if a is not None), None)
        if answer is not None:
            self._take_master_addrs(answer.ext_fields or {})
        if answer is not None and answer.body is not None:
            try:
                order_topics = KVTable.from_json(answer.body).table
            except BodyError as exc:
                log.warning("name server's order topic table ignored: %s", exc)
            else:
                self.topics.update_order_topic_config(order_topics)

    def _take_master_addrs(self, ext: dict[str, str]) -> None:
        """RegisterBrokerResult: the HA address when the answer has one (a slave that was not given
        haMasterAddress), and the master's remoting address as it is (none: SlaveSynchronize idles)."""
        ha = ext.get("haServerAddr")
        if self.update_master_ha_addr_periodically and ha:
            if ha != self.master_ha_addr:
                log.info("master HA address: %s", ha)
            self.master_ha_addr = ha
            for listener in list(self.master_ha_addr_listeners):
                try:
                    listener(ha)
                except Exception:
                    log.exception("master HA address listener failed")
        self.master_addr = ext.get("masterAddr") or None

    async def _register_one(
        self, addr: str, ext: dict[str, str], body: bytes, timeout: float
    ) -> RemotingCommand | None:
        try:
            client = await self._client(addr)
            resp = await client.invoke(
                RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body), timeout
            )
        except (OSError, TimeoutError, ConnectionError) as exc:
            log.warning("register to name server %s failed: %s", addr, exc)
            return None
        if resp.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s %s", addr, resp.code, resp.remark)
            return None
        self.registered[addr] = self.registered.get(addr, 0) + 1
        return resp

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER to every name server, connecting again where the connection is gone
        (Java's unregisterBrokerAll): else the route outlives the broker for the 120 s expiry."""
        for addr in self.config.namesrv_addrs:
            try:
                client = await asyncio.wait_for(self._client(addr), 3.0)
                await client.invoke(
                    RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._header()), 3.0
                )
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.warning("unregister from name server %s failed: %s", addr, exc)
