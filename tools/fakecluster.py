"""A scripted name server + broker for testing and benchmarking the traffic tools.

Not a broker: just enough behaviour (routes in both fastjson key styles, sends with offsetMsgIds,
long-poll pulls, transaction checks, a server-initiated request) to exercise the proxy and replay
deterministically without the real rmqgate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rmqgate.server.remoting import Channel, RemotingServer, RequestProcessor
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand

BROKER_NAME = "broker-a"
CLUSTER = "DefaultCluster"
_TX_PREPARED = 0x4


def route_body(broker_addr: str, topic_queues: int = 4, quoted_keys: bool = False) -> bytes:
    """A TopicRouteData body as fastjson writes it (bare ``0`` keys unless ``quoted_keys``)."""
    key = '"0"' if quoted_keys else "0"
    return (
        '{"brokerDatas":[{"brokerAddrs":{' + key + ':"' + broker_addr + '"},"brokerName":"' + BROKER_NAME
        + '","cluster":"' + CLUSTER + '"}],"filterServerTable":{},"queueDatas":[{"brokerName":"' + BROKER_NAME
        + f'","perm":6,"readQueueNums":{topic_queues},"topicSysFlag":0,"writeQueueNums":{topic_queues}}}]}}'
    ).encode()  # fmt: skip


def cluster_body(broker_addr: str) -> bytes:
    return (
        '{"brokerAddrTable":{"' + BROKER_NAME + '":{"brokerAddrs":{0:"' + broker_addr + '"},"brokerName":"'
        + BROKER_NAME + '","cluster":"' + CLUSTER + '"}},"clusterAddrTable":{"' + CLUSTER + '":["'
        + BROKER_NAME + '"]}}'
    ).encode()  # fmt: skip


def _props(s: str) -> dict[str, str]:
    out = {}
    for item in s.split("\x02"):
        k, sep, v = item.partition("\x01")
        if sep:
            out[k] = v
    return out


@dataclass
class FakeState:
    broker_addr: str = ""
    commit_log_offset: int = 1000
    queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    end_transactions: list[dict[str, str]] = field(default_factory=list)
    checks_sent: list[str] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    pull_suspends_ms: list[int] = field(default_factory=list)  # suspendTimeoutMillis of each PULL
    producer_channels: list[Channel] = field(default_factory=list)
    arrivals: asyncio.Event = field(default_factory=asyncio.Event)


class _Namesrv(RequestProcessor):
    codes = (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO)

    def __init__(self, state: FakeState) -> None:
        self.state = state

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        self.state.requests.append(request.code)
        if request.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return request.response(body=cluster_body(self.state.broker_addr))
        topic = request.ext_field("topic", "")
        if topic.startswith("missing"):
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for {topic}"
            )
        return request.response(body=route_body(self.state.broker_addr, quoted_keys=request.version >= 401))


class _Broker(RequestProcessor):
    codes = (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.PULL_MESSAGE,
        RequestCode.HEART_BEAT,
        RequestCode.END_TRANSACTION,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UNREGISTER_CLIENT,
        RequestCode.GET_CONSUMER_RUNNING_INFO,
    )

    def __init__(self, state: FakeState, check_after: float | None) -> None:
        self.state = state
        self.check_after = check_after

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        st = self.state
        st.requests.append(request.code)
        ext = request.ext_fields or {}
        code = request.code
        if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            v2 = code == RequestCode.SEND_MESSAGE_V2
            topic = ext.get("b" if v2 else "topic", "")
            queue = int(ext.get("e" if v2 else "queueId", "0"))
            key = (topic, queue)
            qoff = st.queue_offsets.get(key, 0)
            st.queue_offsets[key] = qoff + 1
            phys = st.commit_log_offset
            st.commit_log_offset += 100 + len(request.body or b"")
            msg_id = "7F00000100002A9F" + f"{phys:016X}"
            st.arrivals.set()
            sys_flag = int(ext.get("f" if v2 else "sysFlag", "0"))
            if sys_flag & _TX_PREPARED and self.check_after is not None:
                uniq = _props(ext.get("i" if v2 else "properties", "")).get("UNIQ_KEY", "")
                asyncio.get_running_loop().call_later(
                    self.check_after, self._check, channel, uniq, phys + 50_000, qoff + 100
                )
            return request.response(
                ext_fields={
                    "msgId": msg_id,
                    "queueId": str(queue),
                    "queueOffset": str(qoff),
                    "MSG_REGION": "DefaultRegion",
                }
            )
        if code == RequestCode.PULL_MESSAGE:
            key = (ext.get("topic", ""), int(ext.get("queueId", "0")))
            offset = int(ext.get("queueOffset", "0"))
            suspend_ms = int(ext.get("suspendTimeoutMillis", "0"))
            st.pull_suspends_ms.append(suspend_ms)
            suspend = suspend_ms / 1000
            if st.queue_offsets.get(key, 0) <= offset and suspend > 0:
                st.arrivals.clear()
                try:
                    await asyncio.wait_for(st.arrivals.wait(), suspend)
                except TimeoutError:
                    pass
            found = st.queue_offsets.get(key, 0) > offset
            header = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(offset + (1 if found else 0)),
                      "minOffset": "0", "maxOffset": str(st.queue_offsets.get(key, 0))}  # fmt: skip
            if found:
                return request.response(ResponseCode.SUCCESS, "FOUND", header, b"m" * 10)
            return request.response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", header)
        if code == RequestCode.END_TRANSACTION:
            st.end_transactions.append(dict(ext))
            return None if request.is_oneway else request.response()
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            return request.response(ext_fields={"offset": "0"})
        if code == RequestCode.HEART_BEAT:
            if b"producerDataSet" in (request.body or b"") and channel not in st.producer_channels:
                st.producer_channels.append(channel)
            return request.response()
        return None if request.is_oneway else request.response()

    def _check(self, channel: Channel, uniq: str, phys: int, qoff: int) -> None:
        self.state.checks_sent.append(uniq)
        ext = {"tranStateTableOffset": str(qoff), "commitLogOffset": str(phys), "msgId": uniq, "transactionId": uniq,
               "offsetMsgId": "7F00000100002A9F" + f"{phys:016X}"}  # fmt: skip
        channel.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, b"half"))


class FakeCluster:
    """``async with FakeCluster() as c``: ``c.namesrv_addr``, ``c.broker_addr``, ``c.state``."""

    def __init__(self, host: str = "127.0.0.1", check_after: float | None = 0.2) -> None:
        self.host = host
        self.state = FakeState()
        self.namesrv = RemotingServer(host, 0, [_Namesrv(self.state)], idle_timeout=0, name="fake-namesrv")
        self.broker = RemotingServer(
            host, 0, [_Broker(self.state, check_after)], idle_timeout=0, name="fake-broker"
        )

    @property
    def namesrv_addr(self) -> str:
        return f"{self.host}:{self.namesrv.port}"

    @property
    def broker_addr(self) -> str:
        return f"{self.host}:{self.broker.port}"

    async def start(self) -> None:
        await self.broker.start()
        self.state.broker_addr = self.broker_addr
        await self.namesrv.start()

    async def stop(self) -> None:
        await self.namesrv.stop()
        await self.broker.stop()

    async def ask_client(self, code: int = RequestCode.GET_CONSUMER_RUNNING_INFO) -> list[RemotingCommand]:
        """Send a server-initiated request to every connected client; their answers."""
        out = []
        for ch in list(self.broker.channels):
            req = RemotingCommand.request(code, {"consumerGroup": "g", "clientId": "c"})
            try:
                out.append(await ch.request(req, 2.0))
            except (TimeoutError, ConnectionError):
                pass
        return out

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def props(**kv: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


__all__ = ["FakeCluster", "cluster_body", "props", "route_body"]
