"""ScheduleMessageService: delivers delayed messages when their level's delay is up.

The store redirects a message with DELAY > 0 to SCHEDULE_TOPIC_XXXX queue level-1 and writes its
deliver time (store time + the level's delay) as the ConsumeQueue tagsCode. One task per level reads
that queue in order from its delay offset, re-puts each due message to REAL_TOPIC/REAL_QID (DELAY
kept in its properties, not scheduled again), and records the new offset in the store's LMDB
(``delay_offsets``) after each batch, so a restart resumes where delivery stopped (at-least-once: a
crash between the put and the offset write can deliver one batch again). Levels come from
messageDelayLevel (broker.conf).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from rmqgate.server.remoting import cancel_and_wait
from rmqgate.store.api import SCHEDULE_TOPIC, DispatchRequest, PutMessageStatus, parse_delay_levels
from rmqgate.wire.message import MessageExt
from rmqgate.wire.message_const import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController

log = logging.getLogger("rmqgate.server.schedule")

BATCH = 32
IDLE_WAIT = 1.0  # s; a put to the level's queue wakes it earlier
RETRY_WAIT = 1.0  # s after a failed put
_PUT_DONE = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)
_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


def timeup_message(msg: MessageExt) -> MessageExt:
    """``messageTimeup``: the delayed message restored to its real topic/queue with its properties as
    stored, DELAY and WAIT included (a 4.9.8 broker's consumers see ``DELAY=<level>`` on a delivered
    delayed or retried message, and a send-back's WAIT=false); it is put with ``schedule_delay=False``."""
    props = msg.properties
    return msg.detached(
        topic=props.get(PROPERTY_REAL_TOPIC, ""), queue_id=int(props.get(PROPERTY_REAL_QUEUE_ID, "0") or 0)
    )


class ScheduleMessageService:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store
        self.levels = parse_delay_levels(broker.config.messageDelayLevel)
        self.offsets = self.store.meta.delay_offsets()
        self.delivered = 0
        self._events: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # queue id = delay level - 1: only puts to SCHEDULE_TOPIC_XXXX wake a level's delivery
        self.store.register_arrival_listener(
            self._on_arrival, frozenset((SCHEDULE_TOPIC, level - 1) for level in self.levels)
        )

    def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        for level in self.levels:
            self._events[level] = asyncio.Event()
            self._tasks.append(loop.create_task(self._run(level)))

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        self._loop = None

    def _on_arrival(self, d: DispatchRequest) -> None:
        if d.topic != SCHEDULE_TOPIC or self._loop is None:
            return
        event = self._events.get(d.queue_id + 1)
        if event is not None:
            self._loop.call_soon_threadsafe(event.set)

    def offset(self, level: int) -> int:
        return self.offsets.get(level, 0)

    async def _run(self, level: int) -> None:
        event = self._events[level]
        while True:
            try:
                wait = self.deliver(level)
            except Exception:
                log.exception("delay level %d: delivery failed", level)
                wait = RETRY_WAIT
            if wait > 0:
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), wait)
            else:
                await asyncio.sleep(0)  # a backlog: let the rest of the broker run between batches

    def deliver(self, level: int) -> float:
        """Deliver what is due in ``level``; returns seconds until it should run again (0 = now)."""
        store = self.store
        queue_id = level - 1
        offset = max(self.offset(level), store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id))
        units = store.get_consume_queue_units(SCHEDULE_TOPIC, queue_id, offset, BATCH)
        if not units:
            end = store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            if offset < end:
                return 0.1  # the next ConsumeQueue file is being created
            if offset > end:  # an unclean stop cut the queue back (or the store was reset): its end
                log.error("delay level %d: offset %d is past its queue's end %d; reset", level, offset, end)
                self.offsets[level] = end
                store.meta.set_delay_offset(level, end)
                return 0
            return IDLE_WAIT
        now = int(time.time() * 1000)
        delay = self.levels[level]
        start = offset
        wait = 0.0
        for phys, _size, deliver_at in units:
            if deliver_at > now + delay:  # ``correctDeliverTimestamp``: a clock that went back
                deliver_at = now
            if deliver_at > now:
                wait = (deliver_at - now) / 1000.0
                break
            msg = store.look_message_by_offset(phys)
            if msg is not None and not self._put(msg):
                wait = RETRY_WAIT
                break
            offset += 1
        if offset != start:
            self.offsets[level] = offset
            store.meta.set_delay_offset(level, offset)
        return wait

    def _put(self, msg: MessageExt) -> bool:
        real = timeup_message(msg)
        if real.topic == _HALF_TOPIC or not real.topic:
            log.error(
                "delayed message %s has no deliverable topic (%r): dropped", msg.offset_msg_id, real.topic
            )
            return True
        result = self.store.put_message(real, schedule_delay=False)
        if result.status in _PUT_DONE:
            self.delivered += 1
            return True
        log.error("delayed message %s to %s not stored: %s", msg.offset_msg_id, real.topic, result.status)
        return False
