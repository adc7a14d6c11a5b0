"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): request-reply's answers.

A replier's message names its requester in REPLY_TO_CLIENT. The broker pushes it to that client's
producer connection with PUSH_REPLY_MESSAGE_TO_CLIENT (326) and answers the replier with the push's
outcome (``ReplyMessageProcessor``); with ``storeReplyMessageEnable`` it also stores the message
(in ``<cluster>_REPLY_TOPIC``), whatever the push gave.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.server.send import _PUT_WITH_HEADER, born_address
from rmqgate.server.topics import topic_config_str
from rmqgate.store.api import PutMessageStatus
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import HeaderFieldError
from rmqgate.wire.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from rmqgate.wire.message import MessageExt, format_properties, parse_properties
from rmqgate.wire.message_const import PROPERTY_MESSAGE_REPLY_TO_CLIENT, PROPERTY_PUSH_REPLY_TIME

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.reply")

#: ``Broker2Client.callClient``'s wait for the requester's answer
PUSH_TIMEOUT = 10.0


class ReplyMessageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        ext = request.ext_fields
        if ext is None:
            raise HeaderFieldError("SendMessageRequestHeader: the request has no extFields")
        if request.code == RequestCode.SEND_REPLY_MESSAGE:
            h = SendMessageRequestHeader.from_ext(ext)
        else:
            h = SendMessageRequestHeader.from_ext_v2(ext)
        # msgCheck: the send processor's checks and auto-creation (no wait for the name servers)
        tc = self.broker.send_processor._msg_check(channel, request, h)
        if type(tc) is RemotingCommand:
            return tc
        queue_id = h.queue_id
        if queue_id >= max(tc["writeQueueNums"], tc["readQueueNums"]):
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {topic_config_str(tc)} Producer: {channel.remote_addr}",
            )
        if queue_id < 0:  # a topic of no write queues takes queue 0, as the send processor's sends do
            write_nums = tc["writeQueueNums"]
            queue_id = random.randrange(99999999) % write_nums if write_nums > 0 else 0
        return self._reply(channel, request, h, queue_id)

    async def _reply(
        self, channel: Channel, request: RemotingCommand, h: SendMessageRequestHeader, queue_id: int
    ) -> RemotingCommand:
        config = self.broker.config
        send = self.broker.send_processor
        body = request.body or b""
        props = parse_properties(h.properties) if h.properties else {}
        pushed, remark = await self._push(channel, h, body, dict(props))
        fields: dict[str, str] = {"MSG_REGION": send.region, "TRACE_ON": send.trace_on}
        if pushed:
            # "0": a msgId the client can decode when nothing is stored
            fields |= {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0"}
        if config.storeReplyMessageEnable:
            born_host, born_port, born_v6 = channel.attrs.get("born") or born_address(channel)
            # the request's sysFlag is not carried over (Java's inner message keeps 0), and the stored
            # properties are the request's string as sent (no CLUSTER, no PUSH_REPLY_TIME)
            msg = MessageExt(
                h.topic, body, h.flag, queue_id, 0, 0, born_v6, h.born_timestamp, born_host, born_port,
                0, b"\x00\x00\x00\x00", 0, h.reconsume_times or 0, 0, props, properties_raw=h.properties,
            )  # fmt: skip
            result = self.broker.store.put_message(msg)
            if send.ha is not None and result.status is PutMessageStatus.PUT_OK:
                result = send.ha.handle_ha(result)  # SYNC_MASTER: stored once the slave has it
            status = result.status
            if result.durable is not None and status is PutMessageStatus.PUT_OK:
                status = await asyncio.wrap_future(result.durable)
            if status in _PUT_WITH_HEADER:  # the statuses whose answer carries msgId/queueOffset
                fields |= {
                    "msgId": result.msg_id,
                    "queueId": str(queue_id),
                    "queueOffset": str(result.queue_offset),
                }
            else:
                log.warning("reply message to %s not stored: %s", h.topic, status.value)
        if pushed:
            return request.response(ResponseCode.SUCCESS, None, fields)
        return request.response(ResponseCode.SYSTEM_ERROR, remark, fields)

    async def _push(
        self, channel: Channel, h: SendMessageRequestHeader, body: bytes, props: dict[str, str]
    ) -> tuple[bool, str]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: (pushed, the replier's remark if not)."""
        sender = props.get(PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if sender is None:
            log.warning("%s is null, can not reply message", PROPERTY_MESSAGE_REPLY_TO_CLIENT)
            return False, f"reply message properties[{PROPERTY_MESSAGE_REPLY_TO_CLIENT}] is null"
        target = self.broker.producers.find_channel(sender)
        if target is None:
            remark = f"push reply message fail, channel of <{sender}> not found."
            log.warning(remark)
            return False, remark
        props[PROPERTY_PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        header = ReplyMessageRequestHeader(
            producer_group=h.producer_group,
            topic=h.topic,
            default_topic=h.default_topic,
            default_topic_queue_nums=h.default_topic_queue_nums,
            queue_id=h.queue_id,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            flag=h.flag,
            born_host=channel.remote_addr,
            store_host=self.broker.config.broker_addr,
            store_timestamp=int(time.time() * 1000),
            properties=format_properties(props, java_order=True),
            reconsume_times=h.reconsume_times,
            unit_mode=h.unit_mode,
        )
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header.to_ext(), body)
        failed = f"push reply message to {sender}fail."  # (sic: Java's remark has no space)
        try:
            answer = await target.request(push, PUSH_TIMEOUT)
        except (TimeoutError, ConnectionError, OSError) as exc:
            log.warning("push reply message to <%s> fail: %s", sender, exc)
            return False, failed
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> return fail, response remark: %s", sender, answer.remark)
            return False, failed
        return True, ""
