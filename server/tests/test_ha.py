"""HA replication between two rmqgate brokers over real sockets and real stores: what a master
writes reaches the slave's CommitLog byte for byte and its ConsumeQueues at the same queue offsets;
an empty slave begins where 4.9.8's master begins it; a frame at the wrong offset drops the
connection; SYNC_MASTER sends wait for the slave; either side restarts and replication resumes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rmqgate.server import ha
from rmqgate.server.namesrv import NamesrvController
from rmqgate.server.remoting import RemotingServer
from rmqgate.server.testing import LocalBroker, async_test, pull_cmd, send_v2, wait_for
from rmqgate.server.tests.test_sendback import send_back
from rmqgate.server.topics import topic_config
from rmqgate.wire import ResponseCode
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.ha import SLAVE_REPORT, TransferDecoder, encode_transfer_header
from rmqgate.wire.message import decode_offset_msg_id, iter_messages
from rmqgate.wire.message_batch import BatchEntry, encode_batch

SEGMENT = 1 << 20  # small_store's CommitLog segment size


def master_conf(**overrides: object) -> dict[str, object]:
    return {"brokerName": "ha-t", "haListenPort": 0, **overrides}


def slave_conf(master: LocalBroker | int, **overrides: object) -> dict[str, object]:
    port = master if isinstance(master, int) else master.broker.ha_service.port
    return {
        "brokerName": "ha-t",
        "brokerRole": "SLAVE",
        "brokerId": 1,
        "haMasterAddress": f"127.0.0.1:{port}",
        **overrides,
    }


def commitlog_bytes(b: LocalBroker, start: int, end: int) -> bytes:
    q = b.store.commitlog.queue
    out = bytearray()
    pos = start
    while pos < end:
        f = q.find_mapped_file_by_offset(pos)
        assert f is not None, pos
        stop = min(end, f.end_offset)
        out += f.buf[pos - f.file_from_offset : stop - f.file_from_offset]
        pos = stop
    return bytes(out)


async def caught_up(master: LocalBroker, slave: LocalBroker) -> None:
    await wait_for(lambda: slave.store.get_max_phy_offset() == master.store.get_max_phy_offset())


async def pulled(b: LocalBroker, topic: str, queue_id: int, offset: int = 0) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message of one queue from ``offset``, pulled over the wire. A
    slave is given the topic's config here (SlaveSynchronize copies it from a master with a name
    server; these tests run none)."""
    if b.broker.slave and b.broker.topics.get(topic) is None:
        b.broker.topics.put(topic_config(topic, 8, 8, 6), notify=False)
    c = await b.client()
    out: list[tuple[int, bytes]] = []
    try:
        while True:
            resp = await c.invoke(pull_cmd(topic, offset, queue_id=queue_id, suspend_ms=0))
            if resp.code != ResponseCode.SUCCESS:
                return out
            msgs = list(iter_messages(resp.body))
            out += [(m.queue_offset, bytes(m.body)) for m in msgs]
            offset = int(resp.ext_fields["nextBeginOffset"])
    finally:
        await c.aclose()


async def send_many(b: LocalBroker, topic: str, n: int, size: int, queues: int = 2) -> None:
    c = await b.client()
    for i in range(n):
        body = f"{i:06d}".encode() * (size // 6)
        resp = await c.invoke(send_v2(topic, body, queue_id=i % queues))
        assert resp.code == ResponseCode.SUCCESS, resp
    await c.aclose()


@async_test
async def test_a_slave_holds_the_masters_commitlog_and_queues(tmp_path: Path) -> None:
    """1.5 MiB over two segments: the slave's CommitLog is the master's byte for byte (the BLANK
    end of the first segment included) and pulls from the slave answer the master's queue offsets."""
    async with (
        LocalBroker(str(tmp_path / "m"), **master_conf()) as master,
        LocalBroker(str(tmp_path / "s"), **slave_conf(master)) as slave,
    ):
        await wait_for(lambda: master.broker.ha_service.connections)
        await send_many(master, "HA", 48, 32 * 1024)
        await caught_up(master, slave)
        end = master.store.get_max_phy_offset()
        assert end > SEGMENT and len(slave.store.commitlog.queue.files) == 2
        assert commitlog_bytes(slave, 0, end) == commitlog_bytes(master, 0, end)
        for q in range(2):
            got = await pulled(slave, "HA", q)
            assert got == await pulled(master, "HA", q)
            assert [off for off, _ in got] == list(range(24))
        # the master counts what the slave acknowledged
        await wait_for(lambda: master.broker.ha_service.push2slave_max_offset == end)


@async_test
async def test_an_empty_slave_begins_at_the_start_of_the_masters_last_segment(tmp_path: Path) -> None:
    """HAConnection: a slave reporting offset 0 is sent the master's last CommitLog segment from its
    start; its queues begin at the queue offsets of the messages there."""
    async with LocalBroker(str(tmp_path / "m"), **master_conf()) as master:
        await send_many(master, "LATE", 40, 32 * 1024, queues=1)
        end = master.store.get_max_phy_offset()
        assert SEGMENT < end < 2 * SEGMENT
        async with LocalBroker(str(tmp_path / "s"), **slave_conf(master)) as slave:
            await caught_up(master, slave)
            assert slave.store.get_min_phy_offset() == SEGMENT
            assert commitlog_bytes(slave, SEGMENT, end) == commitlog_bytes(master, SEGMENT, end)
            on_master = await pulled(master, "LATE", 0)
            first = next(
                i
                for i, _ in on_master
                if master.store.get_commit_log_offset_in_queue("LATE", 0, i) >= SEGMENT
            )
            assert first > 0
            assert slave.store.get_min_offset_in_queue("LATE", 0) == first
            assert await pulled(slave, "LATE", 0, first) == on_master[first:]


class FakeMaster:
    """An HA listener that answers each connection's first report with a heartbeat frame at the
    reported offset plus ``skew`` (skew 0 on later connections), and records the reports."""

    def __init__(self, skew: int) -> None:
        self.skew = skew
        self.reports: list[list[int]] = []
        self.closed_by_slave: list[bool] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reports: list[int] = []
        self.reports.append(reports)
        skew = self.skew if len(self.reports) == 1 else 0
        try:
            first = await reader.readexactly(8)
            reports.append(SLAVE_REPORT.unpack(first)[0])
            writer.write(encode_transfer_header(reports[0] + skew, 0))
            await writer.drain()
            while data := await reader.read(8):
                reports.append(SLAVE_REPORT.unpack(data)[0])
            self.closed_by_slave.append(True)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_slave.append(True)
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[int]:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        try:
            yield self.server.sockets[0].getsockname()[1]
        finally:
            self.server.close()


@async_test
async def test_a_frame_at_another_offset_closes_the_connection_and_the_slave_reconnects(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "s")
    async with LocalBroker(root) as writer:  # the slave's store is not empty: offsets are checked
        await send_many(writer, "X", 3, 100, queues=1)
        held = writer.store.get_max_phy_offset()
    fake = FakeMaster(skew=100)
    async with (
        fake.running() as port,
        LocalBroker(root, **slave_conf(port, haSendHeartbeatInterval=200)) as slave,
    ):
        await wait_for(lambda: len(fake.reports) >= 2 and len(fake.reports[1]) >= 2)
        assert fake.closed_by_slave[:1] == [True]  # the first connection: closed by the slave
        assert fake.reports[0] == [held]
        assert set(fake.reports[1]) == {held}  # reported again on connect and at the heartbeat
        assert slave.broker.ha_client.connects >= 2
        assert slave.store.get_max_phy_offset() == held


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@async_test
async def test_sync_master_answers_once_the_slave_has_the_message(tmp_path: Path, flush: str) -> None:
    conf = master_conf(brokerRole="SYNC_MASTER", syncFlushTimeout=400, flushDiskType=flush)
    async with LocalBroker(str(tmp_path / "m"), **conf) as master:
        c = await master.client()
        resp = await c.invoke(send_v2("SYNC", b"nobody"))
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, resp
        assert resp.ext_fields["queueOffset"] == "0"  # stored all the same, as 4.9.8 does
        async with LocalBroker(str(tmp_path / "s"), **slave_conf(master)) as slave:
            await wait_for(lambda: master.broker.ha_service.connections)
            for i in range(3):
                resp = await c.invoke(send_v2("SYNC", f"m{i}".encode()))
                assert resp.code == ResponseCode.SUCCESS, resp
                # answered only once the slave had it
                assert slave.store.get_max_phy_offset() == master.store.get_max_phy_offset()
            entries = [BatchEntry(body=b, properties={"UNIQ_KEY": b.decode()}) for b in (b"b1", b"b2")]
            req = send_v2("SYNC", encode_batch(entries))
            req.code = RequestCode.SEND_BATCH_MESSAGE
            req.ext_fields["m"] = "true"
            resp = await c.invoke(req)
            assert resp.code == ResponseCode.SUCCESS, resp
            assert slave.store.get_max_phy_offset() == master.store.get_max_phy_offset()
            assert [b for _, b in await pulled(slave, "SYNC", 0)] == [
                b"nobody",
                b"m0",
                b"m1",
                b"m2",
                b"b1",
                b"b2",
            ]
        await c.aclose()


@async_test
async def test_sync_master_times_out_when_the_slave_stops_acknowledging(tmp_path: Path) -> None:
    """A slave that reported once and then stays silent: FLUSH_SLAVE_TIMEOUT after syncFlushTimeout
    (SYNC_FLUSH's group commit too); a send that does not wait for the store is answered at once."""
    conf = master_conf(brokerRole="SYNC_MASTER", syncFlushTimeout=300, flushDiskType="SYNC_FLUSH")
    async with LocalBroker(str(tmp_path / "m"), **conf) as master:
        reader, writer = await asyncio.open_connection("127.0.0.1", master.broker.ha_service.port)
        writer.write(SLAVE_REPORT.pack(0))
        await writer.drain()
        await wait_for(lambda: master.broker.ha_service.connections)
        c = await master.client()
        resp = await c.invoke(send_v2("SILENT", b"x"))
        assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, resp
        no_wait = send_v2("SILENT", b"y", extra={"i": "WAIT\x01false\x02"})
        assert (await c.invoke(no_wait)).code == ResponseCode.SUCCESS
        # the silent slave was streamed the bytes all the same
        header = await reader.readexactly(12)
        assert header[:8] == bytes(8)
        writer.close()
        await wait_for(lambda: not master.broker.ha_service.connections)
        resp = await c.invoke(send_v2("SILENT", b"z"))
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, resp
        await c.aclose()


@async_test
async def test_replication_resumes_after_either_side_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ha, "RECONNECT_INTERVAL", 0.2)
    m_root, s_root = str(tmp_path / "m"), str(tmp_path / "s")
    async with LocalBroker(m_root, **master_conf()) as master:
        port = master.broker.ha_service.port
        async with LocalBroker(s_root, **slave_conf(master)) as slave:
            await send_many(master, "R", 4, 1000)
            await caught_up(master, slave)
        await send_many(master, "R", 4, 1000)  # while the slave is down
        async with LocalBroker(s_root, **slave_conf(master)) as slave:
            await caught_up(master, slave)
    # the master restarts on the same HA port; the slave waits for it and resumes
    async with (
        LocalBroker(s_root, **slave_conf(port)) as slave,
        LocalBroker(m_root, **master_conf(haListenPort=port)) as master,
    ):
        await send_many(master, "R", 4, 1000)
        await caught_up(master, slave)
        end = master.store.get_max_phy_offset()
        assert commitlog_bytes(slave, 0, end) == commitlog_bytes(master, 0, end)
        for q in range(2):
            assert await pulled(slave, "R", q) == await pulled(master, "R", q)
            assert len(await pulled(slave, "R", q)) == 6


@async_test
async def test_a_send_back_on_a_sync_master_is_answered_once_the_slave_has_the_retry(
    tmp_path: Path,
) -> None:
    """CONSUMER_SEND_MSG_BACK answers SUCCESS after the slave has the retry message; with no slave
    it answers SUCCESS as well (4.9.8 answers SLAVE_NOT_AVAILABLE puts there as done)."""
    conf = master_conf(brokerRole="SYNC_MASTER", syncFlushTimeout=400)
    async with LocalBroker(str(tmp_path / "m"), **conf) as master:
        c = await master.client()
        phys = [
            decode_offset_msg_id((await c.invoke(send_v2("RT", b"r%d" % i))).ext_fields["msgId"])[2]
            for i in range(2)
        ]
        resp = await c.invoke(send_back(phys[0], "G1"))
        assert resp.code == ResponseCode.SUCCESS, resp
        async with LocalBroker(str(tmp_path / "s"), **slave_conf(master)) as slave:
            await caught_up(master, slave)
            before = master.store.get_max_phy_offset()
            resp = await c.invoke(send_back(phys[1], "G1"))
            assert resp.code == ResponseCode.SUCCESS, resp
            assert slave.store.get_max_phy_offset() == master.store.get_max_phy_offset() > before
        await c.aclose()


@async_test
async def test_the_master_sends_heartbeats_and_drops_a_silent_slave(tmp_path: Path) -> None:
    """WriteSocketService: idle, a frame with an empty body at the next offset every
    haSendHeartbeatInterval; ReadSocketService: a slave silent for haHousekeepingInterval is closed."""
    conf = master_conf(haSendHeartbeatInterval=50, haHousekeepingInterval=1000)
    async with LocalBroker(str(tmp_path / "m"), **conf) as master:
        await send_many(master, "HB", 2, 100, queues=1)
        end = master.store.get_max_phy_offset()
        reader, writer = await asyncio.open_connection("127.0.0.1", master.broker.ha_service.port)
        writer.write(SLAVE_REPORT.pack(0))
        await writer.drain()
        decoder = TransferDecoder()
        frames: list[tuple[int, bytes]] = []
        while len(frames) < 3:
            data = await reader.read(65536)
            assert data, "closed before the heartbeats"
            frames += decoder.feed(data)
        assert frames[0] == (0, commitlog_bytes(master, 0, end))
        assert frames[1:3] == [(end, b""), (end, b"")]
        while await reader.read(65536):  # nothing reported since the first: closed by the master
            pass
        await wait_for(lambda: not master.broker.ha_service.connections)
        writer.close()


@async_test
async def test_bad_reports_close_only_that_connection(tmp_path: Path) -> None:
    """A report past the master's CommitLog end closes that slave's connection (ReadSocketService);
    a torn report changes nothing else, and the master goes on serving."""
    async with LocalBroker(str(tmp_path / "m"), **master_conf()) as master:
        port = master.broker.ha_service.port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(SLAVE_REPORT.pack(0))
        await writer.drain()
        (conn,) = await wait_for(lambda: master.broker.ha_service.connections)
        await wait_for(lambda: conn.slave_request_offset == 0)
        writer.write(SLAVE_REPORT.pack(1 << 62))
        await writer.drain()
        while await reader.read(65536):
            pass
        writer.close()
        _, torn = await asyncio.open_connection("127.0.0.1", port)
        torn.write(b"\x00\x01\x02")
        torn.close()
        await wait_for(lambda: not master.broker.ha_service.connections)
        await send_many(master, "OK", 1, 10, queues=1)
        async with LocalBroker(str(tmp_path / "s"), **slave_conf(master)) as slave:
            await caught_up(master, slave)


@async_test
async def test_a_slave_without_ha_master_address_follows_its_registration_answer(tmp_path: Path) -> None:
    """The master registers its real HA port as haServerAddr; a slave of the same brokerName with no
    haMasterAddress connects where the name server's REGISTER_BROKER answer points it."""
    namesrv = RemotingServer("127.0.0.1", 0, NamesrvController().processors())
    await namesrv.start()
    ns = {"namesrvAddr": f"127.0.0.1:{namesrv.port}"}
    try:
        async with LocalBroker(str(tmp_path / "m"), **master_conf(**ns)) as master:
            slave_overrides = {**slave_conf(master, **ns), "haMasterAddress": None}
            async with LocalBroker(str(tmp_path / "s"), **slave_overrides) as slave:
                assert slave.broker.ha_client.master_ha_addr == (f"127.0.0.1:{master.broker.ha_service.port}")
                await send_many(master, "NS", 3, 100, queues=1)
                await caught_up(master, slave)
    finally:
        await namesrv.stop()
