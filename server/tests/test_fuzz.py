"""Bad input never crashes the server: fuzzed frames, headers, extFields and bodies (hypothesis) and a
bounded random-bytes run against a name server + broker (real store) running in a background thread.

After every example a separate, long-lived connection must still be answered; processors must answer
bad requests with an error response (typed CodecError -> SYSTEM_ERROR), never with an unexpected
exception (those are logged by the core as "processor failed" and counted here).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqgate.server.broker import BrokerController
from rmqgate.server.config import BrokerConfig
from rmqgate.server.namesrv import NamesrvController
from rmqgate.server.remoting import RemotingServer
from rmqgate.tools.traffic import Direction, Kind, Role, iter_pcap_records
from rmqgate.wire import FrameDecoder, RemotingCommand, ResponseCode, SerializeType, encode_frame
from rmqgate.wire.codes import RequestCode
from rmqgate.wire.message import format_properties
from rmqgate.wire.message_batch import BatchEntry, encode_batch


class _Failures(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class ServerThread:
    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stopped = asyncio.Event()
        self.root = root
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(20), "server thread did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self.namesrv = NamesrvController()
        self.ns_server = RemotingServer("127.0.0.1", 0, self.namesrv.processors())
        await self.ns_server.start()
        config = BrokerConfig(
            brokerName="fuzz", listenPort=0, namesrvAddr=f"127.0.0.1:{self.ns_server.port}",
            storePathRootDir=str(self.root), mappedFileSizeCommitLog=1 << 22, mappedFileSizeConsumeQueue=6000,
            maxHashSlotNum=5000, maxIndexNum=20000,
        )  # fmt: skip
        self.broker = BrokerController(config, listen_host="127.0.0.1")
        await self.broker.start()
        self.ports = {"namesrv": self.ns_server.port, "broker": self.broker.port}
        self.ready.set()
        await self.stopped.wait()
        await self.broker.stop()
        await self.ns_server.stop()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.thread.join(20)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, _Failures]]:
    failures = _Failures()
    logging.getLogger("rmqgate.server").addHandler(failures)
    srv = ServerThread(tmp_path_factory.mktemp("fuzzstore"))
    try:
        yield srv, failures
    finally:
        srv.stop()
        logging.getLogger("rmqgate.server").removeHandler(failures)


def roundtrip(port: int, cmd: RemotingCommand) -> RemotingCommand:
    """``ask`` for a request that must be answered."""
    answer = ask(port, cmd)
    assert answer is not None, f"no answer to {cmd}"
    return answer


def healthy(srv: ServerThread) -> None:
    for port in srv.ports.values():
        resp = roundtrip(
            port, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, opaque=7)
        )
        assert resp.is_response and resp.opaque == 7


def fire(port: int, data: bytes, wait: float = 0.3) -> bytes:
    """Send bytes; return whatever comes back before the server closes or ``wait`` passes."""
    out = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        try:
            s.sendall(data)
            s.settimeout(wait)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
    return bytes(out)


CODES = sorted({int(c) for c in RequestCode} - {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE})
FIELDS = [
    "topic", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "consumerGroup", "queueId", "queueOffset",
    "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion", "subscription", "offset",
    "commitOffset", "timestamp", "key", "maxNum", "beginTimestamp", "endTimestamp", "brokerName", "brokerAddr",
    "clusterName", "haServerAddr", "brokerId", "compressed", "bodyCrc32", "namespace", "value", "clientID",
    "producerGroup", "defaultTopic", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "order",
    "groupName", "cluster", "_UNIQUE_KEY_QUERY",
]  # fmt: skip
#: what a fuzzed or mutated request carries in an ext field
BREAKING_VALUES = [
    "", "0", "1", "-1", "4", "true", "false", "TBW102", "FuzzT", "%RETRY%g", "*", "2147483648", "9" * 30, "x y",
    "\x01\x02", "SINGLE_TAG", "g", "-2147483649", "9223372036854775808", "abc", "x" * 70_000, "a\ud800b",
    "g" * 600, "%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", " 1", "1.5", "\x00", "..",
]  # fmt: skip
values = st.one_of(
    st.sampled_from(BREAKING_VALUES),
    st.text(max_size=20),
    st.integers(-(2**63), 2**63).map(str),
)
bodies = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.sampled_from(
        [
            b"{}",
            b"[]",
            b"null",
            b'{"consumerDataSet":[{}]}',
            b'{"consumerDataSet":[1]}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"FuzzT","subVersion":"x"}]}]}',
            b'{"mqSet":[{"queueId":"x"}]}',
            b'{"counter":"a"}',
            b'{"groupName":5}',
            b"\x78\x9c\x03\x00",
        ]
    ),
    st.builds(
        lambda xs: encode_batch([BatchEntry(body=x) for x in xs]),
        st.lists(st.binary(max_size=20), max_size=3),
    ),
)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    ext = draw(st.dictionaries(st.sampled_from(FIELDS), values, max_size=12))
    if draw(st.booleans()):
        ext["i"] = format_properties(
            draw(
                st.dictionaries(
                    st.sampled_from(["TAGS", "KEYS", "DELAY", "TRAN_MSG", "UNIQ_KEY"]), values, max_size=3
                )
            )
        )
    return RemotingCommand.request(
        draw(st.sampled_from(CODES)),
        ext if draw(st.booleans()) or ext else None,
        draw(bodies),
        opaque=draw(st.integers(1, 2**31 - 1)),
        serialize_type=draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])),
        version=draw(st.sampled_from([0, 63, 121, 333, 409, 479, -5])),
    )


_NOW = "1700000000000"
TEMPLATES: list[tuple[int, dict[str, str], bytes | None]] = [
    (310, {"a": "PG", "b": "FuzzT", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": _NOW, "h": "0",
           "i": "TAGS\x01A\x02KEYS\x01k1", "j": "0", "k": "false", "m": "false"}, b"body"),
    (10, {"producerGroup": "PG", "topic": "FuzzT", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
          "queueId": "1", "sysFlag": "0", "bornTimestamp": _NOW, "flag": "0"}, b"body"),
    (320, {"a": "PG", "b": "FuzzT", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": _NOW, "h": "0", "m": "true"},
     encode_batch([BatchEntry(body=b"x", properties={"UNIQ_KEY": "U"})])),
    (11, {"consumerGroup": "G", "topic": "FuzzT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
          "sysFlag": "5", "commitOffset": "1", "suspendTimeoutMillis": "100", "subVersion": "0",
          "subscription": "A||B", "expressionType": "TAG"}, None),
    (34, {}, b'{"clientID":"c1","consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY",'
              b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
              b'"subscriptionDataSet":[{"topic":"FuzzT","subString":"*","subVersion":1}]}],'
              b'"producerDataSet":[{"groupName":"PG"}]}'),
    (103, {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "C", "haServerAddr": "x",
           "brokerId": "0", "compressed": "false"},
     b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},'
     b'"topicConfigTable":{"Z":{"topicName":"Z","readQueueNums":1,"writeQueueNums":1,"perm":6}}}}'),
    (14, {"consumerGroup": "G", "topic": "FuzzT", "queueId": "0"}, None),
    (15, {"consumerGroup": "G", "topic": "FuzzT", "queueId": "0", "commitOffset": "3"}, None),
    (29, {"topic": "FuzzT", "queueId": "0", "timestamp": _NOW}, None),
    (33, {"offset": "0"}, None),
    (12, {"topic": "FuzzT", "key": "k1", "maxNum": "3", "beginTimestamp": "0", "endTimestamp": "9" * 15}, None),
    (17, {"topic": "FuzzT2", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
          "topicFilterType": "SINGLE_TAG", "order": "false"}, None),
    (41, {}, b'{"consumerGroup":"G","clientId":"c1","mqSet":[{"topic":"FuzzT","brokerName":"fuzz","queueId":0}]}'),
    (105, {"topic": "FuzzT"}, None),
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> RemotingCommand:
    code, ext, body = draw(st.sampled_from(TEMPLATES))
    ext = dict(ext)
    for key in draw(st.lists(st.sampled_from(sorted(ext) or ["x"]), max_size=3)):
        if draw(st.booleans()):
            ext.pop(key, None)
        else:
            ext[key] = draw(values)
    if body is not None and draw(st.integers(0, 3)) == 0:
        cut = draw(st.integers(0, len(body)))
        body = body[:cut] + draw(st.binary(max_size=8))
    if code == 11 and "sysFlag" in ext and ext["sysFlag"].lstrip("-").isdigit():
        ext["sysFlag"] = str(
            int(ext["sysFlag"]) & ~2 & 0x7FFFFFFF
        )  # never park: the test waits for an answer
    return RemotingCommand.request(
        code, ext, body, opaque=draw(st.integers(1, 2**31 - 1)),
        serialize_type=draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])),
    )  # fmt: skip


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@given(cmd=st.one_of(commands(), mutated()))
def test_fuzzed_requests_get_an_answer(server: tuple[ServerThread, _Failures], cmd: RemotingCommand) -> None:
    srv, failures = server
    for port in srv.ports.values():
        resp = roundtrip(port, cmd)
        # the request's serialization, but for the answers Java writes itself, in JSON: a code the
        # server lacks, a processor's exception, VIEW_MESSAGE_BY_ID / QUERY_MESSAGE's found records
        java_writes = resp.code in (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.SYSTEM_ERROR) or (
            resp.code == 0 and cmd.code in (RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.QUERY_MESSAGE)
        )
        assert resp.is_response
        assert resp.serialize_type == cmd.serialize_type or (
            resp.serialize_type == SerializeType.JSON and java_writes
        )
        assert resp.code != 0 or cmd.code not in (RequestCode.REGISTER_BROKER,) or cmd.ext_fields
    assert not [r for r in failures.records if "processor failed" in r.getMessage()], failures.records[
        -1
    ].getMessage()
    healthy(srv)


@FUZZ
@given(header=st.binary(max_size=200), ser=st.sampled_from([0, 1, 2, 255]), body=st.binary(max_size=50))
def test_fuzzed_headers(server: tuple[ServerThread, _Failures], header: bytes, ser: int, body: bytes) -> None:
    srv, failures = server
    frame = struct.pack(">iI", 4 + len(header) + len(body), (ser << 24) | len(header)) + header + body
    for port in srv.ports.values():
        fire(port, frame)
    assert not [r for r in failures.records if "processor failed" in r.getMessage()]
    healthy(srv)


@FUZZ
@given(header=st.dictionaries(st.sampled_from(["code", "opaque", "flag", "version", "language", "extFields", "remark"]),
                              st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=5), st.none(), st.booleans(),
                                        st.dictionaries(st.text(max_size=4), st.one_of(st.text(max_size=4), st.integers()), max_size=3)),
                              max_size=7))  # fmt: skip
def test_fuzzed_json_headers(server: tuple[ServerThread, _Failures], header: dict) -> None:
    srv, failures = server
    raw = json.dumps(header).encode()
    frame = struct.pack(">ii", 4 + len(raw), len(raw)) + raw
    for port in srv.ports.values():
        fire(port, frame, 0.2)
    assert not [r for r in failures.records if "processor failed" in r.getMessage()]
    healthy(srv)


def test_random_bytes_bounded_run(server: tuple[ServerThread, _Failures]) -> None:
    srv, failures = server
    rng = random.Random(4)
    for i in range(200):
        size = rng.choice([1, 3, 8, 17, 64, 500, 4000])
        data = bytes(rng.getrandbits(8) for _ in range(size))
        if i % 3 == 0:  # plausible envelope, random content
            data = (
                struct.pack(
                    ">ii", len(data) + 4, rng.choice([0, 1 << 24]) | min(len(data), rng.randrange(0, 64))
                )
                + data
            )
        fire(srv.ports["broker" if i % 2 else "namesrv"], data, 0.05)
    assert not [r for r in failures.records if "processor failed" in r.getMessage()]
    healthy(srv)


def test_oversized_and_half_frames_leave_others_alone(server: tuple[ServerThread, _Failures]) -> None:
    srv, _ = server
    port = srv.ports["broker"]
    held = socket.create_connection(("127.0.0.1", port))
    held.sendall(struct.pack(">ii", 1000, 10) + b"{")  # a frame that never completes
    closed = fire(port, struct.pack(">ii", 1 << 30, 4))  # over the 16 MiB frame limit: closed at once
    assert closed == b""
    healthy(srv)
    held.close()


def test_group_names_lmdb_cannot_key_as_they_are(server: tuple[ServerThread, _Failures]) -> None:
    """An empty group (the SEND of a "%RETRY%" topic) and one past LMDB's 511-byte keys are stored as
    Java stores any string: before, the first answered SYSTEM_ERROR and the offset of the second
    failed every later persist of every group's offsets."""
    srv, failures = server
    port = srv.ports["broker"]
    props = format_properties({"TAGS": "t", "RECONSUME_TIME": "1", "MAX_RECONSUME_TIMES": "16"})
    send = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "PG", "b": "%RETRY%", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
         "i": props, "j": "1", "k": "false"},
        body=b"x", opaque=11,
    )  # fmt: skip
    long_group = "g" * 600
    offset = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": long_group, "topic": "TBW102", "queueId": "0", "commitOffset": "5"},
        opaque=12,
    )
    unregister = RemotingCommand.request(
        RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": long_group}, opaque=13
    )
    for cmd in (send, offset, unregister):
        assert roundtrip(port, cmd).code == ResponseCode.SUCCESS, cmd
    assert not [r for r in failures.records if "processor failed" in r.getMessage()]
    meta = srv.broker.store.meta
    meta.persist_offsets()
    assert meta.get("consumer_offsets", f"TBW102@{long_group}") == {"0": 5}
    healthy(srv)


def corpus_requests(corpus: Path) -> list[tuple[str, RemotingCommand]]:
    """Every request the stock and third-party clients sent in the corpus captures (PULL aside: it
    may be held for a long poll), with the server it went to."""
    out = []
    for path in sorted(corpus.glob("pcap*/*.pcap")):
        for rec in iter_pcap_records(path):
            if rec.kind is Kind.FRAME and rec.direction is Direction.C2S:
                for cmd in FrameDecoder().feed(rec.data):
                    if not cmd.is_response and cmd.code != RequestCode.PULL_MESSAGE:
                        out.append(("namesrv" if rec.role is Role.NAMESRV else "broker", cmd))
    return out


def mutate(rng: random.Random, cmd: RemotingCommand) -> RemotingCommand:
    """The request with one to three things broken: an ext field's value, a missing field, bytes of
    the body, a cut body, the other serialization, another version."""
    ext = dict(cmd.ext_fields or {})
    body = bytes(cmd.body) if cmd.body else b""
    ser, version = cmd.serialize_type, cmd.version
    for _ in range(rng.choice((1, 1, 2, 3))):
        what = rng.randrange(6)
        if what == 0 and ext:
            ext[rng.choice(sorted(ext))] = rng.choice(BREAKING_VALUES)
        elif what == 1 and ext:
            del ext[rng.choice(sorted(ext))]
        elif what == 2 and body:
            flipped = bytearray(body)
            for _ in range(rng.randrange(1, 8)):
                flipped[rng.randrange(len(flipped))] = rng.randrange(256)
            body = bytes(flipped)
        elif what == 3 and body:
            body = body[: rng.randrange(len(body))]
        elif what == 4:
            ser = SerializeType.ROCKETMQ if ser == SerializeType.JSON else SerializeType.JSON
        else:
            version = rng.choice((0, -1, 317, 32767))
    return RemotingCommand(
        cmd.code, language=cmd.language, version=version, opaque=rng.randrange(1, 1 << 31), flag=cmd.flag,
        ext_fields=ext, body=body or None, serialize_type=ser,
    )  # fmt: skip


def frame_of(cmd: RemotingCommand) -> bytes:
    """``encode_frame``; but text with a lone surrogate, which our encoder writes as "?", goes in the
    JSON header a client can still send: escaped ("\\ud800"), so that the server gets the surrogate."""
    ext = cmd.ext_fields or {}
    if all(_utf8_encodes(t) for t in (*ext, *ext.values(), cmd.remark or "")):
        return encode_frame(cmd)
    header = json.dumps(
        {"code": cmd.code, "language": "JAVA", "version": cmd.version, "opaque": cmd.opaque, "flag": cmd.flag,
         "remark": cmd.remark, "extFields": ext}
    ).encode()  # fmt: skip
    body = bytes(cmd.body or b"")
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _utf8_encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def ask(port: int, cmd: RemotingCommand) -> RemotingCommand | None:
    """Send ``cmd`` on a connection of its own; its answer, or None for a oneway request or an
    END_TRANSACTION left unanswered (Java answers none without a commit/rollback state)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame_of(cmd))
        if cmd.flag & 2:  # oneway
            return None
        dec = FrameDecoder()
        answer = None
        s.settimeout(1.0 if cmd.code == RequestCode.END_TRANSACTION else 10.0)
        try:
            while answer is None and (data := s.recv(1 << 20)):
                answer = next((r for r in dec.feed(data) if r.opaque == cmd.opaque), None)
        except TimeoutError:
            assert cmd.code == RequestCode.END_TRANSACTION, cmd
            return None
        assert answer is not None and answer.is_response, f"closed instead of answering {cmd}"
        return answer


def run_against_server(tmp_path: Path, commands: Iterator[tuple[str, RemotingCommand]]) -> None:
    """Each command answered, and nothing failing in the server or the store, whose persist rounds
    and close run on after the requests were answered."""
    errors = _Failures()
    for name in ("rmqgate", "asyncio"):
        logging.getLogger(name).addHandler(errors)
    srv = ServerThread(tmp_path)
    try:
        for role, cmd in commands:
            ask(srv.ports[role], cmd)
        healthy(srv)
        srv.broker.store.meta.persist_offsets()
    finally:
        srv.stop()
        for name in ("rmqgate", "asyncio"):
            logging.getLogger(name).removeHandler(errors)
    assert not errors.records, [r.getMessage()[:300] for r in errors.records]


def test_mutated_corpus_requests(corpus: Path, tmp_path: Path) -> None:
    """Real requests with one thing broken at a time reach deeper than random ones."""
    requests = corpus_requests(corpus)
    assert len(requests) > 1000
    rng = random.Random(10)

    def commands() -> Iterator[tuple[str, RemotingCommand]]:
        for _ in range(1500):
            role, original = rng.choice(requests)
            yield role, mutate(rng, original)

    run_against_server(tmp_path, commands())


JSON_VALUES = [None, True, 0, -1, 2**31, -(2**63) - 1, 2**64, 1.5, "", "x", "a\ud800b", "-1", "g" * 600, [], {},
               [None], {"": None}, [[[[]]]], "9" * 40]  # fmt: skip


def mutate_json(rng: random.Random, tree: object) -> object:
    """``tree`` (a parsed JSON body) with one to three values replaced by another type, removed, or
    repeated (a list entry)."""
    tree = json.loads(json.dumps(tree))
    for _ in range(rng.choice((1, 1, 2, 3))):
        containers: list[tuple[dict | list, object]] = []
        stack = [tree]
        while stack:
            node = stack.pop()
            for key, value in node.items() if isinstance(node, dict) else enumerate(node):
                containers.append((node, key))
                if isinstance(value, dict | list):
                    stack.append(value)
        if not containers:
            return rng.choice(JSON_VALUES)
        parent, key = rng.choice(containers)
        what = rng.random()
        if what < 0.7:
            parent[key] = rng.choice(JSON_VALUES)  # type: ignore[index]
        elif isinstance(parent, dict):
            del parent[key]
        elif len(parent) < 64:
            parent.extend([parent[key]] * rng.choice((1, 50)))  # type: ignore[index]
        tree = json.loads(json.dumps(tree))  # repeated entries become copies, not shared references
    return tree


def test_mutated_json_bodies(corpus: Path, tmp_path: Path) -> None:
    """The corpus requests with JSON bodies (heartbeats, queue locks, broker registrations) with
    values of the wrong type, missing or repeated: each answered, and no processor failing on a type
    it did not expect (that an error names the field: test_broker's badly-typed-bodies test)."""
    requests = []
    for role, cmd in corpus_requests(corpus):
        try:
            tree = json.loads(bytes(cmd.body or b""))
        except ValueError:  # fastjson's bare integer keys: not needed for the mix
            continue
        if isinstance(tree, dict):
            requests.append((role, cmd, tree))
    assert {RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ} <= {
        c.code for _, c, _ in requests
    }
    rng = random.Random(7)

    def commands() -> Iterator[tuple[str, RemotingCommand]]:
        for _ in range(1500):
            role, original, tree = rng.choice(requests)
            body = json.dumps(mutate_json(rng, tree)).encode("utf-8", "surrogatepass")
            yield role, RemotingCommand(
                original.code, language=original.language, version=original.version,
                opaque=rng.randrange(1, 1 << 31), flag=original.flag, ext_fields=dict(original.ext_fields or {}),
                body=body, serialize_type=original.serialize_type,
            )  # fmt: skip

    run_against_server(tmp_path, commands())
