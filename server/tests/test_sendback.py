"""CONSUMER_SEND_MSG_BACK on a real broker: retry topic, delay levels, reconsume counts, dead letters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.testing import async_test, small_broker, stored, wait_for
from rmqgate.store.api import SCHEDULE_TOPIC
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.message import decode_offset_msg_id, format_properties


def make_broker(root: Path, **overrides: Any) -> BrokerController:
    return small_broker(
        root, **{"brokerName": "broker-r", "messageDelayLevel": " ".join(["1s"] * 18), **overrides}
    )


def send(topic: str, body: bytes) -> RemotingCommand:
    props = {"UNIQ_KEY": "UK-" + body.hex(), "TAGS": "TagR", "KEYS": "k1"}
    ext = {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": "1700000000000", "h": "5", "i": format_properties(props), "j": "0",
        "k": "false", "m": "false",
    }  # fmt: skip
    return RemotingCommand.request(R.SEND_MESSAGE_V2, ext, body)


def send_back(
    phys: int, group: str, delay: int = 0, max_times: int | None = None, **kw: Any
) -> RemotingCommand:
    ext = {
        "offset": str(phys),
        "group": group,
        "delayLevel": str(delay),
        "originTopic": "RT",
        "unitMode": "false",
    }
    if max_times is not None:
        ext["maxReconsumeTimes"] = str(max_times)
    return RemotingCommand.request(R.CONSUMER_SEND_MSG_BACK, ext, **kw)


@async_test
async def test_retry_then_dead_letter(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        resp = await c.invoke(send("RT", b"m1"))
        offset_msg_id = resp.ext_fields["msgId"]  # type: ignore[index]
        phys = decode_offset_msg_id(offset_msg_id)[2]

        ok = await c.invoke(send_back(phys, "G1", 0, max_times=2))
        assert (ok.code, ok.remark) == (ResponseCode.SUCCESS, None)
        (parked,) = stored(broker, SCHEDULE_TOPIC, 2)  # level 3 + reconsumeTimes(0)
        assert parked.properties["REAL_TOPIC"] == "%RETRY%G1" and parked.properties["DELAY"] == "3"
        assert broker.topics.get("%RETRY%G1")["readQueueNums"] == 1  # type: ignore[index]
        await wait_for(lambda: broker.store.get_max_offset_in_queue("%RETRY%G1", 0) == 1, 5)
        (retry1,) = stored(broker, "%RETRY%G1")
        assert retry1.reconsume_times == 1 and bytes(retry1.body) == b"m1" and retry1.flag == 5
        assert retry1.properties["RETRY_TOPIC"] == "RT" and retry1.properties["WAIT"] == "false"
        assert retry1.properties["ORIGIN_MESSAGE_ID"] == offset_msg_id
        assert retry1.properties["UNIQ_KEY"] == "UK-" + b"m1".hex() and retry1.properties["TAGS"] == "TagR"
        assert retry1.born_timestamp == 1700000000000

        # the retried message fails again: level 3 + 1, reconsumeTimes 2, RETRY_TOPIC/ORIGIN kept
        assert (await c.invoke(send_back(retry1.commit_log_offset, "G1", 0, max_times=2))).code == 0
        assert stored(broker, SCHEDULE_TOPIC, 3)[0].properties["DELAY"] == "4"
        await wait_for(lambda: broker.store.get_max_offset_in_queue("%RETRY%G1", 0) == 2, 5)
        retry2 = stored(broker, "%RETRY%G1")[1]
        assert retry2.reconsume_times == 2 and retry2.properties["RETRY_TOPIC"] == "RT"
        assert retry2.properties["ORIGIN_MESSAGE_ID"] == offset_msg_id

        # reconsumeTimes (2) reached maxReconsumeTimes (2): dead letter, no delay
        assert (await c.invoke(send_back(retry2.commit_log_offset, "G1", 0, max_times=2))).code == 0
        (dead,) = stored(broker, "%DLQ%G1")
        assert dead.reconsume_times == 3
        assert (dead.properties["DELAY"], dead.properties["WAIT"]) == ("0", "false")  # as Java stores them
        assert (
            dead.properties["RETRY_TOPIC"] == "RT" and dead.properties["ORIGIN_MESSAGE_ID"] == offset_msg_id
        )
        assert broker.topics.get("%DLQ%G1")["writeQueueNums"] == 1  # type: ignore[index]
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_explicit_level_negative_level_and_errors(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s", autoCreateSubscriptionGroup=False)
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        resp = await c.invoke(send("RT", b"m2"))
        phys = decode_offset_msg_id(resp.ext_fields["msgId"])[2]  # type: ignore[index]
        missing = await c.invoke(send_back(phys, "NOPE"))
        assert missing.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert missing.remark.startswith("subscription group not exist, NOPE")  # type: ignore[union-attr]
        broker.config.autoCreateSubscriptionGroup = True
        assert (await c.invoke(send_back(phys, "G2", 7))).code == 0
        assert stored(broker, SCHEDULE_TOPIC, 6)[0].properties["DELAY"] == "7"
        assert (await c.invoke(send_back(phys, "G3", -1))).code == 0
        assert [bytes(m.body) for m in stored(broker, "%DLQ%G3")] == [b"m2"]
        # group's retryMaxTimes (16) when the request carries none
        assert (await c.invoke(send_back(phys, "G4", 1))).code == 0
        assert stored(broker, SCHEDULE_TOPIC, 0)[0].properties["REAL_TOPIC"] == "%RETRY%G4"
        bad = await c.invoke(send_back(broker.store.get_max_phy_offset() + 100, "G2"))
        assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark.startswith(
            "look message by offset failed"
        )  # type: ignore[union-attr]
        await c.aclose()
    finally:
        await broker.stop()
