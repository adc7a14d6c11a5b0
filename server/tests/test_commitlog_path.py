"""storePathCommitLog: a broker whose CommitLog lives outside its store root writes, recovers and
reports it there, as 4.9.8's does (DefaultMessageStore reads the CommitLog from that directory)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import async_test, send_v2, small_broker, stored
from rmqgate.store import cli
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R

TOPIC = "TopicCL"


def segments(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


@async_test
async def test_commitlog_outside_the_root_is_written_and_recovered(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "store", tmp_path / "disk2" / "cl"
    broker = small_broker(root, storePathCommitLog=str(elsewhere))
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        for i in range(5):
            resp = await c.invoke(send_v2(TOPIC, f"m{i}".encode(), keys=f"k{i}"))
            assert resp.code == ResponseCode.SUCCESS, resp
        info = await c.invoke(RemotingCommand.request(R.GET_BROKER_RUNTIME_INFO))
        table = json.loads(info.body or b"{}")["table"]
        await c.aclose()
    finally:
        await broker.stop()
    assert segments(elsewhere) == ["00000000000000000000"]
    assert segments(root / "commitlog") == []  # nothing in the root's default place
    assert f"commitLogDiskRatio_{elsewhere}" in table
    assert float(table["commitLogDiskRatio"]) > 0 and float(table["consumeQueueDiskRatio"]) > 0

    # a clean restart reads the CommitLog back from there
    broker = small_broker(root, storePathCommitLog=str(elsewhere))
    await broker.start()
    try:
        assert [m.body for m in stored(broker, TOPIC, 0)] == [f"m{i}".encode() for i in range(5)]
        # the index dispatcher follows the CommitLog where it is
        assert len((await asyncio.to_thread(broker.store.query_message, TOPIC, "k3", 32)).buffers) == 1
        max_phy = broker.store.get_max_phy_offset()
        assert max_phy > 0
    finally:
        await broker.stop()

    # after a crash (abort file left behind) the abnormal recovery scans the same CommitLog
    (root / "abort").write_text("")
    broker = small_broker(root, storePathCommitLog=str(elsewhere))
    await broker.start()
    try:
        assert broker.store.get_max_phy_offset() == max_phy
        assert [m.body for m in stored(broker, TOPIC, 0)] == [f"m{i}".encode() for i in range(5)]
    finally:
        await broker.stop()


def test_store_stat_reads_the_given_commitlog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, elsewhere = tmp_path / "store", tmp_path / "cl"
    (root / "consumequeue").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "00000000000000000000").write_bytes(b"")
    assert cli.run(argparse.Namespace(store_command="stat", store=root, commitlog=elsewhere)) == 0
    assert "commitlog: 1 segment(s)" in capsys.readouterr().out
    assert cli.run(argparse.Namespace(store_command="stat", store=root, commitlog=None)) == 0
    assert "commitlog: 0 segment(s)" in capsys.readouterr().out
