"""Queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, ``RebalanceLockManager``).

A queue of a group is held by one client id at a time; the holder re-locking renews it; a lock not
renewed for lockMaxLiveTime (broker.conf key ``rocketmq.broker.rebalance.lockMaxLiveTime``, a system
property on the Java broker, default 60000 ms) may be taken by another client. As on the Java broker,
a lock outlives the connection it was taken on: a Java client reconnects after any timed-out call and
goes on consuming the queues it locked, so handing them to another consumer then would break order.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from rmqgate.server.jsonbody import dumpb
from rmqgate.server.remoting import Channel, RequestProcessor
from rmqgate.wire.bodies import LockBatchRequestBody, UnlockBatchRequestBody
from rmqgate.wire.codes import RequestCode, ResponseCode
from rmqgate.wire.command import RemotingCommand

if TYPE_CHECKING:
    from rmqgate.server.broker import BrokerController
    from rmqgate.server.config import BrokerConfig

LOCK_MAX_LIVE_TIME_KEY = "rocketmq.broker.rebalance.lockMaxLiveTime"
DEFAULT_LOCK_MAX_LIVE_TIME_MS = 60_000

MessageQueueKey = tuple[str, str, int]  # (topic, brokerName, queueId)


def lock_max_live_time(config: BrokerConfig) -> float:
    """Seconds, from broker.conf (unknown keys land in ``config.extra``)."""
    raw = config.extra.get(LOCK_MAX_LIVE_TIME_KEY)
    try:
        return int(raw) / 1000.0 if raw is not None else DEFAULT_LOCK_MAX_LIVE_TIME_MS / 1000.0
    except ValueError:
        raise ValueError(f"{LOCK_MAX_LIVE_TIME_KEY}: not a number of milliseconds: {raw!r}") from None


class RebalanceLockManager:
    """group -> {queue: [clientId, last lock or renewal]}; an entry older than ``max_live`` is free."""

    def __init__(self, max_live: float) -> None:
        self.max_live = max_live
        self.table: dict[str, dict[MessageQueueKey, list[Any]]] = {}

    def try_lock_batch(self, group: str, mqs: list[MessageQueueKey], client_id: str) -> list[MessageQueueKey]:
        """The queues now locked for ``client_id``: free, expired or already its own (renewed)."""
        now = time.monotonic()
        locks = self.table.setdefault(group, {})
        ok = []
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None or entry[0] == client_id or now - entry[1] > self.max_live:
                locks[mq] = [client_id, now]
                ok.append(mq)
        return ok

    def unlock_batch(self, group: str, mqs: list[MessageQueueKey], client_id: str) -> None:
        """Frees the queues ``client_id`` holds; another client's are left as they are."""
        locks = self.table.get(group, {})
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry[0] == client_id:
                del locks[mq]

    def locked_by(self, group: str, mq: MessageQueueKey) -> str | None:
        """The live holder of ``mq`` (None when free or expired)."""
        entry = self.table.get(group, {}).get(mq)
        if entry is None or time.monotonic() - entry[1] > self.max_live:
            return None
        return entry[0]


def _mq_json(mq: MessageQueueKey) -> dict[str, Any]:
    return {"brokerName": mq[1], "queueId": mq[2], "topic": mq[0]}


class LockProcessor(RequestProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ)

    def __init__(self, broker: BrokerController) -> None:
        self.locks = broker.locks

    def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        unlock = request.code == RequestCode.UNLOCK_BATCH_MQ
        kind = UnlockBatchRequestBody if unlock else LockBatchRequestBody
        body = kind.from_json(request.body)
        if body.consumer_group is None:  # Java fails on the null group
            return request.response(ResponseCode.SYSTEM_ERROR, f"{kind.__name__}: consumerGroup is missing")
        client_id = body.client_id or ""
        # a Set<MessageQueue> in Java: a queue listed twice is one queue
        mqs = list(dict.fromkeys((mq.topic or "", mq.broker_name or "", mq.queue_id) for mq in body.mq_set))
        if unlock:
            self.locks.unlock_batch(body.consumer_group, mqs, client_id)
            return request.response(ResponseCode.SUCCESS)
        locked = self.locks.try_lock_batch(body.consumer_group, mqs, client_id)
        return request.response(
            ResponseCode.SUCCESS, body=dumpb({"lockOKMQSet": [_mq_json(mq) for mq in locked]})
        )
