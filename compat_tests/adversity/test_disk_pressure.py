"""Disk pressure: `rmqgate serve` with its store on a 256 MiB tmpfs and 8 MiB CommitLog segments.

As in 4.9.8 (CleanCommitLogService.isSpaceToDelete, RunningFlags, SendMessageProcessor):
1. filling up, sends are taken up to 90 % used; over it the disk is marked full and every send is
   answered SERVICE_NOT_AVAILABLE (14) with the "the broker's disk is full [CL: ..]" remark; with
   diskMaxUsedSpaceRatio at 95 and no deleteWhen hour, nothing is deleted meanwhile;
2. everything acknowledged is read back through the broker: each message once, at its queue offset,
   its body as sent and its body CRC right;
3. diskMaxUsedSpaceRatio lowered to 80 (updateBrokerConfig): the disk is over it and over 85 %, so the
   oldest segments go regardless of age (10 a round) until it is not; the full mark clears at 85 % and
   sends resume; what was deleted is a prefix of each queue, everything after it still reads back;
4. deleteWhen set to this hour and fileReservedTime to 0: every segment but the one being written is
   expired and deleted; sends go on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmqgate.compat_tests.servers import BROKER_CONF, ServerProcess, log_tail
from rmqgate.compat_tests.wire_client import (
    PULL_SUBSCRIPTION,
    WireClient,
    create_routed_topic,
    decode_messages,
    wait_until,
)
from rmqgate.store.clean import disk_used_percent
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.message import body_crc, decode_offset_msg_id

pytestmark = [pytest.mark.timeout(600)]

TOPIC = "DiskPressureTopic"
QUEUES = 4
BODY = 32 * 1024
SEGMENT = 8 << 20
REFUSED = re.compile(
    r"service not available now\. It may be caused by one of the following reasons: the broker's disk is "
    r"full \[CL: ([ \d.-]{5}) CQ: ([ \d.-]{5}) INDEX: ([ \d.-]{5})\], messages are put to the slave, "
    r"message store has been shut down, etc\."
)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 MiB tmpfs, unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def body_of(i: int) -> bytes:
    return (b"%08d" % i) * (BODY // 8)


def update_config(c: WireClient, text: str) -> None:
    resp = c.invoke(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode())
    assert resp.code == ResponseCode.SUCCESS, resp


def runtime(c: WireClient) -> dict[str, str]:
    return json.loads(c.invoke(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]


def read_back(c: WireClient, acked: dict[tuple[int, int], tuple[int, str]]) -> tuple[int, dict[int, int]]:
    """Pull every queue from its min offset; each acknowledged message found there must be as sent.
    (messages read, {queue: min offset})."""
    mins: dict[int, int] = {}
    found = 0
    for q in range(QUEUES):
        resp = c.invoke(RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": q})
        offset = mins[q] = int(resp.ext_fields["offset"])
        while True:
            resp = c.pull(
                "disk_reader",
                TOPIC,
                q,
                offset,
                max_nums=32,
                sys_flag=PULL_SUBSCRIPTION,
                subscription="*",
                timeout=30,
            )
            if resp.code != ResponseCode.SUCCESS:
                break
            for m in decode_messages(resp.body):
                i, msg_id = acked.pop((q, m.queue_offset), (None, None))
                assert i is not None, f"queue {q} offset {m.queue_offset}: stored but never acknowledged"
                assert bytes(m.body) == body_of(i), f"queue {q} offset {m.queue_offset}: body differs"
                assert body_crc(m.body) == m.body_crc, f"queue {q} offset {m.queue_offset}: CRC"
                assert m.offset_msg_id == msg_id
                found += 1
            offset = int(resp.ext_fields["nextBeginOffset"])
    return found, mins


def try_send(c: WireClient, i: int, acked: dict[tuple[int, int], tuple[int, str]]) -> bool:
    """One sync send of message ``i``; kept in ``acked`` by (queue, queue offset) if SEND_OK."""
    resp = c.send_message(TOPIC, body_of(i), queue_id=i % QUEUES, timeout=30)
    if resp.code != ResponseCode.SUCCESS:
        return False
    acked[(i % QUEUES, int(resp.ext_fields["queueOffset"]))] = (i, resp.ext_fields["msgId"])
    return True


def send_until(
    c: WireClient, start: int, acked: dict, stop: Callable[[object], bool], limit: int
) -> tuple[int, object]:
    """Sync sends of message ``start``, ``start + 1``, ... until ``stop(response)``; (next index, last response)."""
    i = start
    while i < start + limit:
        resp = c.send_message(TOPIC, body_of(i), queue_id=i % QUEUES, timeout=30)
        if resp.code == ResponseCode.SUCCESS:
            acked[(i % QUEUES, int(resp.ext_fields["queueOffset"]))] = (i, resp.ext_fields["msgId"])
        i += 1
        if stop(resp):
            return i, resp
    raise AssertionError(f"{limit} sends and the stop condition never came; last {resp!r}")


def test_disk_fills_refuses_cleans_and_resumes(tmpfs: Path, report: Callable[..., str]) -> None:
    dead_hour = (time.localtime().tm_hour + 12) % 24
    conf = BROKER_CONF + (
        f"mappedFileSizeCommitLog = {SEGMENT}\nmappedFileSizeConsumeQueue = 60000\n"
        "maxHashSlotNum = 10000\nmaxIndexNum = 40000\ncleanResourceInterval = 100\n"
        f"diskMaxUsedSpaceRatio = 95\nfileReservedTime = 72\ndeleteWhen = {dead_hour:02d}\n"
    )
    server = ServerProcess(tmpfs, conf=conf, extra_args=("--log-level", "WARNING"))
    rows: list[tuple[object, ...]] = []
    commitlog = server.store / "commitlog"

    def row(phase: str, acked_total: int, refused: int, started: float) -> None:
        files = sorted(commitlog.iterdir())
        rows.append(
            (phase, acked_total, refused, len(files), f"{disk_used_percent(commitlog)} %",
             files[0].name if files else "-", f"{time.monotonic() - started:.1f}")
        )  # fmt: skip

    try:
        server.wait_ready()
        create_routed_topic(server.broker, server.namesrv, TOPIC, QUEUES)
        acked: dict[tuple[int, int], tuple[int, str]] = {}
        with WireClient(server.broker, timeout=30) as c:
            # 1. fill until refused
            t = time.monotonic()
            i, refused = send_until(c, 0, acked, lambda r: r.code != ResponseCode.SUCCESS, 20_000)
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused
            m = REFUSED.fullmatch(refused.remark or "")
            assert m, refused.remark
            assert float(m.group(1)) > 0.90, refused.remark
            filled = len(acked)
            still = [c.send_message(TOPIC, body_of(0), timeout=30).code for _ in range(5)]
            assert still == [ResponseCode.SERVICE_NOT_AVAILABLE] * 5
            assert int(runtime(c)["commitLogMinOffset"]) == 0, "a segment went while diskMaxUsedSpaceRatio=95"
            row("filled, refused", filled, 6, t)

            # 2. all acknowledged messages read back
            t = time.monotonic()
            found, mins = read_back(c, dict(acked))
            assert found == filled and set(mins.values()) == {0}
            row("read back", found, 0, t)

            # 3. diskMaxUsedSpaceRatio 80: the oldest segments go, sends resume
            t = time.monotonic()
            update_config(c, "diskMaxUsedSpaceRatio=80\n")
            resumed = wait_until(lambda: try_send(c, i, acked), timeout=60, interval=0.2)
            assert resumed, (
                f"sends still refused 60 s after diskMaxUsedSpaceRatio=80:\n{log_tail(server.log_path)}"
            )
            i += 1
            min_phy = int(runtime(c)["commitLogMinOffset"])
            assert min_phy > 0 and min_phy % SEGMENT == 0
            assert disk_used_percent(commitlog) <= 85
            before = dict(acked)
            found, mins = read_back(c, before)
            gone = before  # what read_back did not find: it must all lie below the new minimum
            assert all(decode_offset_msg_id(msg_id)[2] < min_phy for _, msg_id in gone.values()), (
                "an acknowledged message above the CommitLog's min offset is missing"
            )
            assert all(off < mins[q] for q, off in gone), "deleted messages are not a prefix of their queue"
            row("diskMaxUsedSpaceRatio=80: cleaned, resumed", found, 0, t)

            # 4. deleteWhen now, fileReservedTime 0: all but the segment being written expire
            t = time.monotonic()
            for _ in range(600):  # more segments to expire
                assert try_send(c, i, acked)
                i += 1
            now_hour = time.localtime().tm_hour
            update_config(c, f"deleteWhen={now_hour:02d};{(now_hour + 1) % 24:02d}\nfileReservedTime=0\n")
            one_left = wait_until(lambda: len(list(commitlog.iterdir())) == 1, timeout=60, interval=0.2)
            assert one_left, sorted(p.name for p in commitlog.iterdir())
            assert try_send(c, i, acked)
            min_phy = int(runtime(c)["commitLogMinOffset"])
            assert min_phy == int(next(commitlog.iterdir()).name)
            left = dict(acked)
            found, mins = read_back(c, left)
            assert found >= 1
            assert all(decode_offset_msg_id(msg_id)[2] < min_phy for _, msg_id in left.values())
            row("deleteWhen=now, fileReservedTime=0", found, 0, t)
        assert server.proc.poll() is None, f"rmqgate died:\n{log_tail(server.log_path)}"
    finally:
        server.stop()
    report(
        "disk_pressure",
        f"Disk pressure: 256 MiB tmpfs, {SEGMENT >> 20} MiB segments, {BODY >> 10} KiB sync sends",
        ("phase", "messages", "refused", "segments", "disk used", "first segment", "s"),
        rows,
    )
    assert os.path.ismount(tmpfs)
