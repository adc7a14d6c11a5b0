"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and the C++ batch (310, m="1").

Per request: decode the header once (generated ``from_ext_v2`` for the V2 codes), check topic and
queue (``AbstractSendMessageProcessor.msgCheck``: auto-creation from TBW102, RocketMQ's codes and
remarks), build the inner message once, one store append, one response. Transactional half messages
are parked in RMQ_SYS_TRANS_HALF_TOPIC (the END_TRANSACTION side is issue 5's processor).
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.remoting import Channel, Pending, RequestProcessor
from rmqgate.server.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_RW,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_TRANS_HALF_TOPIC,
    TOPIC_SYS_FLAG_UNIT,
    TOPIC_SYS_FLAG_UNIT_SUB,
    topic_config_str,
    validate_topic,
)
from rmqgate.store.api import PutMessageStatus, PutResult
from rmqgate.store.clean import disk_util
from rmqgate.wire.codes import LanguageCode, MQVersion, RequestCode, ResponseCode, SerializeType
from rmqgate.wire.command import BROKER_VERSION, RESPONSE_FLAG, RemotingCommand
from rmqgate.wire.errors import MessageFormatError
from rmqgate.wire.header import parse_java_int
from rmqgate.wire.headers import SendMessageRequestHeader
from rmqgate.wire.layout import EXT_VALUE_LENGTH, FRAME_PREFIX
from rmqgate.wire.message import MessageExt, format_properties, parse_properties
from rmqgate.wire.message_batch import decode_batch
from rmqgate.wire.message_const import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageSysFlag,
    reset_transaction,
    transaction_type,
)
from rmqgate.wire.serialization import encode_ext_fields, encode_json_header, rocketmq_frame

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
_V1 = RequestCode.SEND_MESSAGE
_BATCH = RequestCode.SEND_BATCH_MESSAGE
_MULTI_TAGS = MessageSysFlag.MULTI_TAGS
_BORN_V6 = MessageSysFlag.BORNHOST_V6
_PUT_OK = PutMessageStatus.PUT_OK
_TX_HALF_TYPES = (MessageSysFlag.TRANSACTION_PREPARED, MessageSysFlag.TRANSACTION_ROLLBACK)
_randrange = random.randrange
_pack_frame_prefix = FRAME_PREFIX.pack
_JSON = int(SerializeType.JSON)
_SUCCESS = int(ResponseCode.SUCCESS)
_LANG_JAVA = int(LanguageCode.JAVA)
_pack_value_len = EXT_VALUE_LENGTH.pack
# an extFields key's length and bytes (a value's length is the same pack without its value)
_EXT_MSG_ID, _EXT_QUEUE_ID, _EXT_QUEUE_OFFSET = (
    encode_ext_fields({key: ""})[: -EXT_VALUE_LENGTH.size] for key in ("msgId", "queueId", "queueOffset")
)
# a value's length field for each length a SEND_OK value can have (an offsetMsgId is at most 56
# characters: an IPv6 store host and port in hex, and the offset's 16)
_VALUE_LENGTHS = tuple(_pack_value_len(n) for n in range(64))
_OPAQUE_SLOT = 0x7FFFFFF1  # an opaque no template field holds


def _json_send_ok_template(region: str, trace_on: str) -> bytes | None:
    """The JSON SEND_OK header as encode_json_header writes it, with %-slots for msgId (prefix bytes,
    offset), queueId, queueOffset and opaque: derived from the generic encoding once per processor, so
    the two cannot drift apart. None where the region holds a slot's marker (the generic path answers)."""
    slots = {"msgId": ("msgId-slot-5e1f", "%s%016X"), "queueId": ("queueId-slot-5e1f", "%d")}
    slots["queueOffset"] = ("queueOffset-slot-5e1f", "%d")
    ext = {**{key: mark for key, (mark, _) in slots.items()}, "MSG_REGION": region, "TRACE_ON": trace_on}
    ext = dict(sorted(ext.items()))  # the keys in the order fastjson writes this answer's map
    ok = RemotingCommand(
        0, language=_LANG_JAVA, version=BROKER_VERSION, opaque=_OPAQUE_SLOT, flag=RESPONSE_FLAG,
        ext_fields=ext, serialize_type=_JSON,
    )  # fmt: skip
    head = encode_json_header(ok).replace(b"%", b"%%")
    marks = [(f'"{mark}"'.encode(), f'"{slot}"'.encode()) for mark, slot in slots.values()]
    marks.append((b'"opaque":%d' % _OPAQUE_SLOT, b'"opaque":%d'))
    for mark, slot in marks:
        if head.count(mark) != 1:
            return None
        head = head.replace(mark, slot)
    return head


_PUT_ERRORS: dict[PutMessageStatus, tuple[int, str]] = {
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 128k, msg properties length limit 32k.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. "
        "msg body length limit 128k, msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the broker's disk is "
        "full [%s], messages are put to the slave, message store has been shut down, etc.",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}  # fmt: skip
# Statuses Java answers with a header (the client still reads msgId/queueOffset).
_PUT_WITH_HEADER = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}


def _wait_store_msg_ok(wait: str | None) -> bool:
    """``isWaitStoreMsgOK``: WAIT absent or "true" (any case). Under SYNC_FLUSH only such a send is
    answered after its group commit; the others at once (the commit happens all the same)."""
    return wait is None or wait.lower() == "true"


def _parked_with_wait(props: dict[str, str], sys_flag: int) -> bool:
    """Whether the store parks the message under SCHEDULE_TOPIC_XXXX (a DELAY level above 0 on a
    message that is no transaction's prepared or rolled-back half). ``CommitLog.putMessage`` then
    writes the properties string again from the map, WAIT included, so 4.9.8 stores a delayed
    message's WAIT (and delivers it) where it drops a plain message's."""
    level = props.get(PROPERTY_DELAY)
    if level is None or transaction_type(sys_flag) in _TX_HALF_TYPES:
        return False
    try:
        return parse_java_int(level) > 0
    except ValueError:  # the store refuses it
        return False


def born_address(channel: Channel) -> tuple[bytes, int, int]:
    """(raw address, port, sysFlag bit) of the producer, cached per connection."""
    cached = channel.attrs.get("born")
    if cached is None:
        host, _, port = channel.remote_addr.rpartition(":")
        try:
            addr = ipaddress.ip_address(host.strip("[]"))
            raw = addr.packed
            if addr.version == 6 and addr.ipv4_mapped is not None:
                raw = addr.ipv4_mapped.packed
        except ValueError:
            raw = b"\x7f\x00\x00\x01"
        cached = channel.attrs["born"] = (raw, int(port or 0), _BORN_V6 if len(raw) == 16 else 0)
    return cached


class SendMessageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    )

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store
        self.topic_table = broker.topics.table
        self.cluster = broker.config.brokerClusterName
        self.region = broker.config.regionId
        self.trace_on = "true" if broker.config.traceOn else "false"
        self.max_message_size = broker.config.maxMessageSize
        self.ha = broker.ha_service if broker.config.brokerRole == "SYNC_MASTER" else None
        self._json_ok = _json_send_ok_template(self.region, self.trace_on)
        # the ROCKETMQ answer's extFields entries in encode_rocketmq_header's order, with %-slots for
        # each value's length field and msgId (prefix, offset), queueId and queueOffset
        tail = encode_ext_fields({"MSG_REGION": self.region, "TRACE_ON": self.trace_on})
        self._rocketmq_ok = b"".join(
            (
                _EXT_MSG_ID,
                b"%b%b%016X",
                _EXT_QUEUE_ID,
                b"%b%b",
                _EXT_QUEUE_OFFSET,
                b"%b%b",
                tail.replace(b"%", b"%%"),
            )
        )

    def process(self, channel: Channel, request: RemotingCommand) -> Any:
        h = request.decode_custom_header(SendMessageRequestHeader, request.code != _V1)
        topic = h.topic
        tc = self.topic_table.get(topic)
        if (
            tc is None
            or topic in NOT_ALLOWED_SEND_TOPICS
            or not self.broker.config.brokerPermission & PERM_WRITE
        ):
            created = tc is None
            checked = self._msg_check(channel, request, h)
            if type(checked) is RemotingCommand:
                return checked
            if created:  # auto-created: answer once the name servers know the topic (registerBrokerAll)
                return self._registered(self._send(channel, request, h, checked))
            tc = checked
        return self._send(channel, request, h, tc)

    async def _registered(self, outcome: Any) -> Any:
        await self.broker.register_all()
        if type(outcome) is Pending:
            return outcome.respond(await outcome.future)
        if isinstance(outcome, Awaitable):
            outcome = await outcome
        return outcome

    def _send(
        self, channel: Channel, request: RemotingCommand, h: SendMessageRequestHeader, tc: dict[str, Any]
    ) -> Any:
        topic = h.topic
        queue_id = h.queue_id
        write_nums = tc["writeQueueNums"]
        if queue_id >= write_nums and queue_id >= tc["readQueueNums"]:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {topic_config_str(tc)} Producer: {channel.remote_addr}",
            )
        if queue_id < 0:
            queue_id = _randrange(write_nums) if write_nums > 0 else 0
        body = request.body or b""
        if len(body) > self.max_message_size:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} exceeds the broker's maxMessageSize {self.max_message_size}",
            )
        sys_flag = h.sys_flag
        if tc.get("topicFilterType") == "MULTI_TAG":
            sys_flag |= _MULTI_TAGS
        born_host, born_port, born_v6 = channel.attrs.get("born") or born_address(channel)
        sys_flag |= born_v6
        if h.batch or request.code == _BATCH:
            return self._send_batch(request, h, topic, queue_id, sys_flag, born_host, born_port, body)
        # the answer names the queue asked for (or picked): not the DLQ's, the delay level's or the
        # half queue's the message lands in (handlePutMessageResult's queueIdInt)
        answer_queue = queue_id
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            retry = self._retry_or_dlq(request, h, queue_id)
            if type(retry) is RemotingCommand:
                return retry
            # to the DLQ, a DELAY the client set still applies: 4.9.8's setDelayTimeLevel(0) there is
            # undone when the request's properties are set on the message afterwards
            topic, queue_id = retry
        props = parse_properties(h.properties) if h.properties else {}
        wait = props.pop(PROPERTY_WAIT, None)
        props[PROPERTY_CLUSTER] = self.cluster
        tran = props.get(PROPERTY_TRANSACTION_PREPARED)
        if tran is not None and tran.lower() == "true":  # Boolean.parseBoolean; the sysFlag is not read
            if self.broker.config.rejectTransactionMessage:
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{self.broker.config.brokerIP1}] sending transaction message is forbidden",
                )
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QID] = str(queue_id)
            if wait is not None:  # parseHalfMessageInner writes the properties again, WAIT included
                props[PROPERTY_WAIT] = wait
            sys_flag = reset_transaction(sys_flag, 0)
            topic, queue_id = RMQ_SYS_TRANS_HALF_TOPIC, 0
        elif wait is not None and _parked_with_wait(props, sys_flag):
            props[PROPERTY_WAIT] = wait
        msg = MessageExt(
            topic, body, h.flag, queue_id, 0, 0, sys_flag, h.born_timestamp, born_host, born_port,
            0, b"\x00\x00\x00\x00", 0, h.reconsume_times or 0, 0, props,
        )  # fmt: skip
        # a DELAY Integer.parseInt refuses raises MessageFormatError: SYSTEM_ERROR, as Java's exception
        result = self.store.put_message(msg)
        if answer_queue != result.queue_id:
            result = result._replace(queue_id=answer_queue)
        if (
            result.status is _PUT_OK
            and (self.ha is not None or result.durable is not None)
            and _wait_store_msg_ok(wait)
        ):
            if self.ha is not None:
                result = self.ha.handle_ha(result)  # SYNC_MASTER: answered once a slave has it
            if result.durable is not None and result.status is _PUT_OK:
                return self._await_flush(request, result)
        return self.response(request, result)

    def response(self, request: RemotingCommand, result: PutResult) -> RemotingCommand | bytes:
        status = result.status
        if status is _PUT_OK and result.msg_ids is None:
            if request.serialize_type == _JSON:
                if self._json_ok:
                    # the common answer, encoded in one step: what encode_json_header writes for it
                    head = self._json_ok % (
                        result.msg_id_prefix,
                        result.physical_offset,
                        result.queue_id,
                        result.queue_offset,
                        request.opaque,
                    )
                    return _pack_frame_prefix(4 + len(head), len(head)) + head
            elif prefix := result.msg_id_prefix:
                # the same answer with a ROCKETMQ header: what encode_rocketmq_header writes for it
                queue_id = b"%d" % result.queue_id
                queue_offset = b"%d" % result.queue_offset
                ext = self._rocketmq_ok % (
                    _VALUE_LENGTHS[len(prefix) + 16], prefix, result.physical_offset,
                    _VALUE_LENGTHS[len(queue_id)], queue_id,
                    _VALUE_LENGTHS[len(queue_offset)], queue_offset,
                )  # fmt: skip
                return rocketmq_frame(
                    _SUCCESS, _LANG_JAVA, BROKER_VERSION, request.opaque, RESPONSE_FLAG, ext
                )
        code = _PUT_WITH_HEADER.get(status)
        if code is None:
            code, remark = _PUT_ERRORS.get(status, (ResponseCode.SYSTEM_ERROR, status.value))
            # the partitions' use, as diskUtil() quotes it
            if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                remark %= disk_util(self.store)
            return request.response(code, remark)
        return request.response(
            code,
            None,
            {
                "msgId": result.msg_id,
                "queueId": str(result.queue_id),
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": self.region,
                "TRACE_ON": self.trace_on,
            },
        )

    def _await_flush(self, request: RemotingCommand, result: PutResult) -> Pending:
        """SYNC_FLUSH: answer once the group commit resolves ``result.durable`` (PUT_OK, or
        FLUSH_DISK_TIMEOUT past syncFlushTimeout)."""
        assert result.durable is not None

        def respond(status: PutMessageStatus) -> RemotingCommand | bytes:
            return self.response(request, result._replace(status=status))

        return Pending(asyncio.wrap_future(result.durable), respond)

    def _send_batch(
        self,
        request: RemotingCommand,
        h: SendMessageRequestHeader,
        topic: str,
        queue_id: int,
        sys_flag: int,
        born_host: bytes,
        born_port: int,
        body: bytes,
    ) -> Any:
        # asyncSendBatchMessage / asyncPutMessages: no retry or DLQ step; a v1 topic only; a delay level
        # in the request's own properties or a transaction flag makes the batch illegal (the
        # messages' DELAY is stored as it is, not scheduled)
        if len(topic) > 127:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(topic)}"
            )
        batch_props = parse_properties(h.properties) if h.properties else {}
        try:
            delay = parse_java_int(batch_props.get(PROPERTY_DELAY, "0"))
        except ValueError:
            delay = 1  # Java's Integer.parseInt fails the request
        if transaction_type(sys_flag) or delay > 0:
            return request.response(*_PUT_ERRORS[PutMessageStatus.MESSAGE_ILLEGAL])
        try:
            entries = decode_batch(body)
        except MessageFormatError as exc:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}")
        if not entries:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        wait = _wait_store_msg_ok(batch_props.get(PROPERTY_WAIT))
        batch_props[PROPERTY_CLUSTER] = self.cluster
        # a 5.x client's batch carries an id of its own besides each message's (DefaultMQProducer.batch
        # sets both; 4.x clients never set the batch's): appended after each message's UNIQ_KEY it
        # would be the one every consumer reads, as on 4.9.8 and 5.3.3, though the send answered the
        # messages' own ids. rmqgate leaves it out, so each message keeps its own id
        batch_props.pop(PROPERTY_UNIQ_KEY, None)
        # MessageExtBatchEncoder: each message's properties string as sent, then the request's (with
        # CLUSTER) in the broker's HashMap order; a key in both is there twice and the later one counts
        batch_text = format_properties(batch_props, java_order=True)
        msgs = []
        for entry in entries:
            raw = entry.properties_raw or ""  # decode_batch keeps each message's string as sent
            if raw and not raw.endswith(PROPERTY_SEPARATOR):
                raw += PROPERTY_SEPARATOR
            props = entry.properties
            props.update(batch_props)
            msgs.append(
                MessageExt(
                    topic,
                    entry.body,
                    entry.flag,
                    queue_id,
                    0,
                    0,
                    sys_flag,
                    h.born_timestamp,
                    born_host,
                    born_port,
                    0,
                    b"\x00\x00\x00\x00",
                    0,
                    h.reconsume_times or 0,
                    0,
                    props,
                    properties_raw=raw + batch_text,
                )
            )
        try:
            result = self.store.put_messages(msgs)
        except MessageFormatError as exc:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if result.status is _PUT_OK:
            self.broker.stats.record_batch_put(result.topic, len(msgs))
            if self.ha is not None and wait:
                result = self.ha.handle_ha(result)
        if result.durable is not None and result.status is _PUT_OK and wait:
            return self._await_flush(request, result)
        return self.response(request, result)

    def _msg_check(
        self, channel: Channel, request: RemotingCommand, h: SendMessageRequestHeader
    ) -> dict[str, Any] | RemotingCommand:
        broker = self.broker
        topic = h.topic
        tc = broker.topics.get(topic)
        # 4.9.8's msgCheck: a broker without W refuses sends to order topics only (others go on, and a
        # new topic is still created), and a topic's own perm is never read on this path
        if not broker.config.brokerPermission & PERM_WRITE and tc is not None and tc.get("order"):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.brokerIP1}] sending message is forbidden",
            )
        error = validate_topic(topic)
        if error is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, error)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return request.response(
                ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        if tc is None:
            sys_flag = 0
            if h.unit_mode:
                sys_flag = (
                    TOPIC_SYS_FLAG_UNIT_SUB
                    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                    else TOPIC_SYS_FLAG_UNIT
                )
            tc = broker.topics.create_in_send(topic, h.default_topic, h.default_topic_queue_nums, sys_flag)
            if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = broker.topics.create_in_send_back(topic, 1, PERM_RW, sys_flag)
            if tc is None:
                return request.response(
                    ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!{FAQ}"
                )
        return tc

    def _retry_or_dlq(
        self, request: RemotingCommand, h: SendMessageRequestHeader, queue_id: int
    ) -> tuple[str, int] | RemotingCommand:
        """``handleRetryAndDLQ``: a retry message past its max reconsume times goes to %DLQ%group."""
        group = h.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        sgc = self.broker.subscription_groups.find(group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}"
            )
        max_times = int(sgc.get("retryMaxTimes", 16))
        if request.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        if (h.reconsume_times or 0) >= max_times:
            dlq = DLQ_GROUP_TOPIC_PREFIX + group
            self.broker.topics.create_in_send_back(dlq, 1, PERM_RW, 0)  # DLQ_NUMS_PER_GROUP, as Java
            return dlq, 0
        return h.topic, queue_id
