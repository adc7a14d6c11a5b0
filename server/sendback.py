"""CONSUMER_SEND_MSG_BACK: a consumer hands back a message it failed to consume (``consumerSendMsgBack``).

The original is looked up by commit-log offset and put again to %RETRY%<group> with reconsumeTimes + 1,
RETRY_TOPIC (the original topic, kept from the first time) and ORIGIN_MESSAGE_ID, delayed by level
3 + reconsumeTimes unless the request names one; once reconsumeTimes reaches maxReconsumeTimes (the
request's, or the group's retryMaxTimes), or for a negative delay level, it goes to %DLQ%<group>.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, ClassVar

from rmqgate.server.ha import answer_once_stored
from rmqgate.server.remoting import Channel, Pending, RequestProcessor
from rmqgate.server.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_RW,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_SYS_FLAG_UNIT_SUB,
)
from rmqgate.store.api import PutMessageStatus
from rmqgate.wire.codes import MQVersion, RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.headers import ConsumerSendMsgBackRequestHeader
from rmqgate.wire.message import MessageExt
from rmqgate.wire.message_const import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT,
)

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
DLQ_NUMS_PER_GROUP = 1
_PUT_DONE = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)


class ConsumerSendMsgBackProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.CONSUMER_SEND_MSG_BACK,)

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | Pending:
        h = ConsumerSendMsgBackRequestHeader.from_ext(request.ext_fields or {})
        broker = self.broker
        group = h.group
        sgc = broker.subscription_groups.find(group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}"
            )
        if not broker.config.brokerPermission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.brokerIP1}] sending message is forbidden",
            )
        retry_queues = int(sgc.get("retryQueueNums", 1))
        if retry_queues <= 0:
            return request.response(ResponseCode.SUCCESS)
        topic_sys_flag = TOPIC_SYS_FLAG_UNIT_SUB if h.unit_mode else 0
        topic = RETRY_GROUP_TOPIC_PREFIX + group
        queue_id = random.randrange(retry_queues)
        tc = broker.topics.create_in_send_back(topic, retry_queues, PERM_RW, topic_sys_flag)
        if not tc["perm"] & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        original = broker.store.look_message_by_offset(h.offset)
        if original is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(original.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
        props[PROPERTY_WAIT] = "false"  # consumerSendMsgBack's setWaitStoreMsgOK(false), stored with it
        delay_level = h.delay_level
        max_times = int(sgc.get("retryMaxTimes", 16))
        if request.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        if original.reconsume_times >= max_times or delay_level < 0:
            topic = DLQ_GROUP_TOPIC_PREFIX + group
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            # read-write, as 4.9.4+ creates dead-letter topics (4.9.0's were write-only: unreadable)
            broker.topics.create_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_RW, 0)
            props[PROPERTY_DELAY_TIME_LEVEL] = "0"  # setDelayTimeLevel(0): stored, and no delay
        else:
            if delay_level == 0:
                delay_level = 3 + original.reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
            props[PROPERTY_ORIGIN_MESSAGE_ID] = original.offset_msg_id
        msg = MessageExt(
            topic,
            bytes(original.body),
            original.flag,
            queue_id,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            born_port=original.born_port,
            reconsume_times=original.reconsume_times + 1,
            properties=props,
        )
        result = broker.store.put_message(msg)
        if result.status in _PUT_DONE:
            return answer_once_stored(broker, result, request.response(ResponseCode.SUCCESS))
        return request.response(ResponseCode.SYSTEM_ERROR, result.status.value)
