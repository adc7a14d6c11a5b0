"""Replay: record a scripted session through the proxy, replay it against a fresh scripted cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import time
from pathlib import Path

import pytest

from rmqgate.server.client import RemotingClient
from rmqgate.tools import replay_cli
from rmqgate.tools.capture import CaptureWriter, Role
from rmqgate.tools.fakecluster import FakeCluster, props
from rmqgate.tools.proxy import RecordingProxy
from rmqgate.tools.replay import ReplayOptions, replay_connections, replay_file
from rmqgate.tools.replay_plan import (
    PlannedConnection,
    PlannedRequest,
    header_ext,
    load_plan,
    patch_ext,
    patch_opaque,
)
from rmqgate.tools.replay_report import Outcome, summarize
from rmqgate.wire.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.frame import FrameDecoder, decode_frame, encode_frame

RUNNING_INFO = b'{"properties":{"consumeType":"CONSUME_PASSIVELY"}}'


def _send(
    topic: str, queue: int, body: bytes, sys_flag: int = 0, uniq: str = "U0", st: int = 0
) -> RemotingCommand:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue), "f": str(sys_flag), "g": "1",
           "h": "0", "i": props(UNIQ_KEY=uniq, TRAN_MSG="true" if sys_flag else "false"), "n": "broker-a"}  # fmt: skip
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body, serialize_type=st)


def _pull(topic: str, queue: int, offset: int, suspend_ms: int) -> RemotingCommand:
    ext = {"consumerGroup": "CG", "topic": topic, "queueId": str(queue), "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
           "subVersion": "1"}  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


async def scripted_session(namesrv: str, cluster: FakeCluster) -> None:
    """A producer (with a checked transaction) and a consumer (long poll, pipelining, admin request)."""
    ns = await RemotingClient.connect_addr(namesrv)
    route = await ns.invoke(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    missing = await ns.invoke(
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "missing-1"})
    )
    assert (route.code, missing.code) == (0, 17)
    from rmqgate.tools.proxy import broker_addresses

    broker_addr = next(iter(broker_addresses(bytes(route.body))))
    producer_box: list[RemotingClient] = []
    checked = asyncio.Event()

    def on_producer_request(cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            ext = cmd.ext_fields or {}
            producer_box[0].invoke_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, {
                "producerGroup": "PG", "tranStateTableOffset": ext["tranStateTableOffset"],
                "commitLogOffset": ext["commitLogOffset"], "commitOrRollback": "8", "fromTransactionCheck": "true",
                "msgId": ext["msgId"], "transactionId": ext["transactionId"]}))  # fmt: skip
            checked.set()

    producer = await RemotingClient.connect_addr(broker_addr, on_request=on_producer_request)
    producer_box.append(producer)
    await producer.invoke(
        RemotingCommand.request(RequestCode.HEART_BEAT, body=b'{"producerDataSet":[{"groupName":"PG"}]}')
    )
    for i in range(5):
        r = await producer.invoke(_send("TopicA", 0, b"m%d" % i, st=i % 2))
        assert r.code == 0
    tx = await producer.invoke(_send("TopicA", 2, b"tx", sys_flag=4, uniq="TX1"))
    producer.invoke_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, {
        "producerGroup": "PG", "tranStateTableOffset": tx.ext_fields["queueOffset"],
        "commitLogOffset": str(int(tx.ext_fields["msgId"][-16:], 16)), "commitOrRollback": "0",
        "fromTransactionCheck": "false", "msgId": "TX1"}))  # fmt: skip

    consumer = await RemotingClient.connect_addr(
        broker_addr, on_request=lambda cmd: cmd.response(body=RUNNING_INFO)
    )
    await consumer.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, body=b'{"consumerDataSet":[]}'))
    long_poll = asyncio.ensure_future(consumer.invoke(_pull("TopicA", 1, 0, 1500), timeout=5))
    await asyncio.sleep(0.05)
    # pipelined behind the parked pull, as a push consumer does
    q = await consumer.invoke(RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
        "consumerGroup": "CG", "topic": "TopicA", "queueId": "0"}))  # fmt: skip
    assert q.code == 0
    found = await consumer.invoke(_pull("TopicA", 0, 0, 1500))
    assert found.code == 0
    answers = await cluster.ask_client()
    assert RUNNING_INFO in [bytes(a.body or b"") for a in answers]
    assert (await long_poll).code == 19
    await asyncio.wait_for(checked.wait(), 5)
    await asyncio.sleep(0.1)
    for c in (consumer, producer, ns):
        await c.aclose()


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("rec") / "session.rmqcap"

    async def main() -> dict:
        async with FakeCluster(check_after=0.2) as cluster:
            proxy = RecordingProxy(cluster.namesrv_addr, CaptureWriter(path, source="test"))
            await proxy.start()
            await scripted_session(proxy.address, cluster)
            await asyncio.sleep(0.1)
            await proxy.stop()
            proxy.writer.close()
            return {"end_transactions": list(cluster.state.end_transactions)}

    return path, asyncio.run(main())


def test_plan_of_the_recording(recording: tuple[Path, dict]) -> None:
    path, _ = recording
    plan = load_plan(path)
    conns = plan.replayable
    assert [c.role for c in conns] == [1, 2, 2]
    assert all(c.broker_name == "broker-a" for c in conns[1:])
    producer, consumer = conns[1], conns[2]
    # the END_TRANSACTION sent after the check is kept aside as the answer to a check
    assert list(producer.check_answers) == ["TX1"]
    assert [r.code for r in producer.requests].count(RequestCode.END_TRANSACTION) == 1
    assert list(consumer.answers) == [RequestCode.GET_CONSUMER_RUNNING_INFO]
    pulls = [r for r in consumer.requests if r.code == RequestCode.PULL_MESSAGE]
    assert [r.resp_code for r in pulls] == [19, 0]
    assert pulls[0].recorded_latency > 1.0
    # nothing in the session created TopicA before its route was served: the broker already had it
    assert plan.preexisting_topics == {"TopicA": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}


async def _replay_against_fresh(
    path: Path, options: ReplayOptions, ask: bool = True
) -> tuple[dict, FakeCluster, list]:
    async with FakeCluster(check_after=0.2) as cluster:
        task = asyncio.ensure_future(replay_file(path, cluster.namesrv_addr, options))
        answers: list = []
        if ask:
            for _ in range(60):  # ask the replayed consumer while its connection is open
                await asyncio.sleep(0.05)
                if len(cluster.broker.channels) >= 2:
                    await asyncio.sleep(0.1)
                    answers = await cluster.ask_client()
                    break
        report, _ = await task
        return report, cluster, answers


@pytest.mark.parametrize("speed", [1.0, None], ids=["speed1", "max"])
def test_replay_has_no_mismatches(recording: tuple[Path, dict], speed: float | None) -> None:
    path, _ = recording
    report, cluster, answers = asyncio.run(_replay_against_fresh(path, ReplayOptions(speed=speed)))
    assert report["errors"] == 0, report["error_kinds"]
    assert report["mismatches"] == 0, report["mismatch_details"]
    # every request that got a response in the recording got one now
    assert report["responses"] == sum(sum(e["recorded"].values()) for e in report["by_code"].values())
    assert report["by_code"]["SEND_MESSAGE_V2"]["responses"] == {"SUCCESS": 6}
    assert report["by_code"]["PULL_MESSAGE"]["responses"] == {"PULL_NOT_FOUND": 1, "SUCCESS": 1}
    assert report["by_code"]["GET_ROUTEINFO_BY_TOPIC"]["responses"] == {"SUCCESS": 1, "TOPIC_NOT_EXIST": 1}
    # the transaction: END_TRANSACTION carries the target's offsets, the check got the recorded answer
    ends = cluster.state.end_transactions
    assert len(ends) == 2 and report["server_requests"]["CHECK_TRANSACTION_STATE"] == 1
    first, after_check = ends
    assert first["fromTransactionCheck"] == "false"
    assert after_check["fromTransactionCheck"] == "true" and after_check["commitOrRollback"] == "8"
    assert cluster.state.checks_sent == ["TX1"]
    tx_offsets = [k for k in cluster.state.queue_offsets if k == ("TopicA", 2)]
    assert tx_offsets and first["tranStateTableOffset"] == "0"
    assert int(first["commitLogOffset"]) + 50_000 == int(after_check["commitLogOffset"])
    assert after_check["tranStateTableOffset"] == "100"
    # the consumer answered the broker's request as recorded
    assert [bytes(a.body or b"") for a in answers].count(RUNNING_INFO) == 1
    lat = report["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    if speed is None:  # the recorded 1.5 s long poll was shortened to max_suspend_ms
        assert max(cluster.state.pull_suspends_ms) == ReplayOptions().max_suspend_ms < 1500
    else:
        assert max(cluster.state.pull_suspends_ms) == 1500


def test_topic_map_and_shared_connections(recording: tuple[Path, dict]) -> None:
    path, _ = recording
    opts = ReplayOptions(speed=None, topic_map={"TopicA": "TopicZ"}, connections=1)
    report, cluster, _ = asyncio.run(_replay_against_fresh(path, opts, ask=False))
    assert report["errors"] == 0 and report["mismatches"] == 0
    assert {t for t, _ in cluster.state.queue_offsets} == {"TopicZ"}
    assert len(cluster.broker.channels) <= 1


def test_subsets_replay_and_merge(recording: tuple[Path, dict]) -> None:
    """What a Spark task does: replay some connections, summarize the union of outcomes."""
    path, _ = recording
    plan = load_plan(path)

    async def main() -> list[Outcome]:
        async with FakeCluster(check_after=0.2) as cluster:
            parts = [plan.replayable[:1], plan.replayable[1:]]
            results = [
                await replay_connections(
                    part, cluster.namesrv_addr, ReplayOptions(speed=None), plan_start=plan.start
                )
                for part in parts
            ]
            assert all("duration_s" in r.facts for r in results)
            return [o for outcomes in results for o in outcomes]

    outcomes = asyncio.run(main())
    assert pickle.loads(pickle.dumps(outcomes)) == outcomes  # ships from executors as is
    merged = summarize(outcomes)
    assert merged["requests"] == sum(len(c.requests) for c in plan.replayable) + 1  # + the check answer
    assert merged["mismatches"] == 0 and merged["errors"] == 0


def test_cli_writes_json_and_html(recording: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = recording
    parser = argparse.ArgumentParser()
    replay_cli.add_arguments(parser)

    async def main() -> int:
        async with FakeCluster() as cluster:
            args = parser.parse_args([str(path), "--target", cluster.namesrv_addr, "--speed", "max",
                                      "--report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])  # fmt: skip
            return await asyncio.to_thread(replay_cli.run, args)

    assert asyncio.run(main()) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    for key in ("requests", "responses", "errors", "by_code", "latency_ms", "mismatches", "duration_s"):
        assert key in report
    assert set(report["latency_ms"]) >= {"p50", "p90", "p99", "max"}
    assert report["by_code"]["HEART_BEAT"]["code"] == 34
    html = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in html and "HEART_BEAT" in html


def test_cli_rejects_bad_arguments() -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        replay_cli.parse_speed("-1")
    assert replay_cli.parse_speed("max") is None and replay_cli.parse_speed("2.5") == 2.5
    assert replay_cli.parse_connections("as-recorded") is None and replay_cli.parse_connections("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        replay_cli.parse_map(["nope"])


@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_patching_keeps_everything_else(st: int) -> None:
    cmd = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, {"topic": "A", "suspendTimeoutMillis": "15000", "queueId": "3"},
        b"body", opaque=77, serialize_type=st, language=LanguageCode.CPP, version=333,
    )  # fmt: skip
    raw = encode_frame(cmd)
    out = decode_frame(patch_opaque(raw, 123456))
    assert out.opaque == 123456 and out.ext_fields == cmd.ext_fields and bytes(out.body) == b"body"
    assert (out.language, out.version, out.serialize_type) == (LanguageCode.CPP, 333, st)
    out = decode_frame(patch_ext(raw, {"topic": "B", "suspendTimeoutMillis": "1000"}))
    assert out.ext_fields == {"topic": "B", "suspendTimeoutMillis": "1000", "queueId": "3"}
    assert out.opaque == 77 and bytes(out.body) == b"body"


def test_patching_keeps_json_number_tokens() -> None:
    # the C++ core writes some extFields as JSON numbers and a trailing newline after the header
    header = b'{"code":11,"extFields":{"queueId":3,"suspendTimeoutMillis":15000,"topic":"T"},"flag":0,' \
             b'"language":"CPP","opaque":5,"remark":"","version":333}\n'  # fmt: skip
    raw = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    patched = patch_ext(patch_opaque(raw, 9), {"suspendTimeoutMillis": "1000"})
    assert (
        b'"suspendTimeoutMillis":1000,' in patched and b'"opaque":9,' in patched and patched.endswith(b"}\n")
    )
    assert header_ext(patched) == {"queueId": "3", "suspendTimeoutMillis": "1000", "topic": "T"}


class _Answering(asyncio.Protocol):
    """Answers every request at once with SUCCESS (``silent``: never answers)."""

    silent = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.decoder = FrameDecoder()

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            if not self.silent and not cmd.flag & (RESPONSE_FLAG | ONEWAY_FLAG):
                self.transport.write(encode_frame(cmd.response(ResponseCode.SUCCESS)))


class _Silent(_Answering):
    silent = True


def _planned(*reqs: tuple[float, int, float | None]) -> PlannedConnection:
    """A name server connection of (recorded time, code, recorded response time or None) requests."""
    pc = PlannedConnection(1, Role.NAMESRV, "recorded:9876", None)
    for i, (ts, code, resp_ts) in enumerate(reqs):
        raw = encode_frame(RemotingCommand.request(code, {"topic": "T"}, opaque=i + 1))
        req = PlannedRequest(ts, raw, code, i + 1, 0, header_ext(raw), resp_ts)
        req.resp_code = None if resp_ts is None else 0
        pc.requests.append(req)
    return pc


async def _replay_one(protocol: type[asyncio.Protocol], pc: PlannedConnection, opts: ReplayOptions) -> list:
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    async with server:
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return await replay_connections([pc], addr, opts, plan_start=0.0, brokers={})


def test_pacing_follows_recorded_time_scaled_by_speed() -> None:
    pc = _planned((0.0, 34, 0.01), (0.4, 34, 0.41), (0.8, 34, 0.81))
    outcomes = asyncio.run(_replay_one(_Answering, pc, ReplayOptions(speed=2.0)))
    assert [o.response_code for o in outcomes] == [0, 0, 0]
    first = outcomes[0].sent
    for o, want in zip(outcomes, (0.0, 0.2, 0.4), strict=True):
        assert want - 0.01 <= o.sent - first <= want + 0.5  # never early; late only by a stall


def test_unanswered_is_not_an_error_but_a_missing_recorded_response_is() -> None:
    # a pull the capture never saw answered (parked), then a request whose response it recorded
    pc = _planned((0.0, RequestCode.PULL_MESSAGE, None), (0.01, RequestCode.HEART_BEAT, 0.02))
    opts = ReplayOptions(speed=None, request_timeout=0.3, unanswered_timeout=0.2)
    started = time.perf_counter()
    outcomes = asyncio.run(_replay_one(_Silent, pc, opts))
    assert time.perf_counter() - started < 2.0
    assert [(o.code, o.response_code, o.error) for o in outcomes] == [
        (RequestCode.PULL_MESSAGE, None, None),
        (RequestCode.HEART_BEAT, None, "timeout"),
    ]
    assert outcomes[0].long_poll and not outcomes[1].long_poll
    report = summarize(outcomes)
    assert report["errors"] == 1 and report["error_kinds"] == {"timeout": 1}
