"""Transactions: END_TRANSACTION and the half-message check service (TransactionalMessageServiceImpl).

Half messages sit in RMQ_SYS_TRANS_HALF_TOPIC queue 0 (SendMessageProcessor parks them there). A
commit puts the real message to its topic and an op record (tag "d", body = the half's queue offset)
to RMQ_SYS_TRANS_OP_HALF_TOPIC; a rollback writes only the op record. The check service walks the
half queue from its consume offset (group CID_RMQ_SYS_TRANS, kept in the store's offset table like
any consumer offset), re-puts each half older than transactionTimeOut with TRANSACTION_CHECK_TIMES + 1
and sends CHECK_TRANSACTION_STATE (oneway) for the new copy to a live channel of its producer group;
past transactionCheckMax checks a half moves to TRANS_CHECK_MAX_TIME_TOPIC. Everything it needs after
a restart is in the store: the half and op queues and the two offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from rmqgate.server.ha import answer_once_stored
from rmqgate.server.remoting import Channel, Pending, RequestProcessor, cancel_and_wait
from rmqgate.server.topics import (
    PERM_RW,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)
from rmqgate.store.api import PutMessageStatus
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.header import parse_java_int, parse_java_long
from rmqgate.wire.headers import EndTransactionRequestHeader
from rmqgate.wire.message import MessageExt, encode_message
from rmqgate.wire.message_const import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageSysFlag,
    reset_transaction,
)

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.store.api import MessageStore, PutResult

log = logging.getLogger("rmqgate.server.transaction")

CID_RMQ_SYS_TRANS = "CID_RMQ_SYS_TRANS"
REMOVETAG = "d"
HALF_QUEUE_ID = 0
COMMIT = MessageSysFlag.TRANSACTION_COMMIT
ROLLBACK = MessageSysFlag.TRANSACTION_ROLLBACK
NOT_TYPE = MessageSysFlag.TRANSACTION_NOT
#: halves handled per pass before yielding to the event loop
CHECK_BATCH = 256

_PUT_DONE = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _java_number(text: str | None, parse: Callable[[str], int] = parse_java_int) -> int:
    """``getInt``/``getLong`` of the check: a user property may hold anything; unreadable is -1."""
    try:
        return parse(text or "")
    except ValueError:
        return -1


class TransactionalMessageService:
    """Half/op queues, END_TRANSACTION resolution and the periodic check."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store: MessageStore = broker.store
        c = broker.config
        self.timeout_ms = c.transactionTimeOut
        self.check_interval = c.transactionCheckInterval / 1000.0
        self.check_max = c.transactionCheckMax
        self.reserved_ms = c.fileReservedTime * 3_600_000
        #: op records at or after the op consume offset: op queue offset -> half queue offset
        self.ops: dict[int, int] = {}
        self.done: set[int] = set()  # half queue offsets with an op record (>= the check offset)
        self.reput: dict[int, int] = {}  # half queue offset -> queue offset of its checked copy
        #: after a restart (``reput`` is not kept): UNIQ_KEY -> newest half at or past the check offset
        #: then; a copy keeps its original's UNIQ_KEY, so an END for a half copied before finds it
        self.copies_by_uniq: dict[str, int] = {}
        self.checks_sent = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._load()

    # -- offsets --
    def _offset(self, topic: str) -> int:
        off = self.store.meta.query_offset(CID_RMQ_SYS_TRANS, topic, HALF_QUEUE_ID)
        if off < 0:
            off = self.store.get_min_offset_in_queue(topic, HALF_QUEUE_ID)
        return off

    @property
    def half_offset(self) -> int:
        return self._offset(RMQ_SYS_TRANS_HALF_TOPIC)

    @property
    def op_offset(self) -> int:
        return self._offset(RMQ_SYS_TRANS_OP_HALF_TOPIC)

    def _load(self) -> None:
        """Op records not yet behind the op offset, and the halves not yet checked past (after a
        restart both are only in the store)."""
        off = self.op_offset
        end = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
        while off < end:
            msg = self._message_at(RMQ_SYS_TRANS_OP_HALF_TOPIC, off)
            if msg is not None and msg.properties.get(PROPERTY_TAGS) == REMOVETAG:
                with contextlib.suppress(ValueError):
                    self._note_op(off, int(bytes(msg.body).decode()))
            off += 1
        off = self.half_offset
        end = self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        while off < end:
            msg = self._message_at(RMQ_SYS_TRANS_HALF_TOPIC, off)
            uniq = msg.properties.get(PROPERTY_UNIQ_KEY) if msg is not None else None
            if uniq:
                self.copies_by_uniq[uniq] = off
            off += 1

    def _note_op(self, op_offset: int, half_offset: int) -> None:
        self.ops[op_offset] = half_offset
        self.done.add(half_offset)

    def _message_at(self, topic: str, queue_offset: int) -> MessageExt | None:
        store = self.store
        units = store.get_consume_queue_units(topic, HALF_QUEUE_ID, queue_offset, 1)
        return store.look_message_by_offset(units[0][0]) if units else None

    # -- END_TRANSACTION --
    def is_finished(self, half_queue_offset: int) -> bool:
        return half_queue_offset in self.done or (
            half_queue_offset < self.half_offset and half_queue_offset not in self.reput
        )

    def resolve(self, half: MessageExt) -> MessageExt | None:
        """The live copy of ``half`` (the newest re-put by the checker), or None once it is finished."""
        qoff = half.queue_offset
        if qoff < self.half_offset and qoff not in self.reput and self.copies_by_uniq:
            copy = self.copies_by_uniq.get(half.properties.get(PROPERTY_UNIQ_KEY, ""), -1)
            if copy > qoff:  # checked past before a restart: its copy from then on
                qoff = copy
        seen = 0
        while qoff in self.reput and seen < 10_000:
            qoff = self.reput[qoff]
            seen += 1
        if self.is_finished(qoff):
            return None
        if qoff == half.queue_offset:
            return half
        return self._message_at(RMQ_SYS_TRANS_HALF_TOPIC, qoff)

    def delete_prepare_message(self, half: MessageExt) -> bool:
        """``deletePrepareMessage``: the op record marking the half done."""
        op = MessageExt(
            RMQ_SYS_TRANS_OP_HALF_TOPIC,
            str(half.queue_offset).encode(),
            0,
            half.queue_id,
            born_timestamp=_now_ms(),
            born_host=half.store_host,
            born_port=half.store_port,
            sys_flag=half.sys_flag & MessageSysFlag.STOREHOST_V6 and MessageSysFlag.BORNHOST_V6,
            properties={PROPERTY_TAGS: REMOVETAG},
        )
        result = self.store.put_message(op)
        if result.status not in _PUT_DONE:
            log.error("op record for half %d not stored: %s", half.queue_offset, result.status)
            return False
        self._note_op(result.queue_offset, half.queue_offset)
        return True

    def final_message(self, half: MessageExt, tx_type: int) -> MessageExt:
        """``endMessageTransaction``: the half restored to its real topic with the half's properties
        as stored. Java clears TRAN_MSG, REAL_TOPIC and REAL_QID only after writing the properties
        string, so a consumer of a 4.9.8 broker sees them (and WAIT, PGROUP) on committed messages."""
        return half.detached(
            topic=half.properties.get(PROPERTY_REAL_TOPIC, ""),
            queue_id=int(half.properties.get(PROPERTY_REAL_QUEUE_ID, "0") or 0),
            sys_flag=reset_transaction(half.sys_flag, tx_type),
            prepared_transaction_offset=half.commit_log_offset,
        )

    # -- check service --
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.check_interval)
            self._wake.clear()
            try:
                await self.check()
            except Exception:
                log.exception("transaction check pass failed")

    async def check(self) -> int:
        """One pass over the half queue; returns the number of checks sent."""
        # a pass looks the half topic up and creates it when missing (1 queue, read-write), as
        # TransactionalMessageBridge.fetchMessageQueues does: it is listed from the first pass on
        self.broker.topics.create_in_send_back(RMQ_SYS_TRANS_HALF_TOPIC, 1, PERM_RW, 0)
        store = self.store
        start = _now_ms()
        i = self.half_offset
        end = store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        sent = handled = 0
        while i < end:
            if i in self.done:
                i += 1
                continue
            half = self._message_at(RMQ_SYS_TRANS_HALF_TOPIC, i)
            if half is None:
                i += 1
                continue
            props = half.properties
            times = _java_number(props.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0"))
            if times >= self.check_max or start - half.born_timestamp > self.reserved_ms:
                self._discard(half)  # checked too often, or older than the store keeps files
                i += 1
                continue
            if half.store_timestamp >= start:
                break  # put during this pass (a copy made just now)
            age = start - half.born_timestamp
            immunity_s = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_s is not None:
                immunity = _java_number(
                    immunity_s, parse_java_long
                )  # getImmunityTime: unreadable (-1) -> transactionTimeOut
                immunity = self.timeout_ms if immunity == -1 else immunity * 1000
                if age < immunity:  # immune, but must not hold up the halves behind it
                    copy = self._put_back(half, times, immunity=True)
                    if copy is None:
                        break
                    self.reput[i] = copy.queue_offset
                    i += 1
                    continue
            elif 0 <= age < self.timeout_ms:
                break  # younger halves follow
            copy = self._put_back(half, times + 1)
            if copy is None:
                break  # try again next pass
            self.reput[i] = copy.queue_offset
            if self._send_check(copy):
                sent += 1
            i += 1
            handled += 1
            if handled % CHECK_BATCH == 0:
                self._commit_offsets(i)
                await asyncio.sleep(0)
        self._commit_offsets(i)
        return sent

    def _commit_offsets(self, half_offset: int) -> None:
        # an offset is written only when it moved, as Java's check does: a pass over an empty half
        # queue leaves CID_RMQ_SYS_TRANS out of the offset table (and out of topicList -c)
        meta = self.store.meta
        if half_offset != self.half_offset:
            meta.commit_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, HALF_QUEUE_ID, half_offset)
        op_off = op_start = self.op_offset
        while op_off in self.ops and self.ops[op_off] < half_offset:
            del self.ops[op_off]
            op_off += 1
        if op_off != op_start:
            meta.commit_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, op_off)
        self.done = {h for h in self.done if h >= half_offset}
        self.reput = {k: v for k, v in self.reput.items() if v >= half_offset or v in self.reput}
        if self.copies_by_uniq:
            self.copies_by_uniq = {
                u: o for u, o in self.copies_by_uniq.items() if o >= half_offset or o in self.reput
            }

    def _put_back(self, half: MessageExt, times: int, *, immunity: bool = False) -> MessageExt | None:
        """``putBackHalfMsgQueue``: the half again at the end of the queue, one more check counted
        (an immune half's copy counts none and remembers the offset it was first prepared at)."""
        copy = half.detached()
        if immunity:
            copy.properties.setdefault(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
        else:
            copy.properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        result: PutResult = self.store.put_message(copy)
        if result.status not in _PUT_DONE:
            log.error("re-put of half %d failed: %s", half.queue_offset, result.status)
            return None
        copy.queue_offset = result.queue_offset
        copy.commit_log_offset = result.physical_offset
        copy.store_timestamp = result.store_timestamp
        return copy

    def _discard(self, half: MessageExt) -> None:
        """Checked transactionCheckMax times: park it in TRANS_CHECK_MAX_TIME_TOPIC."""
        self.broker.topics.create_in_send_back(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_RW, 0)
        msg = half.detached(topic=RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0)
        result = self.store.put_message(msg)
        log.warning(
            "half %d (%s) checked %s times, moved to %s: %s",
            half.queue_offset, half.properties.get(PROPERTY_UNIQ_KEY),
            half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES), RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
            result.status.value,
        )  # fmt: skip

    def _send_check(self, half: MessageExt) -> bool:
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        channel = self.broker.producers.any_channel(group)
        if channel is None:
            log.info("no live producer of group %s to check half %d", group, half.queue_offset)
            return False
        channel.send_oneway(check_request(half))
        self.checks_sent += 1
        return True


def check_request(half: MessageExt) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE for ``half`` (body: it in stored format, restored to its real topic)."""
    props = half.properties
    uniq = props.get(PROPERTY_UNIQ_KEY)
    real = half.detached(
        topic=props.get(PROPERTY_REAL_TOPIC, half.topic),
        queue_id=int(props.get(PROPERTY_REAL_QUEUE_ID, str(half.queue_id)) or 0),
    )
    real.store_timestamp = half.store_timestamp
    real.properties[PROPERTY_WAIT] = "false"  # renewHalfMessageInner's setWaitStoreMsgOK(false) shows here
    ext = {
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.commit_log_offset),
        "offsetMsgId": half.offset_msg_id,
    }
    if uniq:
        ext["msgId"] = uniq
        ext["transactionId"] = uniq
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, bytes(encode_message(real)))


class EndTransactionProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.END_TRANSACTION,)

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.service: TransactionalMessageService = broker.transactions

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | Pending | None:
        h = EndTransactionRequestHeader.from_ext(request.ext_fields or {})
        if self.broker.slave:
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE)
        kind = h.commit_or_rollback
        if kind not in (COMMIT, ROLLBACK):
            if kind == NOT_TYPE:
                log.info(
                    "producer %s ended transaction %s as unknown (fromTransactionCheck=%s)",
                    channel.remote_addr, h.msg_id, h.from_transaction_check,
                )  # fmt: skip
            return None
        service = self.service
        half = self.broker.store.look_message_by_offset(h.commit_log_offset)
        if half is None or half.topic != RMQ_SYS_TRANS_HALF_TOPIC:
            return request.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        error = self._check_prepare(half, h)
        if error is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, error)
        live = service.resolve(half)
        if live is None:  # already committed/rolled back (or discarded): nothing changes
            return request.response(ResponseCode.SUCCESS)
        if kind == COMMIT:
            final = service.final_message(live, COMMIT)
            result = self.broker.store.put_message(final)
            if result.status not in _PUT_DONE:
                code, remark = (
                    (ResponseCode.MESSAGE_ILLEGAL, "The message is illegal.")
                    if result.status
                    in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
                    else (ResponseCode.SYSTEM_ERROR, result.status.value)
                )
                return request.response(code, remark)
            service.delete_prepare_message(live)
            return answer_once_stored(self.broker, result, request.response(ResponseCode.SUCCESS))
        service.delete_prepare_message(live)
        return request.response(ResponseCode.SUCCESS)

    @staticmethod
    def _check_prepare(half: MessageExt, h: EndTransactionRequestHeader) -> str | None:
        if half.properties.get(PROPERTY_PRODUCER_GROUP) != h.producer_group:
            return "The producer group wrong"
        if half.queue_offset != h.tran_state_table_offset:
            return "The transaction state table offset wrong"
        if half.commit_log_offset != h.commit_log_offset:
            return "The commit log offset wrong"
        return None
