"""Client management: producer/consumer tables, heartbeats, consumer-id change notices.

``ClientManageProcessor`` serves HEART_BEAT, UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG;
``ConsumerManageProcessor`` GET_CONSUMER_LIST_BY_GROUP (queue locks are in ``locks``). A group's
clients get NOTIFY_CONSUMER_IDS_CHANGED (oneway) when a client joins or leaves it or its
subscriptions change.
Channels without a heartbeat for 120 s are closed and dropped.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.consumer_filter import ConsumerFilterManager, check_expression
from rmqgate.server.filter import FilterParseError, is_tag_type
from rmqgate.server.jsonbody import dumpb
from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.server.topics import PERM_RW, RETRY_GROUP_TOPIC_PREFIX, TOPIC_SYS_FLAG_UNIT_SUB
from rmqgate.wire.bodies import CheckClientRequestBody, HeartbeatData
from rmqgate.wire.bodies import SubscriptionData as SubscriptionDataBody
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import BodyError
from rmqgate.wire.headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader
from rmqgate.wire.message import java_string_hash

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.consumer")

SUB_ALL = "*"


class SubscriptionParseError(ValueError):
    pass


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str
    sub_version: int
    expression_type: str = "TAG"
    tags_set: list[str] = field(default_factory=list)
    code_set: set[int] = field(default_factory=set)
    class_filter_mode: bool = False

    @classmethod
    def build(
        cls,
        topic: str,
        sub_string: str | None,
        expression_type: str | None = None,
        sub_version: int = 0,
        *,
        strict: bool = True,
    ):
        """``FilterAPI.build``: only no text, "" or "*" is everything; otherwise the tags split on
        ``||`` (Java's split: trailing empty parts dropped) and trimmed, each with its Java hash code,
        so " " matches no tag. A text that splits into nothing ("||") raises
        ``SubscriptionParseError`` (Java's "subString split error"), or with ``strict=False`` has no
        tags and matches nothing."""
        if not sub_string and strict and not is_tag_type(expression_type):
            raise SubscriptionParseError(f"Expression can't be null! {expression_type}")
        sub = sub_string or SUB_ALL
        data = cls(topic, sub, sub_version or int(time.time() * 1000), expression_type or "TAG")
        if sub != SUB_ALL and data.expression_type == "TAG":
            parts = sub.split("||")
            while parts and not parts[-1]:
                parts.pop()
            if not parts and strict:
                raise SubscriptionParseError(f"subString {sub!r} split error")
            for tag in parts:
                tag = tag.strip()
                if tag:
                    data.tags_set.append(tag)
                    data.code_set.add(java_string_hash(tag))
        return data

    @classmethod
    def from_body(cls, body: SubscriptionDataBody) -> SubscriptionData:
        """A heartbeat's subscription, taken as sent (Java parses nothing here): a text that does not
        split keeps no tags and matches nothing."""
        data = cls.build(
            body.topic or "", body.sub_string, body.expression_type, body.sub_version, strict=False
        )
        if body.code_set:  # trust the client's codes when it sends them (Java does)
            data.code_set = set(body.code_set)
        data.class_filter_mode = body.class_filter_mode
        return data

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags_set,
            "topic": self.topic,
        }

    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL or self.class_filter_mode or self.expression_type != "TAG"


@dataclass(slots=True)
class ClientChannelInfo:
    channel: Channel
    client_id: str
    language: int
    version: int
    last_update: float = field(default_factory=time.monotonic)


@dataclass
class ConsumerGroupInfo:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    channels: dict[Channel, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]


class ConsumerManager:
    def __init__(self, notify: Any) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self._notify = notify  # fn(group, channels)
        self.filters = ConsumerFilterManager()

    def find(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def register(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[SubscriptionData],
        notify_enabled: bool,
    ) -> bool:
        cgi = self.groups.get(group)
        if cgi is None:
            cgi = self.groups[group] = ConsumerGroupInfo(
                group, consume_type, message_model, consume_from_where
            )
        cgi.consume_type, cgi.message_model, cgi.consume_from_where = (
            consume_type,
            message_model,
            consume_from_where,
        )
        old = cgi.channels.get(info.channel)
        new_client = old is None or old.client_id != info.client_id
        if old is None or new_client:
            cgi.channels[info.channel] = info
        else:
            old.last_update = info.last_update
            old.version, old.language = info.version, info.language
        changed = False
        wanted = {s.topic for s in subscriptions}
        for sub in subscriptions:
            prev = cgi.subscriptions.get(sub.topic)
            if prev is None:
                cgi.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > prev.sub_version:
                cgi.subscriptions[sub.topic] = sub
        for topic in list(cgi.subscriptions):
            if topic not in wanted:
                del cgi.subscriptions[topic]
                changed = True
        if (new_client or changed) and notify_enabled:
            self._notify(group, list(cgi.channels))
        self.filters.register_group(group, subscriptions)
        return new_client or changed

    def unregister(self, group: str, channel: Channel, notify_enabled: bool) -> None:
        """``unregisterConsumer``: the group's other members are told whether or not this channel
        was one of them."""
        cgi = self.groups.get(group)
        if cgi is None:
            return
        cgi.channels.pop(channel, None)
        if not cgi.channels:
            del self.groups[group]
            self.filters.unregister(group)
        elif notify_enabled:
            self._notify(group, list(cgi.channels))

    def channel_closed(self, channel: Channel) -> None:
        for group, cgi in list(self.groups.items()):
            if cgi.channels.pop(channel, None) is None:
                continue
            if not cgi.channels:
                del self.groups[group]
                self.filters.unregister(group)
            else:
                self._notify(group, list(cgi.channels))

    def scan_expired(self, timeout: float) -> None:
        deadline = time.monotonic() - timeout
        for cgi in list(self.groups.values()):
            for channel, info in list(cgi.channels.items()):
                if info.last_update < deadline:
                    log.warning(
                        "consumer %s of %s: no heartbeat for %.0f s", info.client_id, cgi.group_name, timeout
                    )
                    channel.close()
                    self.channel_closed(channel)


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Channel, ClientChannelInfo]] = {}
        #: clientId -> its latest registered connection (``clientChannelTable``: request-reply's
        #: PUSH_REPLY_MESSAGE_TO_CLIENT finds the requester here)
        self.client_channels: dict[str, Channel] = {}
        self._turn = 0

    def register(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.groups.setdefault(group, {})
        old = channels.get(info.channel)
        if old is None or old.client_id != info.client_id:
            channels[info.channel] = info
            self.client_channels[info.client_id] = info.channel
        else:
            old.last_update = info.last_update

    def unregister(self, group: str, channel: Channel) -> None:
        channels = self.groups.get(group)
        if channels is not None:
            info = channels.pop(channel, None)
            if info is not None:  # (Java drops the clientId even if another group still has it)
                self.client_channels.pop(info.client_id, None)
            if not channels:
                del self.groups[group]

    def channel_closed(self, channel: Channel) -> None:
        # the group stays, empty, as Java's doChannelCloseEvent leaves it (its connection list is
        # then an empty set, not "not exist"); only UNREGISTER_CLIENT drops an emptied group
        for channels in self.groups.values():
            info = channels.pop(channel, None)
            if info is not None:
                self.client_channels.pop(info.client_id, None)

    def scan_expired(self, timeout: float) -> None:
        deadline = time.monotonic() - timeout
        for channels in list(self.groups.values()):
            for channel, info in list(channels.items()):
                if info.last_update < deadline:
                    channel.close()
                    channels.pop(channel, None)
                    self.client_channels.pop(info.client_id, None)

    def find_channel(self, client_id: str) -> Channel | None:
        """``findChannel``: the connection the producer with this clientId last registered on."""
        return self.client_channels.get(client_id)

    def any_channel(self, group: str) -> Channel | None:
        """A channel of the group for CHECK_TRANSACTION_STATE, taken in turn (``getAvailableChannel``):
        the next writable one, else the next open one, else None."""
        channels = list(self.groups.get(group, {}))
        if not channels:
            return None
        self._turn += 1
        start = self._turn % len(channels)
        ordered = channels[start:] + channels[:start]
        return next((c for c in ordered if c.writable), None) or next(
            (c for c in ordered if not c.closed), None
        )


class ClientManageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (
        RequestCode.HEART_BEAT,
        RequestCode.UNREGISTER_CLIENT,
        RequestCode.CHECK_CLIENT_CONFIG,
    )

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        if request.code == RequestCode.HEART_BEAT:
            return self.heart_beat(channel, request)
        if request.code == RequestCode.UNREGISTER_CLIENT:
            return self.unregister_client(channel, request)
        return self.check_client_config(channel, request)

    def heart_beat(self, channel: Channel, request: RemotingCommand) -> Any:
        data = HeartbeatData.from_json(request.body)
        _check_heartbeat(data)
        client_id = data.client_id or ""
        broker = self.broker
        broker.watch_channel(channel)
        channel.client_id = client_id
        info_args = (channel, client_id, request.language, request.version)
        for cd in data.consumer_data_set:
            group = cd.group_name
            sgc = broker.subscription_groups.find(group)
            notify = True
            if sgc is not None:
                notify = bool(sgc.get("notifyConsumerIdsChangedEnable", True))
                sys_flag = TOPIC_SYS_FLAG_UNIT_SUB if cd.unit_mode else 0
                retry_topic = RETRY_GROUP_TOPIC_PREFIX + group
                # a new retry topic is registered in the background (Java's registration is oneway)
                broker.topics.create_in_send_back(
                    retry_topic, int(sgc.get("retryQueueNums", 1)), PERM_RW, sys_flag
                )
            broker.consumers.register(
                group,
                ClientChannelInfo(*info_args),
                cd.consume_type or "CONSUME_PASSIVELY",
                cd.message_model or "CLUSTERING",
                cd.consume_from_where or "CONSUME_FROM_LAST_OFFSET",
                [SubscriptionData.from_body(s) for s in cd.subscription_data_set],
                notify,
            )
        for pd in data.producer_data_set:
            broker.producers.register(pd.group_name, ClientChannelInfo(*info_args))
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(request.ext_fields or {})
        broker = self.broker
        if h.producer_group:
            broker.producers.unregister(h.producer_group, channel)
        if h.consumer_group:
            sgc = broker.subscription_groups.find(h.consumer_group)
            notify = bool(sgc.get("notifyConsumerIdsChangedEnable", True)) if sgc else True
            broker.consumers.unregister(h.consumer_group, channel, notify)
        return request.response(ResponseCode.SUCCESS, ext_fields={})

    def check_client_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """``checkClientConfig``: a non-TAG subscription needs enablePropertyFilter and an expression
        that compiles (else SUBSCRIPTION_PARSE_FAILED with the compiler's exception text)."""
        body = CheckClientRequestBody.from_json(request.body)
        sub = body.subscription_data
        if sub is None or is_tag_type(sub.expression_type):
            return request.response(ResponseCode.SUCCESS)
        if not self.broker.config.enablePropertyFilter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
            )
        try:
            check_expression(sub.expression_type, sub.sub_string)
        except FilterParseError as exc:
            log.warning(
                "client %s@%s: expression %r does not compile: %s",
                body.client_id,
                body.group,
                sub.sub_string,
                exc,
            )
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.remark)
        return request.response(ResponseCode.SUCCESS)


def _check_heartbeat(data: HeartbeatData) -> None:
    """A group or subscription topic that is absent (JSON null or missing) is refused before anything
    is registered: 4.9.8 answers SYSTEM_ERROR for these, from a NullPointerException on its
    concurrent maps. An empty name is a name there, and here."""
    for cd in data.consumer_data_set:
        if cd.group_name is None:
            raise BodyError("heartbeat: a consumerData has no groupName")
        if any(s.topic is None for s in cd.subscription_data_set):
            raise BodyError(f"heartbeat: a subscription of consumer group {cd.group_name} has no topic")
    if any(pd.group_name is None for pd in data.producer_data_set):
        raise BodyError("heartbeat: a producerData has no groupName")


class ConsumerManageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.GET_CONSUMER_LIST_BY_GROUP,)

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext(request.ext_fields or {})
        cgi = self.broker.consumers.find(h.consumer_group)
        if cgi is not None and cgi.channels:
            return request.response(
                ResponseCode.SUCCESS, ext_fields={}, body=dumpb({"consumerIdList": cgi.client_ids()})
            )
        return request.response(
            ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}", ext_fields={}
        )
