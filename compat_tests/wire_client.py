"""A small blocking remoting client for the compat suite: any request code, JSON or ROCKETMQ headers.

Built on rmqgate.wire's frame codec only, so it talks to rmqgate and to an Apache RocketMQ name
server / broker alike. Requests can be pipelined (``send`` returns the opaque, ``wait`` collects the
response later), frames the server initiates (NOTIFY_CONSUMER_IDS_CHANGED, ...) are kept in
``server_requests``. Blocking sockets keep tests free of an event loop; a second client gives
concurrency (e.g. a parked long-poll on one connection and a send on another).
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import time
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from rmqgate.wire.codes import LanguageCode, RequestCode, SerializeType
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.frame import FrameDecoder, encode_frame
from rmqgate.wire.header import format_value
from rmqgate.wire.headers import SendMessageRequestHeader

_opaques = itertools.count(1)

#: What a Java 4.9.8 client puts in ``version``; routes come back with quoted keys from 401 on.
JAVA_CLIENT_VERSION = 409

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# PullSysFlag bits (PROTOCOL.md §3.2)
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4

PERM_READ_WRITE = 6


class ConnectionClosed(ConnectionError):
    """The peer closed the connection before the awaited frame arrived."""


# --- fastjson-tolerant JSON --------------------------------------------------------------------
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,])(\s*)(-?\d+)(\s*):')


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON as fastjson writes it: numeric map keys may be bare (``{0:"127.0.0.1:10911"}``)."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")

    def quote(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)
        return f'{m.group(1)}{m.group(2)}"{m.group(3)}"{m.group(4)}:'

    return json.loads(_BARE_KEY.sub(quote, text))


_MQ_ENTRY = re.compile(
    r'\{"brokerName":"((?:[^"\\]|\\.)*)","queueId":(\d+),"topic":"((?:[^"\\]|\\.)*)"\}:(-?\d+)'
)


def mq_offset_table(data: bytes | bytearray | memoryview | str) -> dict[tuple[str, str, int], int]:
    """A fastjson ``Map<MessageQueue, Long>`` (object keys, which JSON cannot parse) as
    ``{(topic, brokerName, queueId): value}``."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    return {(t, b, int(q)): int(v) for b, q, t, v in _MQ_ENTRY.findall(text)}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- message helpers (text formats only; binary layouts come from rmqgate.wire.message) ------------
def format_properties(props: Mapping[str, str]) -> str:
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items())


def parse_properties(text: str) -> dict[str, str]:
    out = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        key, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[key] = value
    return out


def java_hash(s: str) -> int:
    """Java String.hashCode (signed 32-bit over UTF-16 code units): the ConsumeQueue tag code."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def decode_messages(body: bytes | None) -> list[Any]:
    """The stored messages in a PULL / QUERY / VIEW body (rmqgate.wire.message.MessageExt list)."""
    from rmqgate.wire.message import iter_messages  # imported late: only pull-checking tests need it

    return list(iter_messages(body or b""))


def encode_batch(messages: Iterable[tuple[bytes, Mapping[str, str]]]) -> bytes:
    """A SEND_BATCH_MESSAGE body from (body, properties) pairs."""
    from rmqgate.wire.message_batch import BatchEntry, encode_batch

    entries = [BatchEntry(flag=0, body=body, properties=dict(props)) for body, props in messages]
    return encode_batch(entries)


def uniq_key() -> str:
    """A client message id (UNIQ_KEY) in the shape MessageClientIDSetter produces (32 hex chars)."""
    import os
    import random

    ip = bytes([127, 0, 0, 1])
    pid = (os.getpid() & 0xFFFF).to_bytes(2, "big")
    rnd = random.getrandbits(48).to_bytes(6, "big")
    return (ip + pid + rnd + next(_opaques).to_bytes(4, "big")[-4:]).hex().upper()


def heartbeat_body(
    client_id: str,
    *,
    producer_groups: Iterable[str] = (),
    consumers: Iterable[Mapping[str, Any]] = (),
) -> bytes:
    """HeartbeatData JSON. ``consumers`` items: dict(group=..., topics={topic: tag_expression}, ...)."""
    consumer_data = []
    for c in consumers:
        subs = []
        for topic, expr in c.get("topics", {}).items():
            tags = [] if expr.strip() == "*" else [t.strip() for t in expr.split("||") if t.strip()]
            subs.append(
                {
                    "classFilterMode": False,
                    "codeSet": [java_hash(t) for t in tags],
                    "expressionType": "TAG",
                    "subString": expr,
                    "subVersion": int(time.time() * 1000),
                    "tagsSet": tags,
                    "topic": topic,
                }
            )
        consumer_data.append(
            {
                "consumeFromWhere": c.get("consume_from_where", "CONSUME_FROM_LAST_OFFSET"),
                "consumeType": c.get("consume_type", "CONSUME_PASSIVELY"),
                "groupName": c["group"],
                "messageModel": c.get("message_model", "CLUSTERING"),
                "subscriptionDataSet": subs,
                "unitMode": False,
            }
        )
    return dumps(
        {
            "clientID": client_id,
            "consumerDataSet": consumer_data,
            "producerDataSet": [{"groupName": g} for g in producer_groups],
        }
    )


def register_broker_body(
    topics: Mapping[str, Mapping[str, Any]], *, counter: int = 1, compressed: bool = False
) -> bytes:
    """RegisterBrokerBody, plain JSON or the compressed binary form (PROTOCOL.md §3.8)."""
    data_version = {"counter": counter, "timestamp": int(time.time() * 1000)}
    if not compressed:
        return dumps(
            {
                "filterServerList": [],
                "topicConfigSerializeWrapper": {"dataVersion": data_version, "topicConfigTable": topics},
            }
        )

    def chunk(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(4, "big") + raw

    parts = [chunk(json.dumps(data_version)), len(topics).to_bytes(4, "big")]
    for name, tc in topics.items():
        parts.append(
            chunk(f"{name} {tc['readQueueNums']} {tc['writeQueueNums']} {tc['perm']} {tc['topicFilterType']}")
        )
    parts.append(chunk("[]"))
    return zlib.compress(b"".join(parts), 9)


def topic_config(name: str, queues: int = 4, perm: int = PERM_READ_WRITE) -> dict[str, Any]:
    return {
        "order": False,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


# --- the client --------------------------------------------------------------------------------
class WireClient:
    """One connection. ``serialize_type`` / ``language`` / ``version`` are the defaults per request."""

    def __init__(
        self,
        addr: str,
        *,
        serialize_type: int = SerializeType.JSON,
        language: int = LanguageCode.JAVA,
        version: int = JAVA_CLIENT_VERSION,
        timeout: float = 10.0,
    ) -> None:
        self.addr = addr
        self.serialize_type = serialize_type
        self.language = language
        self.version = version
        self.timeout = timeout
        self.sock = socket.create_connection(split_addr(addr), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.responses: dict[int, RemotingCommand] = {}
        self.server_requests: list[RemotingCommand] = []
        self.closed = False

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    @property
    def local_addr(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    # -- sending ----------------------------------------------------------------------------------
    def command(
        self,
        code: int,
        ext: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        *,
        oneway: bool = False,
        serialize_type: int | None = None,
        language: int | None = None,
        version: int | None = None,
        remark: str | None = None,
        opaque: int | None = None,
    ) -> RemotingCommand:
        fields = None if ext is None else {k: format_value(v) for k, v in ext.items() if v is not None}
        return RemotingCommand.request(
            code,
            fields,
            body,
            opaque=next(_opaques) if opaque is None else opaque,
            oneway=oneway,
            serialize_type=self.serialize_type if serialize_type is None else serialize_type,
            language=self.language if language is None else language,
            version=self.version if version is None else version,
            remark=remark,
        )

    def send_command(self, cmd: RemotingCommand) -> int:
        self.send_raw(encode_frame(cmd))
        return cmd.opaque

    def send(
        self, code: int, ext: Mapping[str, Any] | None = None, body: bytes | None = None, **kw: Any
    ) -> int:
        """Send a request without waiting; returns its opaque for ``wait``."""
        return self.send_command(self.command(code, ext, body, **kw))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def invoke(
        self,
        code: int,
        ext: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        *,
        timeout: float | None = None,
        **kw: Any,
    ) -> RemotingCommand:
        return self.wait(self.send(code, ext, body, **kw), timeout)

    def oneway(
        self, code: int, ext: Mapping[str, Any] | None = None, body: bytes | None = None, **kw: Any
    ) -> None:
        self.send(code, ext, body, oneway=True, **kw)

    # -- receiving --------------------------------------------------------------------------------
    def _read_some(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no frame from {self.addr} in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            raise TimeoutError(f"no frame from {self.addr} in time") from None
        except ConnectionResetError as exc:
            raise ConnectionClosed(f"{self.addr} reset the connection") from exc
        if not data:
            raise ConnectionClosed(f"{self.addr} closed the connection")
        for cmd in self.decoder.feed(data):
            if cmd.is_response:
                self.responses[cmd.opaque] = cmd
            else:
                self.server_requests.append(cmd)

    def wait(self, opaque: int, timeout: float | None = None) -> RemotingCommand:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while opaque not in self.responses:
            self._read_some(deadline)
        return self.responses.pop(opaque)

    def wait_server_request(self, code: int, timeout: float = 10.0) -> RemotingCommand:
        """The next request the server sent us with ``code`` (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, cmd in enumerate(self.server_requests):
                if cmd.code == code:
                    return self.server_requests.pop(i)
            self._read_some(deadline)

    def poll_response(self, opaque: int, timeout: float) -> RemotingCommand | None:
        """The response if it arrives within ``timeout``, else None (the request stays pending)."""
        try:
            return self.wait(opaque, timeout)
        except TimeoutError:
            return None

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection within ``timeout`` (frames read meanwhile are kept)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._read_some(deadline)
        except ConnectionClosed:
            return True
        except TimeoutError:
            return False
        except OSError:
            return True

    # -- name server ------------------------------------------------------------------------------
    def route(self, topic: str, **kw: Any) -> RemotingCommand:
        return self.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, **kw)

    def cluster_info(self, **kw: Any) -> dict[str, Any]:
        resp = self.invoke(RequestCode.GET_BROKER_CLUSTER_INFO, **kw)
        if resp.code != 0:
            raise AssertionError(f"GET_BROKER_CLUSTER_INFO failed: {resp!r}")
        return loads(resp.body)

    # -- broker -----------------------------------------------------------------------------------
    def create_topic(
        self, topic: str, queues: int = 4, *, perm: int = PERM_READ_WRITE, order: bool = False, **kw: Any
    ) -> RemotingCommand:
        return self.invoke(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": perm,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": order,
            },
            **kw,
        )

    def send_message(
        self,
        topic: str,
        body: bytes,
        *,
        group: str = "compat_producer",
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | None = None,
        properties: Mapping[str, str] | None = None,
        v2: bool = True,
        code: int | None = None,
        sys_flag: int = 0,
        flag: int = 0,
        batch: bool = False,
        extra: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 (one-letter fields) or SEND_MESSAGE (long names) with a UNIQ_KEY property."""
        props: dict[str, str] = {}
        if keys is not None:
            props["KEYS"] = keys
        if tags is not None:
            props["TAGS"] = tags
        if not batch:
            props["UNIQ_KEY"] = uniq_key()
        props["WAIT"] = "true"
        props.update(properties or {})
        header: dict[str, Any] = {
            "producerGroup": group,
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": queue_id,
            "sysFlag": sys_flag,
            "bornTimestamp": int(time.time() * 1000),
            "flag": flag,
            "properties": format_properties(props),
            "reconsumeTimes": 0,
            "unitMode": False,
            "batch": batch,
        }
        header.update(extra or {})
        if v2:
            header = {V2_ALIASES.get(k, k): v for k, v in header.items()}
        if code is None:
            code = (
                RequestCode.SEND_BATCH_MESSAGE
                if batch
                else (RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE)
            )
        return self.invoke(code, header, body, **kw)

    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_nums: int = 32,
        sys_flag: int = 0,
        commit_offset: int = 0,
        suspend_ms: int = 0,
        subscription: str | None = None,
        sub_version: int = 0,
        timeout: float | None = None,
        extra: Mapping[str, Any] | None = None,
        send_only: bool = False,
        code: int = RequestCode.PULL_MESSAGE,
        **kw: Any,
    ) -> Any:
        header = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subscription": subscription,
            "subVersion": sub_version,
            "expressionType": "TAG" if subscription is not None else None,
        }
        header.update(extra or {})
        if send_only:
            return self.send(code, header, **kw)
        return self.invoke(code, header, timeout=timeout, **kw)

    def heartbeat(self, client_id: str, **body_kw: Any) -> RemotingCommand:
        return self.invoke(RequestCode.HEART_BEAT, body=heartbeat_body(client_id, **body_kw))


#: SEND_MESSAGE_V2 one-letter aliases, from the one declaration in rmqgate.wire.headers.
V2_ALIASES = {f.wire: f.alias for f in SendMessageRequestHeader.FIELDS if f.alias}


def stored_messages(broker_addr: str, topic: str, queues: int = 4) -> dict[int, list[Any]]:
    """Every message stored in ``topic``, {queue_id: [MessageExt, ...]}, read with raw pulls."""
    out = {}
    with WireClient(broker_addr) as c:
        for q in range(queues):
            msgs: list[Any] = []
            offset = 0
            while True:
                resp = c.pull("compat_reader", topic, q, offset, sys_flag=PULL_SUBSCRIPTION, subscription="*")
                if resp.code != 0:
                    break
                msgs += decode_messages(resp.body)
                offset = int(resp.ext_fields["nextBeginOffset"])
            out[q] = msgs
    return out


def stored_bodies(broker_addr: str, topic: str, queues: int = 4) -> list[str]:
    """Sorted bodies (as text) of everything stored in ``topic``."""
    return sorted(
        bytes(m.body).decode() for msgs in stored_messages(broker_addr, topic, queues).values() for m in msgs
    )


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns a truthy value; return it, or the last value at timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def runtime_info(addr: str) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table (what mqadmin brokerStatus prints). A Java broker answers
    SYSTEM_ERROR (NoSuchElementException) until StoreStatsService took its first one-second sample."""

    def ask() -> Any:
        with WireClient(addr, timeout=5) as c:
            return c.invoke(RequestCode.GET_BROKER_RUNTIME_INFO)

    resp = wait_until(lambda: (r := ask()).code == 0 and r, timeout=10, interval=0.2) or ask()
    assert resp.code == 0, f"GET_BROKER_RUNTIME_INFO on {addr}: {resp!r}"
    return loads(resp.body)["table"]


def cluster_masters(namesrv: str, cluster: str) -> dict[str, str]:
    """brokerName -> master address of every broker of ``cluster`` the name server lists now (empty
    while it does not answer)."""
    try:
        with WireClient(namesrv, timeout=3) as ns:
            info = ns.cluster_info()
    except (OSError, AssertionError, ValueError):
        return {}
    table = info.get("brokerAddrTable") or {}
    names = (info.get("clusterAddrTable") or {}).get(cluster) or []
    return {name: table[name]["brokerAddrs"].get("0") for name in names if name in table}


def create_routed_topic(broker_addr: str, namesrv_addr: str, name: str, queues: int = 4, **kw: Any) -> str:
    """UPDATE_AND_CREATE_TOPIC on the broker, then wait until its name server routes the topic."""
    with WireClient(broker_addr) as b:
        resp = b.create_topic(name, queues, **kw)
    assert resp.code == 0, f"UPDATE_AND_CREATE_TOPIC {name} on {broker_addr}: {resp!r}"
    with WireClient(namesrv_addr) as ns:
        routed = wait_until(lambda: ns.route(name).code == 0, timeout=40, interval=0.1)
    assert routed, f"{name} created on {broker_addr} never routed by the name server {namesrv_addr}"
    return name
