"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) with long polling (``PullMessageProcessor``,
``PullRequestHoldService``).

A pull that finds nothing (19) with the suspend flag is parked under ``topic@queueId``; the store's
arrival listener wakes it when a matching message lands in that queue (its tags code, and for an
SQL92 subscription its properties, read from the record only while such a pull is parked), and a
timer answers it at the request's suspendTimeoutMillis. A woken pull runs again without suspending
(and without the commit-offset side effect), exactly like the Java broker's
``executeRequestWhenWakeup``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.consumer import SubscriptionData, SubscriptionParseError
from rmqgate.server.consumer_filter import ConsumerFilterData, build, message_filter
from rmqgate.server.filter import is_tag_type
from rmqgate.server.remoting import Channel, RequestProcessor, server_serialized
from rmqgate.server.topics import OFFSET_MOVED_EVENT, PERM_READ
from rmqgate.store.api import DispatchRequest, GetMessageStatus, PutMessageStatus
from rmqgate.wire.bodies import MessageQueue, OffsetMovedEvent
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand
from rmqgate.wire.errors import HeaderFieldError, MessageFormatError
from rmqgate.wire.headers import PullMessageRequestHeader
from rmqgate.wire.message import MessageExt, RecordProperties, record_properties
from rmqgate.wire.message_const import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_TAGS, MessageSysFlag

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION, FLAG_CLASS_FILTER, FLAG_LITE_PULL = 1, 2, 4, 8, 16

G = GetMessageStatus
#: Parked pulls one connection may hold (a push consumer parks one per assigned queue); beyond it a
#: pull is answered at once (19) instead of parking, so a client cannot make the broker hold
#: unbounded state.
MAX_HELD_PULLS_PER_CHANNEL = 4096
_from_ext = PullMessageRequestHeader.from_ext
_REQUIRED = frozenset(f.wire for f in PullMessageRequestHeader.FIELDS if f.required)
_NONE_MISSING: frozenset[str] = frozenset()
log = logging.getLogger("rmqgate.server.pull")


def status_code(status: GetMessageStatus, offset: int) -> int:
    """RocketMQ's GetMessageStatus -> response code mapping."""
    if status is G.FOUND:
        return ResponseCode.SUCCESS
    if status is G.MESSAGE_WAS_REMOVING or status is G.NO_MATCHED_MESSAGE:
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status is G.NO_MATCHED_LOGIC_QUEUE or status is G.NO_MESSAGE_IN_QUEUE:
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status is G.OFFSET_FOUND_NULL or status is G.OFFSET_OVERFLOW_ONE:
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


PropertiesMatch = Callable[[RecordProperties], bool]


class _HeldPull:
    __slots__ = ("channel", "codes", "done", "offset", "props_filter", "request", "timer")

    def __init__(
        self,
        channel: Channel,
        request: RemotingCommand,
        offset: int,
        codes: Collection[int] | None,
        props_filter: PropertiesMatch | None,
    ) -> None:
        self.channel = channel
        self.request = request
        self.offset = offset
        self.codes = codes
        self.props_filter = props_filter  # the MessageFilter's commit-log half (SQL92), or None
        self.done = False
        self.timer: asyncio.TimerHandle | None = None


class PullRequestHoldService:
    """Parked pulls by ``topic@queueId``; woken by message arrival or their timeout."""

    def __init__(self, processor: PullMessageProcessor) -> None:
        self.processor = processor
        self.check_interval = 5.0
        self.held: dict[tuple[str, int], list[_HeldPull]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def bind(self, loop: asyncio.AbstractEventLoop, check_interval: float = 5.0) -> None:
        self.loop = loop
        self._loop_thread = threading.get_ident()
        self.check_interval = check_interval
        self._checker = loop.create_task(self._check_loop())

    async def _check_loop(self) -> None:
        """``checkHoldRequest``: every 5 s (1 s with short polling) a parked pull whose queue has grown
        past its offset is run again even if no arriving message matched its tags (Java passes a null
        tagsCode here, which every filter accepts)."""
        store = self.processor.store
        while True:
            await asyncio.sleep(self.check_interval)
            for key in list(self.held):
                try:
                    newest = store.get_max_offset_in_queue(*key)
                except Exception:
                    continue
                self.notify(key[0], key[1], newest - 1, None)

    def unbind(self) -> None:
        checker = getattr(self, "_checker", None)
        if checker is not None:
            checker.cancel()

    def suspend(self, channel: Channel, request: RemotingCommand, key: tuple[str, int], offset: int,
                codes: Collection[int] | None, timeout: float,
                props_filter: PropertiesMatch | None = None) -> None:  # fmt: skip
        held = _HeldPull(channel, request, offset, codes, props_filter)
        channel.attrs["held_pulls"] = channel.attrs.get("held_pulls", 0) + 1
        self.held.setdefault(key, []).append(held)
        loop = self.loop or asyncio.get_event_loop()
        held.timer = loop.call_later(max(0.0, timeout), self._expire, key, held)

    def _expire(self, key: tuple[str, int], held: _HeldPull) -> None:
        waiting = self.held.get(key)
        if waiting is not None:
            try:
                waiting.remove(held)
            except ValueError:
                pass
            if not waiting:
                del self.held[key]
        self._wake(held)

    def _wake(self, held: _HeldPull) -> None:
        if held.done:
            return
        held.done = True
        held.channel.attrs["held_pulls"] -= 1
        if held.timer is not None:
            held.timer.cancel()
        if held.channel.closed:
            return
        try:
            response = self.processor.pull(held.channel, held.request, allow_suspend=False)
        except Exception as exc:  # same policy as the core: answer SYSTEM_ERROR
            response = held.request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None:  # written by the hold service, not the callback: JSON, as Java's
            held.channel.send_response(server_serialized(response))

    def on_arrival(self, d: DispatchRequest) -> None:
        """The store's arrival listener (called in the putting thread)."""
        if not self.held:
            return
        if (
            self._loop_thread is not None
            and threading.get_ident() != self._loop_thread
            and self.loop is not None
        ):
            self.loop.call_soon_threadsafe(
                self.notify, d.topic, d.queue_id, d.consume_queue_offset, d.tags_code, d.commit_log_offset
            )
            return
        self.notify(d.topic, d.queue_id, d.consume_queue_offset, d.tags_code, d.commit_log_offset)

    def notify(
        self, topic: str, queue_id: int, queue_offset: int, tags_code: int | None, commit_log_offset: int = -1
    ) -> None:
        """``notifyMessageArriving``: wake the pulls parked on the queue that the message at
        ``commit_log_offset`` matches (its tags code, then an SQL92 filter on its properties, as
        isMatchedByConsumeQueue then isMatchedByCommitLog); without a tags code (the periodic check)
        every pull behind the queue's end wakes."""
        key = (topic, queue_id)
        waiting = self.held.get(key)
        if not waiting:
            return
        keep = []
        wake = []
        props: RecordProperties | None = None
        for held in waiting:
            if queue_offset >= held.offset and (
                held.codes is None or tags_code is None or tags_code in held.codes
            ):
                match = held.props_filter
                if match is not None and tags_code is not None and commit_log_offset >= 0:
                    if props is None:
                        props = self._properties(commit_log_offset)
                    if props is not None and not match(props):
                        keep.append(held)
                        continue
                wake.append(held)
            else:
                keep.append(held)
        if keep:
            self.held[key] = keep
        else:
            del self.held[key]
        for held in wake:
            self._wake(held)

    def _properties(self, commit_log_offset: int) -> RecordProperties | None:
        """The properties of the stored message (None when it cannot be read: the pull wakes and
        reads the queue itself)."""
        rec = self.processor.store.select_one_message_by_offset(commit_log_offset)
        if rec is None:
            return None
        try:
            return record_properties(rec)
        except MessageFormatError:
            return None

    def wake_all(self) -> None:
        for key in list(self.held):
            for held in self.held.pop(key, []):
                self._wake(held)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.held.values())


def decode_pull_header(ext: dict[str, str]) -> tuple[PullMessageRequestHeader, frozenset[str]]:
    """The header and the required fields it lacks. 4.9.8's PullMessageRequestHeader is a
    FastCodesHeader: a missing field is only logged and stays null, and the pull fails (a
    NullPointerException, SYSTEM_ERROR) where the processor reads it, after the checks before it
    (a pull without queueOffset from a group with no consumers gets SUBSCRIPTION_NOT_EXIST)."""
    if ext.keys() >= _REQUIRED:
        return _from_ext(ext), _NONE_MISSING
    missing = _REQUIRED.difference(ext)
    return _from_ext({**ext, **dict.fromkeys(missing, "0")}), missing


def suggest_which_broker_id(slave_read_enable: bool, behind: bool, sgc: dict[str, Any]) -> int:
    """The broker a pull's answer sends the consumer to next (4.9.8's PullMessageProcessor, whose
    last word is the slaveReadEnable branch): off, the master (0); on, the group's
    whichBrokerWhenConsumeSlowly when the pull read past accessMessageInMemoryMaxRatio of memory
    behind the CommitLog's end (``suggestPullingFromSlave``), else the group's brokerId. A slave
    with slaveReadEnable off still serves the pull: its PULL_RETRY_IMMEDIATELY in Java is
    overwritten by the code of the store's status."""
    if not slave_read_enable:
        return 0
    if behind:
        return int(sgc.get("whichBrokerWhenConsumeSlowly", 1))
    return int(sgc.get("brokerId", 0))


def _read(missing: frozenset[str], *names: str) -> None:
    """Java unboxing the header fields ``names``: SYSTEM_ERROR if one of them was not sent. Called
    as ``missing and _read(...)``: a pull with every field (all stock clients') pays no call."""
    for name in names:
        if name in missing:
            raise HeaderFieldError(f"PullMessageRequestHeader: required field {name!r} is missing")


class PullMessageProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store
        self.stats = broker.stats
        self.hold = PullRequestHoldService(self)
        # called only for puts to a queue with parked pulls (``held`` is never replaced, only changed)
        self.store.register_arrival_listener(self.hold.on_arrival, self.hold.held)

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return self.pull(channel, request, allow_suspend=True)

    def pull(
        self, channel: Channel, request: RemotingCommand, *, allow_suspend: bool
    ) -> RemotingCommand | None:
        ext = request.ext_fields
        if ext is None:
            raise HeaderFieldError("PullMessageRequestHeader: the request has no extFields")
        h, missing = decode_pull_header(ext)
        broker = self.broker
        config = broker.config
        group, topic, queue_id = h.consumer_group, h.topic, h.queue_id
        if not config.brokerPermission & PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{config.brokerIP1}] pulling message is forbidden", {}
            )
        missing and _read(missing, "consumerGroup")
        sgc = broker.subscription_groups.find(group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist, {FAQ}",
                {},
            )
        if not sgc.get("consumeEnable", True):
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}", {}
            )
        missing and _read(missing, "sysFlag")
        flags = h.sys_flag
        if flags & FLAG_SUSPEND:
            missing and _read(missing, "suspendTimeoutMillis")
        missing and _read(missing, "topic")
        tc = broker.topics.get(topic)
        if tc is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please! {FAQ}", {}
            )
        if not tc["perm"] & PERM_READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden", {}
            )
        missing and _read(missing, "queueId")
        if queue_id < 0 or queue_id >= tc["readQueueNums"]:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{tc['readQueueNums']}] consumer:[{channel.remote_addr}]",
                {},
            )
        filter_data: ConsumerFilterData | None = None
        if flags & FLAG_SUBSCRIPTION:
            try:
                sub = SubscriptionData.build(topic, h.subscription, h.expression_type, h.sub_version)
            except SubscriptionParseError:
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed", {}
                )
            if not is_tag_type(sub.expression_type):
                # an expression that does not compile leaves no filter data: Java then delivers all
                filter_data = build(topic, group, sub.sub_string, sub.expression_type, h.sub_version)
        else:
            cgi = broker.consumers.find(group)
            if cgi is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's group info not exist{FAQ}", {}
                )
            if not sgc.get("consumeBroadcastEnable", True) and cgi.message_model == "BROADCASTING":
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{group}] can not consume by broadcast way",
                    {},
                )
            found = cgi.subscriptions.get(topic)
            if found is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist{FAQ}", {}
                )
            missing and _read(missing, "subVersion")
            if found.sub_version < h.sub_version:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest", {}
                )
            sub = found
            if not is_tag_type(sub.expression_type):
                filter_data = broker.consumers.filters.get(topic, group)
                if filter_data is None:
                    return request.response(
                        ResponseCode.FILTER_DATA_NOT_EXIST,
                        "The broker's consumer filter data is not exist!Your expression may be wrong!",
                        {},
                    )
                if filter_data.client_version < h.sub_version:
                    return request.response(
                        ResponseCode.FILTER_DATA_NOT_LATEST,
                        "the consumer's consumer filter data not latest",
                        {},
                    )
        if not is_tag_type(sub.expression_type) and not config.enablePropertyFilter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {sub.expression_type}",
                {},
            )
        codes = None if sub.matches_all() else sub.code_set
        props_filter = None
        if filter_data is not None or config.filterSupportRetry:  # (a TAG pull has nothing to build)
            props_filter = message_filter(
                broker.consumers.filters, sub, filter_data, config.filterSupportRetry
            )
            if filter_data is not None and filter_data.tags_codes is not None:
                codes = filter_data.tags_codes  # an expression true only for some TAGS: skip the rest unread
        missing and _read(missing, "queueOffset", "maxMsgNums")
        offset = h.queue_offset
        res = self.store.get_messages(
            topic,
            queue_id,
            offset,
            h.max_msg_nums,
            max_bytes=h.max_msg_bytes,
            tags_filter=codes,
            properties_filter=props_filter,
        )
        code = status_code(res.status, offset)
        self.stats.record_pull(topic, group, len(res.buffers) if code == ResponseCode.SUCCESS else 0)
        suggest = suggest_which_broker_id(config.slaveReadEnable, res.suggest_pulling_from_slave, sgc)
        if code == ResponseCode.PULL_OFFSET_MOVED:
            if self.store.config.corrects_pull_offsets:
                self._offset_moved(group, topic, queue_id, offset, res.next_begin_offset)
            else:  # a slave does not correct offsets: the consumer retries (at the offset it asked)
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
                suggest = int(sgc.get("brokerId", 0))
        if (
            code == ResponseCode.PULL_NOT_FOUND
            and allow_suspend
            and flags & FLAG_SUSPEND
            and channel.attrs.get("held_pulls", 0) < MAX_HELD_PULLS_PER_CHANNEL
        ):
            timeout = h.suspend_timeout_millis if config.longPollingEnable else config.shortPollingTimeMills
            self.hold.suspend(
                channel, request, (topic, queue_id), offset, codes, timeout / 1000.0, props_filter
            )
            response = None
        else:
            response = request.response(
                code,
                res.status.value,
                {
                    "suggestWhichBrokerId": str(suggest),
                    "nextBeginOffset": str(res.next_begin_offset),
                    "minOffset": str(res.min_offset),
                    "maxOffset": str(res.max_offset),
                },
                b"".join(res.buffers) if code == ResponseCode.SUCCESS else None,
            )
        if allow_suspend and flags & FLAG_COMMIT_OFFSET and not self.broker.slave:
            missing and _read(missing, "commitOffset")
            self.store.meta.commit_offset(group, topic, queue_id, h.commit_offset)
        return response

    def _offset_moved(self, group: str, topic: str, queue_id: int, requested: int, moved_to: int) -> None:
        """``generateOffsetMovedEvent``: a master records each corrected pull offset as a message in
        OFFSET_MOVED_EVENT (queue 0, TAGS and KEYS the consumer group, born and stored by the broker)."""
        config = self.broker.config
        try:
            host = ipaddress.ip_address(config.brokerIP1)
        except ValueError:
            host = ipaddress.ip_address("127.0.0.1")
        event = OffsetMovedEvent(group, MessageQueue(topic, config.brokerName, queue_id), requested, moved_to)
        msg = MessageExt(
            OFFSET_MOVED_EVENT,
            event.to_json(),
            sys_flag=MessageSysFlag.BORNHOST_V6 if host.version == 6 else 0,
            born_timestamp=int(time.time() * 1000),
            born_host=host.packed,
            born_port=config.listenPort,
            # in the order Java's HashMap writes them (messageProperties2String)
            properties={PROPERTY_KEYS: group, PROPERTY_DELAY_TIME_LEVEL: "0", PROPERTY_TAGS: group},
        )
        result = self.store.put_message(msg)
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning(
                "offset-moved event of %s on %s/%d not stored: %s", group, topic, queue_id, result.status
            )

    def stop(self) -> None:
        self.hold.unbind()
        self.hold.wake_all()
