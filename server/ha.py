"""HA replication of RocketMQ 4.9.8 (store/ha): the master's HAService and the slave's HAClient.

Master: an ``HAConnection`` per slave reads its max-offset reports (the first says where to start; 0:
the last CommitLog segment's start) and streams CommitLog bytes in frames of at most
haTransferBatchSize within a segment, heartbeats when idle; ``wait_for_replica`` is
GroupTransferService. Slave: ``HAClient`` reports its max offset, appends each frame at its own end
(another offset closes the connection, as in Java) and reconnects after a drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from typing import TYPE_CHECKING

from rmqgate.server.remoting import Pending
from rmqgate.store.api import PutMessageStatus, PutResult
from rmqgate.store.replica import AppendRefused, CommitLogAppender, read_commit_log
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.ha import (
    SlaveReportDecoder,
    TransferDecoder,
    encode_slave_report,
    encode_transfer_header,
)

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.config import BrokerConfig
    from rmqgate.store.message_store import DefaultMessageStore
    from rmqgate.wire.command import RemotingCommand

log = logging.getLogger("rmqgate.server.ha")

_PUT_OK = PutMessageStatus.PUT_OK
# an idle transfer looks for new CommitLog bytes this often (HAConnection's allWaitForRunning(100));
# a SYNC_MASTER put wakes the transfers at once
_POLL_INTERVAL = 0.1
# after a failed connect the slave tries again this much later (HAClient's waitForRunning(5000))
RECONNECT_INTERVAL = 5.0


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


class HAConnection:
    """One slave on the master: its reports read, CommitLog bytes written to it."""

    def __init__(
        self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.client_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self._requested = asyncio.Event()
        self.wake = asyncio.Event()

    async def run(self) -> None:
        read = asyncio.ensure_future(self._read_loop())
        write = asyncio.ensure_future(self._write_loop())
        try:
            await asyncio.wait((read, write), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (read, write):
                task.cancel()
            for task in (read, write):
                try:
                    await task
                except (asyncio.CancelledError, OSError, ConnectionError):
                    pass
                except Exception:  # a bug must not outlive the connection
                    log.exception("HA connection of slave[%s] failed", self.client_addr)
            self.writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.wait_closed()

    async def _read_loop(self) -> None:
        """ReadSocketService: the newest report is the slave's ack; silence past the housekeeping
        interval, or an ack beyond this CommitLog's end, closes the connection."""
        decoder = SlaveReportDecoder()
        service = self.service
        housekeeping = service.config.housekeeping_interval
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), housekeeping)
            except TimeoutError:
                log.warning("ha housekeeping, found this connection[%s] expired", self.client_addr)
                return
            if not data:
                return
            offset = decoder.feed(data)
            if offset is None:
                continue
            self.slave_ack_offset = offset
            if self.slave_request_offset < 0:
                self.slave_request_offset = offset
                self._requested.set()
                log.info("slave[%s] request offset %d", self.client_addr, offset)
            elif offset > service.store.get_max_phy_offset():
                log.warning(
                    "slave[%s] request offset=%d greater than local commitLog offset=%d",
                    self.client_addr, offset, service.store.get_max_phy_offset(),
                )  # fmt: skip
                return
            service.notify_transfer_some(offset)

    async def _write_loop(self) -> None:
        """WriteSocketService: from the slave's first report on, the CommitLog bytes it lacks."""
        await self._requested.wait()
        service = self.service
        store = service.store
        cfg = service.config
        if self.slave_request_offset == 0:
            master = store.get_max_phy_offset()
            next_offset = max(master - master % store.config.mapped_file_size_commitlog, 0)
        else:
            next_offset = self.slave_request_offset
        log.info(
            "master transfer data from %d to slave[%s], and slave request %d",
            next_offset, self.client_addr, self.slave_request_offset,
        )  # fmt: skip
        writer = self.writer
        last_write = time.monotonic()
        while True:
            data = read_commit_log(store, next_offset, cfg.transfer_batch_size)
            if data:
                writer.write(encode_transfer_header(next_offset, len(data)))
                writer.write(data)
                next_offset += len(data)
                await writer.drain()
                last_write = time.monotonic()
                continue
            if time.monotonic() - last_write > cfg.heartbeat_interval:
                writer.write(encode_transfer_header(next_offset, 0))
                await writer.drain()
                last_write = time.monotonic()
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), _POLL_INTERVAL)


class HAConfig:
    """The HA keys of broker.conf, in seconds and bytes."""

    def __init__(self, config: BrokerConfig) -> None:
        self.heartbeat_interval = config.haSendHeartbeatInterval / 1000.0
        self.housekeeping_interval = config.haHousekeepingInterval / 1000.0
        self.transfer_batch_size = config.haTransferBatchSize
        self.slave_fallbehind_max = config.haSlaveFallbehindMax
        self.sync_flush_timeout = config.syncFlushTimeout / 1000.0


class HAService:
    """The master's side: the HA listener, its connections and the SYNC_MASTER waits."""

    def __init__(self, config: BrokerConfig, store: DefaultMessageStore, host: str = "0.0.0.0") -> None:
        self.config = HAConfig(config)
        self.broker_config = config
        self.store = store
        self.host = host
        self.listen_port = -1  # known once started
        # listenPort 0 (any free port) makes the derived HA port any free one too, not the port above
        # wherever the broker lands, which another process may hold
        self._any_port = config.listenPort == 0 and config.haListenPort < 0
        self.connections: list[HAConnection] = []
        self.push2slave_max_offset = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # (offset the slave must reach, tiebreak, future) waits of SYNC_MASTER puts, lowest first
        self._waits: list[tuple[int, int, asyncio.Future[PutMessageStatus]]] = []
        self._seq = itertools.count()

    @property
    def port(self) -> int:
        return self.listen_port

    async def start(self) -> None:
        port = 0 if self._any_port else self.broker_config.ha_listen_port
        self._server = await asyncio.start_server(self._accept, self.host, port)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, _, fut in self._waits:
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._waits.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        log.info("HAService receive new connection, %s", conn.client_addr)
        self.connections.append(conn)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await conn.run()
        finally:
            self.connections.remove(conn)
            if task is not None:
                self._tasks.discard(task)

    # -- GroupTransferService --
    def is_slave_ok(self, master_put_where: int) -> bool:
        """``isSlaveOK``: a slave is connected and acknowledged within haSlaveFallbehindMax."""
        return bool(self.connections) and (
            master_put_where - self.push2slave_max_offset < self.config.slave_fallbehind_max
        )

    def notify_transfer_some(self, offset: int) -> None:
        if offset <= self.push2slave_max_offset:
            return
        self.push2slave_max_offset = offset
        waits = self._waits
        while waits and waits[0][0] <= offset:
            fut = heapq.heappop(waits)[2]
            if not fut.done():
                fut.set_result(_PUT_OK)

    def wakeup_all(self) -> None:
        for conn in self.connections:
            conn.wake.set()

    def wait_for_replica(self, next_offset: int) -> asyncio.Future[PutMessageStatus]:
        """Resolves with PUT_OK once a slave acknowledged ``next_offset``, with FLUSH_SLAVE_TIMEOUT
        after syncFlushTimeout."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()
        if self.push2slave_max_offset >= next_offset:
            fut.set_result(_PUT_OK)
            return fut
        heapq.heappush(self._waits, (next_offset, next(self._seq), fut))
        handle = loop.call_later(self.config.sync_flush_timeout, _time_out, fut)
        fut.add_done_callback(lambda _: handle.cancel())
        self.wakeup_all()
        return fut

    def handle_ha(self, result: PutResult) -> PutResult:
        """CommitLog.submitReplicaRequest for a SYNC_MASTER put whose producer waits for the store
        (PUT_OK): SLAVE_NOT_AVAILABLE at once, or the put with ``durable`` resolving once flushed
        (if flushed synchronously) and replicated, as ``thenCombine`` of the flush and replica
        futures: the replica's status where it is not PUT_OK, else the flush's."""
        end = result.physical_offset + result.wrote_bytes
        if not self.is_slave_ok(end):
            return result._replace(status=PutMessageStatus.SLAVE_NOT_AVAILABLE)
        durable = result.durable
        if durable is None:
            return result._replace(durable=self.wait_for_replica(end))
        loop = asyncio.get_running_loop()
        combined: asyncio.Future[PutMessageStatus] = loop.create_future()

        def flushed(f: asyncio.Future[PutMessageStatus]) -> None:
            flush_status = f.result()

            def replicated(r: asyncio.Future[PutMessageStatus]) -> None:
                if not combined.done():
                    status = r.result()
                    combined.set_result(status if status is not _PUT_OK else flush_status)

            self.wait_for_replica(end).add_done_callback(replicated)

        asyncio.wrap_future(durable).add_done_callback(flushed)
        return result._replace(durable=combined)


def answer_once_stored(
    broker: BrokerController, result: PutResult, response: RemotingCommand
) -> RemotingCommand | Pending:
    """``response`` to a request whose put Java's ``putMessage`` waits for (END_TRANSACTION's final
    message, CONSUMER_SEND_MSG_BACK): once the SYNC_FLUSH group commit and, on a SYNC_MASTER, the
    slave have it. These answer the same whether flush or slave timed out or no slave
    is there, as 4.9.8's do; only the moment follows the put."""
    if result.status is not _PUT_OK:
        return response
    ha = broker.ha_service
    if ha is not None and broker.config.brokerRole == "SYNC_MASTER":
        result = ha.handle_ha(result)
    if result.durable is None:
        return response
    return Pending(asyncio.wrap_future(result.durable), lambda _: response)


def _time_out(fut: asyncio.Future[PutMessageStatus]) -> None:
    if not fut.done():
        fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)


class HAClient:
    """The slave's side: one connection to the master's HA port at a time, kept up."""

    def __init__(self, config: BrokerConfig, store: DefaultMessageStore) -> None:
        self.config = HAConfig(config)
        self.store = store
        self.master_ha_addr: str | None = None
        self._addr_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self.connects = 0  # connections made (observable for tests)
        self.reported_offset = -1

    def set_master_ha_addr(self, addr: str | None) -> None:
        """``updateHaMasterAddress``: where to connect from now on (a change drops the connection)."""
        if addr == self.master_ha_addr:
            return
        log.info("update master address, OLD: %s NEW: %s", self.master_ha_addr, addr)
        self.master_ha_addr = addr
        self._addr_changed.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            addr = self.master_ha_addr
            self._addr_changed.clear()
            if not addr:
                await self._sleep(RECONNECT_INTERVAL)
                continue
            try:
                host, port = _split_addr(addr)
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 3.0)
            except (OSError, ValueError, TimeoutError) as exc:
                log.debug("HAClient cannot connect to %s: %s", addr, exc)
                await self._sleep(RECONNECT_INTERVAL)
                continue
            self.connects += 1
            self.connected = True
            failed = False
            try:
                await self._session(reader, writer)
            except (OSError, ConnectionError) as exc:
                log.warning("HAClient, connection to master %s lost: %s", addr, exc)
            except Exception:  # (a bug: the client keeps going, from a new connection)
                log.exception("HAClient, connection to master %s failed", addr)
                failed = True
            finally:
                self.connected = False
                writer.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await writer.wait_closed()
            if failed:
                await self._sleep(RECONNECT_INTERVAL)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._addr_changed.wait(), seconds)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        store = self.store
        cfg = self.config
        decoder = TransferDecoder()
        appender = CommitLogAppender(store)
        self.reported_offset = store.get_max_phy_offset()
        writer.write(encode_slave_report(self.reported_offset))
        await writer.drain()
        last_report = last_read = time.monotonic()
        addr_changed = self._addr_changed
        while not addr_changed.is_set():
            now = time.monotonic()
            wait = min(last_report + cfg.heartbeat_interval, last_read + cfg.housekeeping_interval) - now
            try:
                data = await asyncio.wait_for(reader.read(1 << 20), max(wait, 0.001))
            except TimeoutError:
                data = None
            now = time.monotonic()
            if data is not None:
                if not data:
                    log.warning("HAClient, processReadEvent read socket < 0")
                    return
                last_read = now
                try:
                    frames = decoder.feed(data)
                except MessageFormatError as exc:
                    log.warning("HAClient, dispatchReadRequest error: %s", exc)
                    return
                for master_offset, body in frames:
                    slave_offset = store.get_max_phy_offset()
                    if slave_offset != 0 and slave_offset != master_offset:
                        log.error(
                            "master pushed offset not equal the max phy offset in slave, SLAVE: %d MASTER: %d",
                            slave_offset, master_offset,
                        )  # fmt: skip
                        return
                    if body:
                        try:
                            appender.append(master_offset, body)
                        except AppendRefused as exc:
                            log.error("HAClient, append at %d refused: %s", master_offset, exc)
                            return
                    current = store.get_max_phy_offset()
                    if current > self.reported_offset:
                        self.reported_offset = current
                        writer.write(encode_slave_report(current))
                        last_report = now
                await writer.drain()
            if now - last_report > cfg.heartbeat_interval:
                writer.write(encode_slave_report(self.reported_offset))
                await writer.drain()
                last_report = now
            if now - last_read > cfg.housekeeping_interval:
                log.warning("HAClient, housekeeping, found this connection[%s] expired", self.master_ha_addr)
                return
