"""Delay levels on a real broker: SCHEDULE_TOPIC_XXXX, delivery when due, progress across restarts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rmqgate.server.broker import BrokerController
from rmqgate.server.client import RemotingClient
from rmqgate.server.config import load_broker_conf
from rmqgate.server.schedule import timeup_message
from rmqgate.server.testing import (
    async_test,
    captured_requests_and_pulls,
    small_broker,
    stored,
    wait_for,
)
from rmqgate.store.api import SCHEDULE_TOPIC
from rmqgate.wire import RemotingCommand, ResponseCode
from rmqgate.wire.codes import RequestCode as R
from rmqgate.wire.message import MessageExt, format_properties, parse_properties

LEVELS = "1s 2s 3s"


def make_broker(root: Path, levels: str = LEVELS) -> BrokerController:
    return small_broker(root, brokerName="broker-d", messageDelayLevel=levels)


def delayed(topic: str, level: int | str, body: bytes, queue_id: int = 2) -> RemotingCommand:
    props = {"DELAY": str(level), "UNIQ_KEY": body.hex(), "TAGS": "TagD"}
    ext = {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": format_properties(props), "j": "0",
        "k": "false", "m": "false",
    }  # fmt: skip
    return RemotingCommand.request(R.SEND_MESSAGE_V2, ext, body)


def test_delay_table_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel = 1s 2s 3s\n")
    broker = make_broker(tmp_path / "s", levels=load_broker_conf(str(conf)).messageDelayLevel)
    try:
        assert broker.schedule.levels == {1: 1000, 2: 2000, 3: 3000}
    finally:
        broker.store.shutdown()


def test_timeup_message_restores_the_real_topic_and_keeps_the_properties() -> None:
    msg = MessageExt(
        SCHEDULE_TOPIC,
        b"b",
        queue_id=0,
        properties={"DELAY": "1", "REAL_TOPIC": "RT", "REAL_QID": "3", "K": "v"},
    )
    real = timeup_message(msg)
    assert (real.topic, real.queue_id) == ("RT", 3)
    assert real.properties == {"DELAY": "1", "REAL_TOPIC": "RT", "REAL_QID": "3", "K": "v"}


@async_test
async def test_delayed_message_arrives_when_due(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        sent_at = time.monotonic()
        resp = await c.invoke(delayed("DT", 1, b"one"))
        # the answer names the queue asked for (what SendResult reports), not level 1's queue 0
        assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueId"] == "2"
        assert (await c.invoke(delayed("DT", 99, b"clamped"))).code == ResponseCode.SUCCESS
        (parked,) = stored(broker, SCHEDULE_TOPIC, 0)
        assert parked.properties["REAL_TOPIC"] == "DT" and parked.properties["REAL_QID"] == "2"
        (clamped,) = stored(broker, SCHEDULE_TOPIC, 2)
        assert clamped.properties["DELAY"] == "3"
        assert broker.store.get_max_offset_in_queue("DT", 2) == 0
        await wait_for(lambda: broker.store.get_max_offset_in_queue("DT", 2) >= 1, 10)
        first_at = time.monotonic()
        (real,) = stored(broker, "DT", 2)
        # stored with its level, as a 4.9.8 broker stores it, and not scheduled a second time
        assert bytes(real.body) == b"one" and real.properties["DELAY"] == "1"
        assert real.properties["UNIQ_KEY"] == b"one".hex() and real.properties["TAGS"] == "TagD"
        # never early; late only by what a stalled machine adds
        assert 1.0 <= (real.store_timestamp - parked.store_timestamp) / 1000 < 4.0
        assert 0.9 <= first_at - sent_at < 5.0
        await wait_for(lambda: broker.store.get_max_offset_in_queue("DT", 2) == 2, 10)
        later = stored(broker, "DT", 2)[1]
        assert bytes(later.body) == b"clamped" and later.properties["DELAY"] == "3"
        assert 3.0 <= (later.store_timestamp - clamped.store_timestamp) / 1000 < 6.0
        assert broker.store.meta.delay_offsets() == {1: 1, 3: 1}
        # tags filter on the delivered message works (tagsCode recomputed from TAGS)
        from rmqgate.wire.message import java_string_hash

        assert (
            broker.store.get_messages("DT", 2, 0, 10, tags_filter={java_string_hash("TagD")}).message_count
            == 2
        )
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_the_delay_property_is_read_as_java_reads_an_int(tmp_path: Path) -> None:
    """``Message.getDelayTimeLevel`` is ``Integer.parseInt``: "+2" is level 2; a value it refuses
    fails the send with SYSTEM_ERROR and stores nothing; 0 and below are not delayed."""
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        assert (await c.invoke(delayed("DV", "+2", b"plus"))).code == ResponseCode.SUCCESS
        (parked,) = stored(broker, SCHEDULE_TOPIC, 1)
        assert bytes(parked.body) == b"plus" and parked.properties["DELAY"] == "2"
        for bad in ("abc", " 2", "99999999999"):
            resp = await c.invoke(delayed("DV", bad, b"bad"))
            assert resp.code == ResponseCode.SYSTEM_ERROR and f"DELAY={bad!r}" in resp.remark, resp
        for not_delayed in ("0", "-3"):
            assert (await c.invoke(delayed("DV", not_delayed, b"now"))).code == ResponseCode.SUCCESS
        assert [m.properties["DELAY"] for m in stored(broker, "DV", 2)] == ["0", "-3"]
        assert [len(stored(broker, SCHEDULE_TOPIC, q)) for q in range(3)] == [0, 1, 0]
        await c.aclose()
    finally:
        await broker.stop()


@async_test
async def test_restart_delivers_each_delayed_message_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    broker = make_broker(root)
    await broker.start()
    c = await RemotingClient.connect("127.0.0.1", broker.port)
    assert (await c.invoke(delayed("DR", 1, b"early"))).code == 0
    await wait_for(lambda: broker.store.get_max_offset_in_queue("DR", 2) == 1, 5)
    for i in range(3):
        assert (await c.invoke(delayed("DR", 2, b"late%d" % i))).code == 0
    await c.aclose()
    await broker.stop()  # the level-2 messages are not due yet

    broker = make_broker(root)
    assert broker.schedule.offsets == {1: 1}
    await broker.start()
    try:
        await wait_for(lambda: broker.store.get_max_offset_in_queue("DR", 2) == 4, 6)
        await asyncio.sleep(1.2)  # nothing more comes
        bodies = [bytes(m.body) for m in stored(broker, "DR", 2)]
        assert bodies == [b"early", b"late0", b"late1", b"late2"]
        assert broker.store.meta.delay_offsets() == {1: 1, 2: 3}
    finally:
        await broker.stop()


@async_test
async def test_a_delay_offset_past_its_queue_is_reset_and_nothing_is_skipped(tmp_path: Path) -> None:
    """A saved delay offset beyond its level's queue (an unclean stop cut the queue back): delivery
    goes on from the queue's end, as Java's executeOnTimeup resets it, instead of skipping every new
    delayed message below the stale offset."""
    root = tmp_path / "s"
    broker = make_broker(root)  # not started: only its store, to plant the stale offset
    broker.store.meta.set_delay_offset(1, 3)
    broker.store.shutdown()
    broker = make_broker(root)
    assert broker.schedule.offsets == {1: 3}
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        for body in (b"d0", b"d1"):
            assert (await c.invoke(delayed("DS", 1, body))).code == 0
        await wait_for(lambda: broker.store.get_max_offset_in_queue("DS", 2) == 2, 10)
        assert [bytes(m.body) for m in stored(broker, "DS", 2)] == [b"d0", b"d1"]
        assert broker.store.meta.delay_offsets()[1] == 2
        await c.aclose()
    finally:
        await broker.stop()


def _java_delivered_properties(corpus: Path) -> dict[str, dict[str, str]]:
    """From the corpus capture of ali-ons against a 4.9.8 broker: the properties of the send with a
    delay level and of a send that was later sent back, and of each as a consumer pulled it once
    delivered (``delayed`` from its topic, ``retried`` from %RETRY%)."""
    sent: dict[str, dict[str, str]] = {}
    pulled: dict[str, dict[str, str]] = {}
    for item in captured_requests_and_pulls(corpus / "pcap-thirdparty" / "ali-ons-3.12.0.pcap"):
        if isinstance(item, RemotingCommand):
            if item.code == R.SEND_MESSAGE_V2:
                props = parse_properties(item.ext_fields["i"])  # type: ignore[index]
                sent[props["KEYS"]] = props
        elif type(item) is MessageExt and "DELAY" in item.properties:
            kind = "retried" if item.topic.startswith("%RETRY%") else "delayed"
            pulled[kind] = dict(item.properties)
    return {
        "sent_delayed": sent[pulled["delayed"]["KEYS"]],
        "sent_retried": sent[pulled["retried"]["KEYS"]],
        **pulled,
    }


@async_test
async def test_delivered_messages_carry_what_the_java_broker_in_the_corpus_gave(
    tmp_path: Path, corpus: Path
) -> None:
    """A delayed message and a retry, delivered when due, carry the properties a 4.9.8 broker's
    consumer got for the same sends: DELAY keeps the level (Java clears it from the map it schedules
    by, after writing the properties string), and the retry's WAIT=false stays."""
    java = _java_delivered_properties(corpus)
    assert (java["delayed"]["DELAY"], java["retried"]["DELAY"], java["retried"]["WAIT"]) == (
        "2",
        "3",
        "false",
    )
    broker = make_broker(tmp_path / "s", levels="1s 1s 1s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        for props in (java["sent_delayed"], java["sent_retried"]):
            request = delayed("CB", 0, b"x", queue_id=0)
            request.ext_fields["i"] = format_properties(props)  # type: ignore[index]
            assert (await c.invoke(request)).code == ResponseCode.SUCCESS
        plain = stored(broker, "CB")[0]  # the delayed one is parked; the other is stored at once
        back = {"offset": str(plain.commit_log_offset), "group": "CG", "delayLevel": "0", "originTopic": "CB"}
        assert (await c.invoke(RemotingCommand.request(R.CONSUMER_SEND_MSG_BACK, back))).code == 0
        await wait_for(lambda: broker.store.get_max_offset_in_queue("CB", 0) == 2, 10)
        await wait_for(lambda: broker.store.get_max_offset_in_queue("%RETRY%CG", 0) == 1, 10)
        got = {
            "delayed": stored(broker, "CB")[1].properties,
            "retried": stored(broker, "%RETRY%CG")[0].properties,
        }
        await c.aclose()
    finally:
        await broker.stop()
    named = ("REAL_TOPIC", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "CLUSTER")  # the run's own topics and ids
    for kind in ("delayed", "retried"):
        assert got[kind].keys() == java[kind].keys(), kind
        assert {k: v for k, v in got[kind].items() if k not in named} == {
            k: v for k, v in java[kind].items() if k not in named
        }, kind
    assert got["delayed"]["REAL_TOPIC"] == "CB" and got["retried"]["REAL_TOPIC"] == "%RETRY%CG"


@async_test
async def test_a_delayed_message_keeps_its_wait_property_as_4_9_8_stores_it(tmp_path: Path) -> None:
    """4.9.8 drops a send's WAIT from the properties it stores, but ``CommitLog.putMessage`` writes
    a delayed message's properties string again from the map, WAIT included: the parked message and
    the one delivered when due carry WAIT as sent (a stock Java consumer sees it); a plain send and a
    DELAY of 0 are stored without it."""
    broker = make_broker(tmp_path / "s")
    await broker.start()
    try:
        c = await RemotingClient.connect("127.0.0.1", broker.port)
        for level, body in ((1, b"later"), (0, b"now")):
            request = delayed("DW", level, body)
            props = parse_properties(request.ext_fields["i"])  # type: ignore[index]
            request.ext_fields["i"] = format_properties({**props, "WAIT": "true"})  # type: ignore[index]
            assert (await c.invoke(request)).code == ResponseCode.SUCCESS
        (parked,) = stored(broker, SCHEDULE_TOPIC, 0)
        assert parked.properties["WAIT"] == "true"
        await wait_for(lambda: broker.store.get_max_offset_in_queue("DW", 2) == 2, 10)
        now, later = stored(broker, "DW", 2)
        assert (bytes(now.body), bytes(later.body)) == (b"now", b"later")
        assert "WAIT" not in now.properties
        assert later.properties["WAIT"] == "true" and later.properties["DELAY"] == "1"
        await c.aclose()
    finally:
        await broker.stop()
