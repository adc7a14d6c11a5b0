"""Broker admin codes the stock mqadmin tool uses (``AdminBrokerProcessor``): topics, subscription
groups, offsets and stats, runtime info, connections."""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.config import ConfigUpdateRefused, update_from_body
from rmqgate.server.jsonbody import dumpb
from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.server.topics import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    SYSTEM_TOPICS,
    is_system_topic,
    topic_config,
    validate_topic,
)
from rmqgate.store.api import SCHEDULE_TOPIC
from rmqgate.wire import fastjson
from rmqgate.wire.bodies import (
    ConsumeQueueData,
    ConsumeStats,
    ConsumeStatsList,
    GetConsumerStatusBody,
    MessageQueue,
    OffsetWrapper,
    ProducerInfo,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    SubscriptionData,
    SubscriptionGroupConfig,
)
from rmqgate.wire.codes import LanguageCode, MQVersion, RequestCode, ResponseCode, version_desc
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
    GetConsumerStatusRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from rmqgate.wire.message import decode_offset_msg_id

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.consumer import ClientChannelInfo

R = RequestCode
log = logging.getLogger("rmqgate.server.admin")

#: The most read or write queues a topic may be created with: admin answers loop over a topic's queues.
MAX_TOPIC_QUEUE_NUMS = 1024
_LANG = {int(lang): lang.name for lang in LanguageCode}
LMQ_PREFIX = "%LMQ%"
# StoreStatsService's put-latency buckets, as putMessageDistributeTime lists them
_PUT_TIME_BUCKETS = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]", "[500ms~1s]",
    "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)  # fmt: skip
# thread-pool queue capacities runtime info reports (rmqgate has no such pools: the configured value,
# or Java's default); Java names the end-transaction one differently there
_QUEUE_CAPACITIES = {  # runtime-info key -> config key
    **{
        key: key
        for key in (
            "sendThreadPoolQueueCapacity",
            "pullThreadPoolQueueCapacity",
            "queryThreadPoolQueueCapacity",
        )
    },
    "EndTransactionThreadPoolQueueCapacity": "endTransactionPoolQueueCapacity",
}
# cleanUnusedTopic keeps these queues (rmqgate also parks half messages without a topic config,
# where Java's transaction check creates one within a minute)
_KEPT_UNUSED_TOPICS = frozenset({SCHEDULE_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC})


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


def human_readable_byte_count(n: int) -> str:
    """``MixAll.humanReadableByteCount(n, false)``: binary units, one decimal rounded half up."""
    if n < 1024:
        return f"{n} B"
    exp = int(math.log(n) / math.log(1024))
    value = Decimal(repr(n / 1024**exp)).quantize(Decimal("0.1"), ROUND_HALF_UP)
    return f"{value} {'KMGTPE'[exp - 1]}iB"


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
        R.GET_BROKER_CONSUME_STATS,
        R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        R.GET_ALL_PRODUCER_INFO,
        R.QUERY_CONSUME_QUEUE,
        R.CLEAN_EXPIRED_CONSUMEQUEUE,
        R.CLEAN_UNUSED_TOPIC,
        R.DELETE_EXPIRED_COMMITLOG,
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
            R.GET_BROKER_CONSUME_STATS: self.fetch_all_consume_stats_in_broker,
            R.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.get_consumer_status,
            R.GET_ALL_PRODUCER_INFO: self.get_all_producer_info,
            R.QUERY_CONSUME_QUEUE: self.query_consume_queue,
            R.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queue,
            R.CLEAN_UNUSED_TOPIC: self.clean_unused_topic,
            R.DELETE_EXPIRED_COMMITLOG: self.delete_expired_commit_log,
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
        for what, nums in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
            if not 0 <= nums <= MAX_TOPIC_QUEUE_NUMS:
                # 4.9.8 takes any int, and its next consumerProgress loops over 2^31 queues: refused here
                return req.response(
                    ResponseCode.SYSTEM_ERROR, f"{what} {nums} is out of range [0, {MAX_TOPIC_QUEUE_NUMS}]"
                )
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
        """``TopicValidator.getSystemTopicSet``: the static names and those TopicConfigManager added."""
        return req.response(ResponseCode.SUCCESS, body=dumpb({"topicList": sorted(SYSTEM_TOPICS)}))

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
        """mqadmin consumerProgress: one ConsumeStats over the group's topics, readQueueNums each."""
        h = GetConsumeStatsRequestHeader.from_ext(req.ext_fields or {})
        group = h.consumer_group
        stats = ConsumeStats()
        for topic in [h.topic] if h.topic else self._topics_by_group().get(group, ()):
            tc = self._consumed_topic_config(group, topic)
            if tc is not None:
                self._fill_offsets(stats, group, topic, tc["readQueueNums"])
        return req.response(ResponseCode.SUCCESS, body=stats.to_json())

    def fetch_all_consume_stats_in_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin brokerConsumeStats (``fetchAllConsumeStatsInBroker``): for every subscription group a
        ConsumeStats per topic it has offsets in, over writeQueueNums (unlike GET_CONSUME_STATS);
        ``isOrder`` keeps only order topics. totalDiff sums brokerOffset - consumerOffset."""
        h = GetConsumeStatsInBrokerHeader.from_ext(req.ext_fields or {})
        groups: list[dict[str, list[ConsumeStats]]] = []
        total_diff = 0
        topics_by_group = self._topics_by_group()
        for group in list(self.broker.subscription_groups.table):
            per_topic = []
            for topic in topics_by_group.get(group, ()):
                tc = self._consumed_topic_config(group, topic)
                if tc is None or (h.is_order and not tc.get("order")):
                    continue
                stats = self._fill_offsets(ConsumeStats(), group, topic, tc["writeQueueNums"])
                total_diff += sum(w.broker_offset - w.consumer_offset for w in stats.offset_table.values())
                per_topic.append(stats)
            groups.append({group: per_topic})
        body = ConsumeStatsList(groups, self.broker.config.broker_addr, total_diff)
        return req.response(ResponseCode.SUCCESS, body=body.to_json())

    def _topics_by_group(self) -> dict[str, list[str]]:
        """``whichTopicByConsumer`` for every group at once: the topics of its committed offsets."""
        out: dict[str, list[str]] = {}
        for key in sorted(self.store.meta.offset_table()):
            topic, _, group = key.partition("@")
            out.setdefault(group, []).append(topic)
        return out

    def _consumed_topic_config(self, group: str, topic: str) -> dict[str, Any] | None:
        """The topic's config, unless it has none or the group is online without subscribing to it."""
        tc = self.broker.topics.get(topic)
        if tc is None:
            return None
        cgi = self.broker.consumers.find(group)
        if cgi is not None and cgi.subscriptions and topic not in cgi.subscriptions:
            return None
        return tc

    def _fill_offsets(self, stats: ConsumeStats, group: str, topic: str, queue_nums: int) -> ConsumeStats:
        """Add a topic's queues to ``stats``: the broker's and the group's offsets, and the store time
        of the last consumed message (left 0 when the store has none, as Java sets it only if > 0)."""
        store, name = self.store, self.broker.config.brokerName
        for qid in range(queue_nums):
            broker_off = max(0, store.get_max_offset_in_queue(topic, qid))
            consumer_off = max(0, store.meta.query_offset(group, topic, qid))
            last = store.get_message_store_timestamp(topic, qid, consumer_off - 1) if consumer_off > 0 else 0
            stats.offset_table[MessageQueue(topic, name, qid)] = OffsetWrapper(
                broker_off, consumer_off, max(last, 0)
            )
        stats.consume_tps += self.broker.stats.group_get_tps(topic, group)
        return stats

    def query_consume_queue(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin queryCq: ``count`` ConsumeQueue units of a queue from ``index``, and with a group the
        subscription it is online with. An index outside the queue is answered SUCCESS without a body."""
        h = QueryConsumeQueueRequestHeader.from_ext(req.ext_fields or {})
        store = self.store
        if h.queue_id not in store.queue_ids(h.topic):
            return req.response(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body = QueryConsumeQueueResponseBody(
            max_queue_index=store.get_max_offset_in_queue(h.topic, h.queue_id),
            min_queue_index=store.get_min_offset_in_queue(h.topic, h.queue_id),
        )
        if h.consumer_group is not None:
            cgi = self.broker.consumers.find(h.consumer_group)
            sub = cgi.subscriptions.get(h.topic) if cgi is not None else None
            if sub is None:
                body.filter_data = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                body.subscription_data = SubscriptionData.from_obj(sub.to_json())
                data = self.broker.consumers.filters.get(h.topic, h.consumer_group)
                body.filter_data = (
                    "null"
                    if data is None
                    else fastjson.dumps(data.to_json(), quoted_keys=False, pretty=True).decode()
                )
        # one unit more than asked for tells an index past the queue's end from count <= 0
        units = store.get_consume_queue_units(h.topic, h.queue_id, h.index, max(h.count, 1))
        if not units:
            return req.response(
                ResponseCode.SUCCESS, f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!"
            )
        body.queue_data = [ConsumeQueueData(*unit) for unit in units[: max(h.count, 0)]]
        return req.response(ResponseCode.SUCCESS, body=body.to_json())

    # -- subscription groups and offsets --
    def update_and_create_subscription_group(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        config = SubscriptionGroupConfig.from_json(req.body)
        if not config.group_name:
            raise BodyError("SubscriptionGroupConfig: groupName is missing")
        if not 0 <= config.retry_queue_nums <= MAX_TOPIC_QUEUE_NUMS:  # the group's %RETRY% topic's queues
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"retryQueueNums {config.retry_queue_nums} is out of range [0, {MAX_TOPIC_QUEUE_NUMS}]",
            )
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
        """The delay service's table (4.9.8: ScheduleMessageService.encode()). On a slave that is the
        table it started with: SlaveSynchronize stores the master's for the next start, as Java
        writes delayOffset.json, and leaves the running table alone."""
        return req.response(
            ResponseCode.SUCCESS, body=dumpb({"offsetTable": dict(self.broker.schedule.offsets)})
        )

    def query_topic_consume_by_who(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topic = QueryTopicConsumeByWhoRequestHeader.from_ext(req.ext_fields or {}).topic
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
                ResponseCode.SYSTEM_ERROR,
                f"the client does not support this feature. version={version_desc(old.version)}",
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

    def get_all_producer_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin producer (``ProducerManager.getProducerTable``): every connected producer by group;
        a group whose connections all closed is left out."""
        now_ms, now = time.time() * 1000, time.monotonic()
        table = {
            group: [
                ProducerInfo(
                    info.client_id,
                    "/" + info.channel.remote_addr,  # (InetSocketAddress.toString)
                    _LANG.get(info.language, "OTHER"),
                    info.version,
                    int(now_ms - (now - info.last_update) * 1000),
                )
                for info in channels.values()
            ]
            for group, channels in self.broker.producers.groups.items()
            if channels
        }
        return req.response(ResponseCode.SUCCESS, body=ProducerTableInfo(table).to_json())

    def get_consumer_status(self, channel: Channel, req: RemotingCommand) -> Any:
        """mqadmin getConsumerStatus (``Broker2Client.getConsumeStatus``): each consumer of the group (or
        only the one whose client id is ``clientAddr``) is asked for its offsets of the topic with
        GET_CONSUMER_STATUS_FROM_CLIENT, one after the other, 5 s each; a consumer that fails or times
        out is left out. A client older than V3_0_7_SNAPSHOT fails the request."""
        h = GetConsumerStatusRequestHeader.from_ext(req.ext_fields or {})
        cgi = self.broker.consumers.find(h.group)
        if cgi is None or not cgi.channels:  # (an unknown group is an NPE in 4.9.8: SYSTEM_ERROR too)
            return req.response(
                ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{h.group}]"
            )
        return self._consumer_status(req, h, list(cgi.channels.values()))

    async def _consumer_status(
        self, req: RemotingCommand, h: GetConsumerStatusRequestHeader, clients: list[ClientChannelInfo]
    ) -> RemotingCommand:
        ask = GetConsumerStatusRequestHeader(topic=h.topic, group=h.group).to_ext()
        only = h.client_addr if h.client_addr and h.client_addr.strip() else None
        table: dict[str, dict[MessageQueue, int]] = {}
        for info in clients:
            if info.version < MQVersion.V3_0_7_SNAPSHOT:
                return req.response(
                    ResponseCode.SYSTEM_ERROR,
                    f"the client does not support this feature. version={version_desc(info.version)}",
                )
            if only is not None and only != info.client_id:
                continue
            try:
                answer = await info.channel.request(
                    RemotingCommand.request(R.GET_CONSUMER_STATUS_FROM_CLIENT, dict(ask)), 5.0
                )
                if answer.code == ResponseCode.SUCCESS and answer.body is not None:
                    table[info.client_id] = GetConsumerStatusBody.from_json(answer.body).message_queue_table
            except (TimeoutError, ConnectionError, BodyError) as exc:
                log.error(
                    "[get-consumer-status] topic=%s group=%s client=%s: %s",
                    h.topic,
                    h.group,
                    info.client_id,
                    exc,
                )
            if only is not None:
                break
        return req.response(ResponseCode.SUCCESS, body=GetConsumerStatusBody(consumer_table=table).to_json())

    # -- store maintenance --
    def clean_expired_consume_queue(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin cleanExpiredCQ (``cleanExpiredConsumerQueue``): the ConsumeQueues whose messages
        the CommitLog no longer holds are destroyed."""
        n = self.store.clean_expired_consume_queues()
        log.warning("cleanExpiredConsumeQueue by %s: %d queues destroyed", channel.remote_addr, n)
        return req.response(ResponseCode.SUCCESS)

    def clean_unused_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin cleanUnusedTopic (``cleanUnusedTopic``): the ConsumeQueues of topics without a topic
        config are destroyed, except SCHEDULE_TOPIC_XXXX's, the transaction topics' and LMQ ones."""
        unused = sorted(
            t
            for t in self.store.topics()
            if t not in _KEPT_UNUSED_TOPICS
            and not t.startswith(LMQ_PREFIX)
            and self.broker.topics.get(t) is None
        )
        if unused:
            log.warning("cleanUnusedTopic by %s: %s", channel.remote_addr, unused)
            self.store.delete_topics(unused)
        return req.response(ResponseCode.SUCCESS)

    async def delete_expired_commit_log(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin deleteExpiredCommitLog (``executeDeleteFilesManually``): CommitLog files older than
        fileReservedTime go now, whatever deleteWhen says."""
        log.warning("deleteExpiredCommitLog by %s", channel.remote_addr)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.store.clean_expired_files(force=True)
        )
        return req.response(ResponseCode.SUCCESS)

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
        """``prepareRuntimeInfo``: what rmqgate measures, and Java's idle values for the thread pools,
        latencies and buffers it has none of."""
        store = self.store
        config = self.broker.config
        props = config.to_properties()  # (the thread-pool keys: Java's defaults unless configured)
        table = {
            "brokerVersionDesc": version_desc(MQVersion.V4_9_8),
            "brokerVersion": str(int(MQVersion.V4_9_8)),
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": format_runtime(int(time.time() * 1000) - self.boot_timestamp),
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
            "queryThreadPoolQueueSize": "0",
            "EndTransactionQueueSize": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "startAcceptSendRequestTimeStamp": props["startAcceptSendRequestTimeStamp"],
            "remainTransientStoreBufferNumbs": "2147483647",  # no transient store pool (Integer.MAX_VALUE)
            "putMessageFailedTimes": "0",
            "putMessageDistributeTime": "".join(f"{b}:0 " for b in _PUT_TIME_BUCKETS),
            "dispatchMaxBuffer": "0",
            "getMessageEntireTimeMax": "0",
            "putLatency99": "0.00",
            "putLatency999": "0.00",
        }
        for key, name in _QUEUE_CAPACITIES.items():
            table[key] = props[name]
        table.update(store.runtime_info())
        commitlog = store.config.commitlog_dir
        table[f"commitLogDiskRatio_{commitlog}"] = table["commitLogDiskRatio"]
        for level, offset in store.meta.delay_offsets().items():  # ScheduleMessageService.buildRunningStats
            max_offset = store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            table[f"scheduleMessageOffset_{level}"] = f"{offset},{max_offset}"
        try:
            usage = shutil.disk_usage(commitlog)  # (storePathCommitLog's partition, as Java's)
        except OSError:  # (Java leaves the key out when the directory does not exist)
            pass
        else:
            table["commitLogDirCapacity"] = (
                f"Total : {human_readable_byte_count(usage.total)}, "
                f"Free : {human_readable_byte_count(usage.free)}."
            )
        table.update(self.broker.stats.runtime_info())
        return req.response(ResponseCode.SUCCESS, body=dumpb({"table": table}))

    def update_broker_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """mqadmin updateBrokerConfig (``update_from_body``). Keys the store reads as it goes reach it
        too; others take effect where the broker reads them per request, or at the next start. A
        new brokerPermission is registered at once. As in Java, the update is written back to the
        broker.conf the broker started with, so it outlives a restart."""
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
        self.broker.persist_config(props)
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


def format_runtime(ms: int) -> str:
    """StoreStatsService.getFormatRuntime: the broker's uptime as brokerStatus prints it."""
    days, rest = divmod(max(ms, 0) // 1000, 86_400)
    hours, rest = divmod(rest, 3600)
    return f"[ {days:,} days, {hours} hours, {rest // 60} minutes, {rest % 60} seconds ]"
