"""The replay's plan: recorded traffic (pcap or rmqcap) read into per-connection request lists with
their recorded responses (``load_plan``, ``build_connection_plan`` for one connection's frames), and
the raw-frame patching the replay sends them with (opaque, extFields, topics in bodies), which
changes only the bytes of the fields it patches."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rmqgate.tools.capture import Direction, Kind, Role
from rmqgate.tools.proxy import broker_addresses
from rmqgate.tools.traffic import iter_records
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import CodecError
from rmqgate.wire.frame import decode_frame, encode_frame
from rmqgate.wire.layout import FRAME_PREFIX, HEADER_LENGTH_MASK, RocketMQHeader
from rmqgate.wire.serialization import decode_rocketmq_header, encode_rocketmq_header

SEND_CODES = frozenset({10, 310, 320, 324, 325})
PULL_CODES = frozenset({int(RequestCode.PULL_MESSAGE), int(RequestCode.LITE_PULL_MESSAGE)})
#: Connections sending these are a broker talking to its name server: never replayed.
BROKER_ONLY_CODES = frozenset(
    {
        int(RequestCode.REGISTER_BROKER),
        int(RequestCode.UNREGISTER_BROKER),
        int(RequestCode.QUERY_DATA_VERSION),
    }
)
BODY_TOPIC_CODES = frozenset(
    {
        int(RequestCode.HEART_BEAT),
        int(RequestCode.LOCK_BATCH_MQ),
        int(RequestCode.UNLOCK_BATCH_MQ),
        int(RequestCode.CHECK_CLIENT_CONFIG),
        int(RequestCode.QUERY_ASSIGNMENT),
    }
)


def _opaque_offset() -> int:
    pos = FRAME_PREFIX.size
    for sub in RocketMQHeader.subcons:
        if sub.name == "opaque":
            return pos
        pos += sub.sizeof()
    raise AssertionError("RocketMQHeader has no opaque")


_OPAQUE_POS = _opaque_offset()
_JSON_OPAQUE = re.compile(rb'"opaque"\s*:\s*(-?\d+)')
_JSON_VALUE = rb'\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null)'


# -- raw frame patching -------------------------------------------------------------------------


def frame_parts(raw: bytes) -> tuple[int, bytes, bytes]:
    """(serialization type, header bytes, body bytes) of a raw frame."""
    _, word = FRAME_PREFIX.unpack_from(raw, 0)
    end = FRAME_PREFIX.size + (word & HEADER_LENGTH_MASK)
    return word >> 24, raw[FRAME_PREFIX.size : end], raw[end:]


def build_frame(serialize_type: int, header: bytes, body: bytes) -> bytes:
    return (
        FRAME_PREFIX.pack(4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body
    )


def patch_opaque(raw: bytes, opaque: int) -> bytes:
    st, header, body = frame_parts(raw)
    if st:
        return raw[:_OPAQUE_POS] + opaque.to_bytes(4, "big", signed=True) + raw[_OPAQUE_POS + 4 :]
    matches = list(_JSON_OPAQUE.finditer(header))
    if not matches:
        raise CodecError("JSON header has no opaque")
    m = matches[-1]
    header = header[: m.start(1)] + str(opaque).encode() + header[m.end(1) :]
    return build_frame(st, header, body)


def header_ext(raw: bytes) -> dict[str, str]:
    """extFields as the sender meant them (JSON numbers/booleans as their text, strings unquoted)."""
    st, header, _ = frame_parts(raw)
    if st:
        return dict(decode_rocketmq_header(header).ext_fields or {})
    try:
        ext = json.loads(header).get("extFields") or {}
    except ValueError:
        return {}
    out = {}
    for k, v in ext.items():
        if v is None:
            continue
        out[k] = v if isinstance(v, str) else ("true" if v is True else "false" if v is False else str(v))
    return out


def patch_ext(raw: bytes, updates: dict[str, str]) -> bytes:
    """Set extFields values in place (JSON: only the value token changes; its quoting is kept)."""
    if not updates:
        return raw
    st, header, body = frame_parts(raw)
    if st:
        cmd = decode_rocketmq_header(header)
        ext = dict(cmd.ext_fields or {})
        ext.update(updates)
        cmd.ext_fields = ext
        return build_frame(st, encode_rocketmq_header(cmd), body)
    for key, value in updates.items():
        pattern = re.compile(b'"' + re.escape(key.encode()) + b'"' + _JSON_VALUE)
        m = None
        for m in pattern.finditer(header):  # noqa: B007 - the last one is outside any nested object
            pass
        if m is None:
            continue
        old = m.group(1)
        if old.startswith(b'"') or not re.fullmatch(r"-?\d+|true|false", value):
            token = json.dumps(value, ensure_ascii=False).encode()
        else:
            token = value.encode()
        header = header[: m.start(1)] + token + header[m.end(1) :]
    return build_frame(st, header, body)


def map_body_topics(body: bytes, topic_map: dict[str, str]) -> bytes:
    for old, new in topic_map.items():
        body = re.sub(
            rb'("topic"\s*:\s*)"' + re.escape(old.encode()) + b'"',
            lambda m, n=new: m.group(1) + json.dumps(n).encode(),
            body,
        )
    return body


def offset_of_msg_id(msg_id: str) -> int | None:
    """The CommitLog offset in an offsetMsgId (last 16 hex digits), or None."""
    try:
        return int(msg_id.split(",")[0][-16:], 16) if len(msg_id) >= 32 else None
    except ValueError:
        return None


# -- the plan -------------------------------------------------------------------------------------


@dataclass(slots=True)
class PlannedRequest:
    ts: float  # recorded send time
    raw: bytes
    code: int
    opaque: int
    flag: int
    ext: dict[str, str]
    resp_ts: float | None = None
    resp_code: int | None = None
    resp_ext: dict[str, str] | None = None

    @property
    def oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    @property
    def recorded_latency(self) -> float | None:
        return None if self.resp_ts is None else self.resp_ts - self.ts

    @property
    def expects_response(self) -> bool:
        return self.resp_ts is not None or not self.oneway


@dataclass(slots=True)
class PlannedConnection:
    conn_id: int
    role: int
    server: str
    broker_name: str | None
    requests: list[PlannedRequest] = field(default_factory=list)
    #: server-initiated request code -> the client's recorded answers, in order (raw frames)
    answers: dict[int, list[bytes]] = field(default_factory=dict)
    #: END_TRANSACTION frames sent after a CHECK_TRANSACTION_STATE, by message id
    check_answers: dict[str, PlannedRequest] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def first_ts(self) -> float:
        return self.requests[0].ts if self.requests else math.inf


@dataclass
class Plan:
    source: str
    start: float
    connections: list[PlannedConnection]
    broker_addrs: dict[str, str]  # recorded broker address -> broker name
    #: topics the recorded servers already had when the capture began (their first route lookup
    #: succeeded before anything in the capture created them): topic -> queue counts and perm
    preexisting_topics: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def replayable(self) -> list[PlannedConnection]:
        return [c for c in self.connections if c.skipped is None and c.requests]


class ConnectionPlanner:
    """Builds one ``PlannedConnection`` from its frames, fed in recorded order.

    ``rewrite`` may change a client request in place before it is planned (returns True if it did;
    the Spark job gives clones their identity this way).
    """

    def __init__(
        self, pc: PlannedConnection, rewrite: Callable[[RemotingCommand], bool] | None = None
    ) -> None:
        self.pc = pc
        self.rewrite = rewrite
        self.pending: dict[int, PlannedRequest] = {}  # opaque -> client request awaiting its response
        self.server_reqs: dict[int, int] = {}  # opaque -> code of a server request awaiting its answer

    def add(self, ts: float, c2s: bool, raw: bytes, cmd: RemotingCommand) -> PlannedRequest | None:
        """Plan one frame (``cmd`` decoded from ``raw``); returns the client request it is or answers."""
        pc = self.pc
        if c2s:
            if cmd.flag & RESPONSE_FLAG:
                code = self.server_reqs.pop(cmd.opaque, None)
                if code is not None:
                    pc.answers.setdefault(code, []).append(raw)
                return None
            if self.rewrite is not None and self.rewrite(cmd):
                raw = encode_frame(cmd)
            ext = header_ext(raw)
            req = PlannedRequest(ts, raw, cmd.code, cmd.opaque, cmd.flag, ext)
            if cmd.code in BROKER_ONLY_CODES:
                pc.skipped = "broker registration traffic"
            if cmd.code == RequestCode.END_TRANSACTION and ext.get("fromTransactionCheck") in ("true", "1"):
                pc.check_answers[
                    ext.get("msgId") or ext.get("transactionId") or str(len(pc.check_answers))
                ] = req
            else:
                pc.requests.append(req)
            self.pending[cmd.opaque] = req
            return req
        if not cmd.flag & RESPONSE_FLAG:
            self.server_reqs[cmd.opaque] = cmd.code
            return None
        req = self.pending.pop(cmd.opaque, None)
        if req is not None:
            req.resp_ts = ts
            req.resp_code = cmd.code
            if req.code in SEND_CODES or req.code == RequestCode.END_TRANSACTION:
                req.resp_ext = dict(cmd.ext_fields or {})
        return req

    def finish(self) -> PlannedConnection:
        pc = self.pc
        if not pc.requests and not pc.check_answers and pc.skipped is None:
            pc.skipped = "no requests"
        return pc


def build_connection_plan(
    pc: PlannedConnection,
    frames: Iterable[tuple[float, bool, bytes]],
    rewrite: Callable[[RemotingCommand], bool] | None = None,
) -> PlannedConnection:
    """Fill ``pc`` from its frames, ``(ts, client_to_server, raw)`` in recorded order (undecodable
    frames are left out); ``pc.skipped`` says why it is not to be replayed, if so."""
    planner = ConnectionPlanner(pc, rewrite)
    for ts, c2s, raw in frames:
        try:
            cmd = decode_frame(raw)
        except CodecError:
            continue
        planner.add(ts, c2s, raw, cmd)
    return planner.finish()


def load_plan(path: str | Path) -> Plan:
    """Read a pcap or capture into per-connection request lists with their recorded responses."""
    planners: dict[int, ConnectionPlanner] = {}
    broker_addrs: dict[str, str] = {}
    touched: set[str] = set()  # topics created, sent to or looked up so far
    preexisting: dict[str, dict[str, int]] = {}
    start = math.inf
    for rec in iter_records(path):
        if rec.kind == Kind.CONN_OPEN:
            planners[rec.conn_id] = ConnectionPlanner(
                PlannedConnection(
                    rec.conn_id, rec.role, str(rec.meta.get("server", "")), rec.meta.get("broker_name")
                )
            )
            continue
        if rec.kind != Kind.FRAME:
            continue
        planner = planners.get(rec.conn_id)
        if planner is None:
            planner = planners[rec.conn_id] = ConnectionPlanner(
                PlannedConnection(rec.conn_id, rec.role, "", None)
            )
        try:
            cmd = decode_frame(rec.data)
        except CodecError:
            continue
        c2s = rec.direction == Direction.C2S
        req = planner.add(rec.ts, c2s, rec.data, cmd)
        if req is None:
            continue
        if c2s:
            start = min(start, rec.ts)
            ext = req.ext
            if cmd.code == RequestCode.UPDATE_AND_CREATE_TOPIC or cmd.code in SEND_CODES:
                topic = ext.get("b" if cmd.code in (310, 320, 325) else "topic")
                if topic:
                    touched.add(topic)
            if cmd.code in BROKER_ONLY_CODES and ext.get("brokerAddr") and ext.get("brokerName"):
                broker_addrs[ext["brokerAddr"]] = ext["brokerName"]
            continue
        if req.code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO) and cmd.body:
            broker_addrs.update(broker_addresses(bytes(cmd.body)))
        if req.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = req.ext.get("topic", "")
            if topic and topic not in touched and cmd.code == ResponseCode.SUCCESS and cmd.body:
                queues = _route_queues(bytes(cmd.body))
                if queues and topic != "TBW102" and not topic.startswith(("%RETRY%", "%DLQ%")):
                    preexisting[topic] = queues
            touched.add(topic)
    conns = [planner.finish() for planner in planners.values()]
    for pc in conns:
        if pc.role == Role.BROKER and pc.broker_name is None:
            pc.broker_name = _guess_broker_name(pc.server, broker_addrs)
    ordered = sorted(conns, key=lambda c: c.first_ts)
    return Plan(str(path), 0.0 if start == math.inf else start, ordered, broker_addrs, preexisting)


def _route_queues(body: bytes) -> dict[str, int] | None:
    from rmqgate.wire.fastjson import loads

    try:
        datas = loads(body).get("queueDatas") or []
        q = datas[0]
        return {"readQueueNums": int(q["readQueueNums"]), "writeQueueNums": int(q["writeQueueNums"]),
                "perm": int(q.get("perm", 6))}  # fmt: skip
    except Exception:
        return None


def _guess_broker_name(server: str, broker_addrs: dict[str, str]) -> str | None:
    if server in broker_addrs:
        return broker_addrs[server]
    port = server.rpartition(":")[2]
    by_port = {n for a, n in broker_addrs.items() if a.rpartition(":")[2] == port}
    if len(by_port) == 1:
        return by_port.pop()
    names = set(broker_addrs.values())
    return names.pop() if len(names) == 1 else None
