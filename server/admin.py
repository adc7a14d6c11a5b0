"""Broker admin codes the stock mqadmin tool uses (``AdminBrokerProcessor``): topics, subscription
groups, offsets and stats, runtime info, connections."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.config import ConfigUpdateRefused, update_from_body
from rmqgate.server.jsonbody import dumpb
from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.server.topics import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SELF_TEST_TOPIC,
    is_system_topic,
    topic_config,
    validate_topic,
)
from rmqgate.store.api import SCHEDULE_TOPIC
from rmqgate.wire.bodies import SubscriptionGroupConfig
from rmqgate.wire.codes import LanguageCode, MQVersion, RequestCode, ResponseCode
from rmqgate.wire.command import RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import BodyError, MessageFormatError
from rmqgate.wire.fastjson import ObjectKey
from rmqgate.wire.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    ResetOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from rmqgate.wire.message import decode_offset_msg_id

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.consumer import ClientChannelInfo

R = RequestCode
log = logging.getLogger("rmqgate.server.admin")
_LANG = {int(lang): lang.name for lang in LanguageCode}


def _connection(info: ClientChannelInfo) -> dict[str, Any]:
    """One entry of a ConsumerConnection / ProducerConnection body's connectionSet."""
    return {
        "clientAddr": info.channel.remote_addr,
        "clientId": info.client_id,
        "language": _LANG.get(info.language, "OTHER"),
        "version": info.version,
    }


def _mq(topic: str, broker_name: str, queue_id: int) -> ObjectKey:
    return ObjectKey.of({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


class AdminBrokerProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (
        R.UPDATE_AND_CREATE_TOPIC,
        R.DELETE_TOPIC_IN_BROKER,
        R.GET_ALL_TOPIC_CONFIG,
        R.GET_BROKER_RUNTIME_INFO,
        R.GET_TOPIC_STATS_INFO,
        R.GET_CONSUME_STATS,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        R.DELETE_SUBSCRIPTIONGROUP,
        R.GET_ALL_CONSUMER_OFFSET,
        R.GET_ALL_DELAY_OFFSET,
        R.GET_CONSUMER_CONNECTION_LIST,
        R.GET_PRODUCER_CONNECTION_LIST,
        R.GET_BROKER_CONFIG,
        R.QUERY_TOPIC_CONSUME_BY_WHO,
        R.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
        R.GET_CONSUMER_RUNNING_INFO,
        R.CONSUME_MESSAGE_DIRECTLY,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        R.UPDATE_BROKER_CONFIG,
        R.VIEW_BROKER_STATS_DATA,
    )

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store
        self.boot_timestamp = int(time.time() * 1000)
        self._handlers = {
            R.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            R.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            R.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            R.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            R.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            R.GET_CONSUME_STATS: self.get_consume_stats,
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_and_create_subscription_group,
            R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group_config,
            R.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            R.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            R.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            R.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            R.GET_PRODUCER_CONNECTION_LIST: self.get_producer_connection_list,
            R.GET_BROKER_CONFIG: self.get_broker_config,
            R.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            R.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.get_system_topic_list,
            R.GET_CONSUMER_RUNNING_INFO: self.call_consumer,
            R.CONSUME_MESSAGE_DIRECTLY: self.call_consumer,
            R.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            R.UPDATE_BROKER_CONFIG: self.update_broker_config,
            R.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
        }

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        return self._handlers[request.code](channel, request)

    # -- topics --
    def update_and_create_topic(self, channel: Channel, req: RemotingCommand) -> Any:
        h = CreateTopicRequestHeader.from_ext(req.ext_fields or {})
        refused = _refused_topic(req, h.topic)  # (the cluster's and broker's names are system topics)
        if refused is not None:
            return refused
        filter_type = h.topic_filter_type or "SINGLE_TAG"
        if filter_type not in ("SINGLE_TAG", "MULTI_TAG"):  # CreateTopicRequestHeader.checkFields
            return req.response(ResponseCode.SYSTEM_ERROR, f"topicFilterType = [{filter_type}] value invalid")
        # the header's order flag is not taken: the name server's ORDER_TOPIC_CONFIG decides (Java)
        tc = topic_config(
            h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
            filter_type=filter_type, sys_flag=h.topic_sys_flag or 0,
        )  # fmt: skip
        self.broker.topics.put(tc, notify=False)
        return self._registered(req)

    async def _registered(self, req: RemotingCommand) -> RemotingCommand:
        # Like registerIncrementBrokerData: the name servers know the topic before the client hears back
        # (ali-ons and others look the route up right after creating a topic).
        await self.broker.register_all()
        # Java answers SUCCESS but leaves createResponseCommand's default remark in place.
        return req.response(ResponseCode.SUCCESS, "not set any response code")

    def delete_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_ext(req.ext_fields or {})
        refused = _refused_topic(req, h.topic)
        if refused is not None:  # e.g. TBW102: mqadmin would go on to delete its route too
            return refused
        self.broker.topics.delete(h.topic)
        self.store.delete_topics([h.topic])
        return req.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=dumpb(self.broker.topics.wrapper()))

    def get_system_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        c = self.broker.config
        topics = [
            SELF_TEST_TOPIC,
            AUTO_CREATE_TOPIC_KEY_TOPIC,
            BENCHMARK_TOPIC,
            OFFSET_MOVED_EVENT,
            SCHEDULE_TOPIC,
        ]
        topics += [c.brokerClusterName, c.brokerName]
        return req.response(ResponseCode.SUCCESS, body=dumpb({"topicList": topics}))

    def get_topic_stats_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetTopicStatsInfoRequestHeader.from_ext(req.ext_fields or {})
        tc = self.broker.topics.get(h.topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        name = self.broker.config.brokerName
        table: dict[Any, Any] = {}
        for qid in range(tc["writeQueueNums"]):
            max_off = max(0, self.store.get_max_offset_in_queue(h.topic, qid))
            min_off = max(0, self.store.get_min_offset_in_queue(h.topic, qid))
            last = self.store.get_message_store_timestamp(h.topic, qid, max_off - 1) if max_off > 0 else 0
            table[_mq(h.topic, name, qid)] = {
                "lastUpdateTimestamp": last,
                "maxOffset": max_off,
                "minOffset": min_off,
            }
        return req.response(ResponseCode.SUCCESS, body=dumpb({"offsetTable": table}))

    def get_consume_stats(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext(req.ext_fields or {})
        broker = self.broker
        if h.topic:
            topics = [h.topic]
        else:
            suffix = "@" + h.consumer_group
            topics = sorted({k[: -len(suffix)] for k in self.store.meta.offset_table() if k.endswith(suffix)})
        cgi = broker.consumers.find(h.consumer_group)
        table: dict[Any, Any] = {}
        consume_tps = 0.0
        for topic in topics:
            tc = broker.topics.get(topic)
            if tc is None:
                continue
            if cgi is not None and cgi.subscriptions and topic not in cgi.subscriptions:
                continue
            for qid in range(tc["readQueueNums"]):
                broker_off = max(0, self.store.get_max_offset_in_queue(topic, qid))
                consumer_off = max(0, self.store.meta.query_offset(h.consumer_group, topic, qid))
                last = (
                    self.store.get_message_store_timestamp(topic, qid, consumer_off - 1)
                    if consumer_off > 0
                    else 0
                )
                table[_mq(topic, broker.config.brokerName, qid)] = {
                    "brokerOffset": broker_off,
                    "consumerOffset": consumer_off,
                    "lastTimestamp": last,
                }
            consume_tps += broker.stats.group_get_tps(topic, h.consumer_group)
        body = dumpb({"consumeTps": consume_tps, "offsetTable": table})
        return req.response(ResponseCode.SUCCESS, body=body)

    # -- subscription groups and offsets --
    def update_and_create_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        config = SubscriptionGroupConfig.from_json(req.body)
        if not config.group_name:
            raise BodyError("SubscriptionGroupConfig: groupName is missing")
        self.broker.subscription_groups.put(config.to_obj())
        return req.response(ResponseCode.SUCCESS)

    def get_all_subscription_group_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=dumpb(self.broker.subscription_groups.wrapper()))

    def delete_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = DeleteSubscriptionGroupRequestHeader.from_ext(req.ext_fields or {})
        self.broker.subscription_groups.delete(h.group_name)
        if h.remove_offset:
            self.store.meta.remove_offsets(group=h.group_name)
        return req.response(ResponseCode.SUCCESS)

    def get_all_consumer_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=dumpb({"offsetTable": self.store.meta.offset_table()}))

    def get_all_delay_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(
            ResponseCode.SUCCESS, body=dumpb({"offsetTable": self.store.meta.delay_offsets()})
        )

    def query_topic_consume_by_who(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = (req.ext_fields or {}).get("topic", "")
        groups = {g for g, cgi in self.broker.consumers.groups.items() if topic in cgi.subscriptions}
        groups |= {
            k.partition("@")[2] for k in self.store.meta.offset_table() if k.partition("@")[0] == topic
        }
        return req.response(ResponseCode.SUCCESS, body=dumpb({"groupList": sorted(groups)}))

    def reset_offset(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin resetOffsetByTime (``Broker2Client.resetOffset``): per write queue the offset at the
        timestamp (-1: the max offset), kept at the group's committed offset unless forced or lower,
        sent oneway to every consumer of the group, which moves and commits its offsets itself; the
        broker's offset table is not written. The body each consumer gets is the one its language
        reads (Java picks it by the requester's language, which breaks C++ consumers reset by the
        Java mqadmin)."""
        h = ResetOffsetRequestHeader.from_ext(req.ext_fields or {})
        tc = self.broker.topics.get(h.topic)
        if tc is None:
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        store = self.store
        offsets: list[tuple[int, int]] = []
        for qid in range(tc["writeQueueNums"]):
            committed = store.meta.query_offset(h.group, h.topic, qid)
            if committed == -1:
                return req.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist")
            if h.timestamp == -1:
                target = store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            target = max(target, 0)
            offsets.append((qid, target if h.is_force or target < committed else committed))
        cgi = self.broker.consumers.find(h.group)
        if cgi is None or not cgi.channels:
            return req.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {h.group} Topic: {h.topic} "
                f"Timestamp: {h.timestamp}",
            )
        clients = list(cgi.channels.values())
        old = next((info for info in clients if info.version < MQVersion.V3_0_7_SNAPSHOT), None)
        if old is not None:
            return req.response(
                ResponseCode.SYSTEM_ERROR, f"the client does not support this feature. version={old.version}"
            )
        broker_name = self.broker.config.brokerName
        table = {_mq(h.topic, broker_name, qid): off for qid, off in offsets}
        java_body = dumpb({"offsetTable": table})
        cpp_body = dumpb(
            {
                "offsetTable": [
                    {"brokerName": broker_name, "offset": off, "queueId": qid, "topic": h.topic}
                    for qid, off in offsets
                ]
            }
        )
        ext = ResetOffsetRequestHeader(
            topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=False
        ).to_ext()
        for info in clients:
            if not info.channel.closed:
                body = cpp_body if info.language == LanguageCode.CPP else java_body
                info.channel.send_oneway(
                    RemotingCommand.request(R.RESET_CONSUMER_CLIENT_OFFSET, dict(ext), body)
                )
                log.info(
                    "[reset-offset] topic=%s group=%s client=%s offsets=%s",
                    h.topic,
                    h.group,
                    info.client_id,
                    offsets,
                )
        return req.response(ResponseCode.SUCCESS, body=java_body)

    # -- connections --
    def get_consumer_connection_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_ext(req.ext_fields or {})
        cgi = self.broker.consumers.find(h.consumer_group)
        if cgi is None:
            return req.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{h.consumer_group}] not online"
            )
        body = {
            "connectionSet": [_connection(info) for info in cgi.channels.values()],
            "consumeFromWhere": cgi.consume_from_where,
            "consumeType": cgi.consume_type,
            "messageModel": cgi.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in cgi.subscriptions.items()},
        }
        return req.response(ResponseCode.SUCCESS, body=dumpb(body))

    def get_producer_connection_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_ext(req.ext_fields or {})
        channels = self.broker.producers.groups.get(h.producer_group)
        if channels is None:
            return req.response(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist"
            )
        body = {"connectionSet": [_connection(info) for info in channels.values()]}
        return req.response(ResponseCode.SUCCESS, body=dumpb(body))

    def call_consumer(self, channel: Channel, req: RemotingCommand) -> Any:
        """GET_CONSUMER_RUNNING_INFO / CONSUME_MESSAGE_DIRECTLY: forwarded to the consumer's connection
        (a server-initiated request with its own opaque), its answer relayed (``callConsumer``)."""
        ext = req.ext_fields or {}
        if req.code == R.GET_CONSUMER_RUNNING_INFO:
            group, client_id = (
                (h := GetConsumerRunningInfoRequestHeader.from_ext(ext)).consumer_group,
                h.client_id,
            )
        else:
            d = ConsumeMessageDirectlyResultRequestHeader.from_ext(ext)
            group, client_id = d.consumer_group, d.client_id or ""
            # consumeMessageDirectly: the consumer gets the message itself and this broker's name
            try:
                record = self.store.select_one_message_by_offset(decode_offset_msg_id(d.msg_id or "")[2])
            except MessageFormatError:
                record = None
            if record is None:
                return req.response(
                    ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId {d.msg_id}"
                )
            req.ext_fields = {**ext, "brokerName": self.broker.config.brokerName}
            req.body = bytes(record)
        cgi = self.broker.consumers.find(group)
        target = (
            next((i.channel for i in cgi.channels.values() if i.client_id == client_id), None)
            if cgi
            else None
        )
        if target is None or target.closed:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        return self._relay(req, target, group, client_id)

    async def _relay(
        self, req: RemotingCommand, target: Channel, group: str, client_id: str
    ) -> RemotingCommand:
        forward = RemotingCommand.request(req.code, dict(req.ext_fields or {}), req.body)
        try:
            answer = await target.request(forward, 10.0)
        except TimeoutError:
            return req.response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout")
        except ConnectionError as exc:
            return req.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}"
            )
        # the consumer's own answer goes back, its language and version too (AdminBrokerProcessor)
        answer.opaque = req.opaque
        answer.flag |= RESPONSE_FLAG
        answer.serialize_type = req.serialize_type
        return answer

    # -- broker --
    def get_broker_runtime_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        store = self.store
        table = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": "409",
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": f"[ {int(time.time() - self.boot_timestamp / 1000)} s ]",
            "commitLogMinOffset": str(store.get_min_phy_offset()),
            "commitLogMaxOffset": str(store.get_max_phy_offset()),
            "earliestMessageTimeStamp": "0",
            "commitLogDiskRatio": "0.0",
            "consumeQueueDiskRatio": "0.0",
            "dispatchBehindBytes": "0",
            "pageCacheLockTimeMills": "0",
            "remainHowManyDataToFlush": "0 B",
            "pullThreadPoolQueueSize": "0",
            "sendThreadPoolQueueSize": "0",
            "brokerClusterName": self.broker.config.brokerClusterName,
            "brokerName": self.broker.config.brokerName,
        }
        table.update({k: str(v) for k, v in store.runtime_info().items()})
        table.update(self.broker.stats.runtime_info())
        return req.response(ResponseCode.SUCCESS, body=dumpb({"table": table}))

    def update_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin updateBrokerConfig (``update_from_body``). Keys the store reads as it goes reach it
        too; others take effect where the broker reads them per request, or at the next start. A
        new brokerPermission is registered at once. As in Java, broker.conf is not rewritten."""
        config = self.broker.config
        try:
            props = update_from_body(config, req.body)
        except ConfigUpdateRefused as exc:
            return req.response(exc.code, exc.remark)
        log.info("updateBrokerConfig by %s: %s", channel.remote_addr, props)
        live = config.store_config()
        for name in live.LIVE_FIELDS:
            setattr(self.store.config, name, getattr(live, name))
        self.broker.send_processor.max_message_size = config.maxMessageSize
        if "brokerPermission" in props:
            self.broker.topics.next_version()
            self.broker.request_register()
        return req.response(ResponseCode.SUCCESS)

    def view_broker_stats_data(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin statsAll and the dashboard's charts: a stats item over the last minute, hour and day
        (TOPIC_PUT_NUMS by topic, GROUP_GET_NUMS by topic@group, BROKER_PUT/GET_NUMS by cluster)."""
        h = ViewBrokerStatsDataRequestHeader.from_ext(req.ext_fields or {})
        data = self.broker.stats.stats_data(h.stats_name, h.stats_key)
        if data is None:
            return req.response(
                ResponseCode.SYSTEM_ERROR, f"The stats <{h.stats_name}> <{h.stats_key}> not exist"
            )
        return req.response(ResponseCode.SUCCESS, body=dumpb(data))

    def get_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        body = self.broker.config.properties_text().encode()
        version = dumpb(self.broker.topics.data_version).decode()
        return req.response(ResponseCode.SUCCESS, ext_fields={"version": version}, body=body)


def _refused_topic(req: RemotingCommand, topic: str) -> RemotingCommand | None:
    """``TopicValidator.validateTopic`` then ``isSystemTopic``, as topic create and delete check."""
    error = validate_topic(topic)
    if error is not None:
        return req.response(ResponseCode.SYSTEM_ERROR, error)
    if is_system_topic(topic):
        return req.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    return None
