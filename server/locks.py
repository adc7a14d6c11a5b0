"""Queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, ``RebalanceLockManager``).

A queue of a group is held by one client id at a time; the holder re-locking renews it; a lock not
renewed for lockMaxLiveTime (broker.conf key ``rocketmq.broker.rebalance.lockMaxLiveTime``, a system
property on the Java broker, default 60000 ms) may be taken by another client. Unlike the Java broker,
a client's locks are also dropped when the connection it locked them on closes, so the next consumer
can take the queues at its next rebalance instead of 60 s later.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

from rmqgate.server.consumer import LockProcessor as _BaseLockProcessor
from rmqgate.server.consumer import RebalanceLockManager as _BaseLockManager
from rmqgate.server.remoting import Channel
from rmqgate.wire.codes import RequestCode

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


class RebalanceLockManager(_BaseLockManager):
    """The base table plus the client ids whose connections hold locks."""

    def __init__(self, max_live: float) -> None:
        super().__init__(max_live)

    def locked_by(self, group: str, mq: MessageQueueKey) -> str | None:
        """The live holder of ``mq`` (None when free or expired)."""
        entry = self.table.get(group, {}).get(mq)
        if entry is None or time.monotonic() - entry[1] > self.max_live:
            return None
        return entry[0]

    def unlock_client(self, client_id: str) -> int:
        """Drop every lock ``client_id`` holds (its connection closed); returns how many."""
        n = 0
        for group, locks in list(self.table.items()):
            for mq, entry in list(locks.items()):
                if entry[0] == client_id:
                    del locks[mq]
                    n += 1
            if not locks:
                del self.table[group]
        return n


class LockProcessor(_BaseLockProcessor):
    codes: ClassVar[tuple[int, ...]] = (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ)

    def __init__(self, broker: BrokerController) -> None:
        super().__init__(broker)
        self.broker = broker

    def lock_requested(self, channel: Channel, client_id: str) -> None:
        holders: set[str] | None = channel.attrs.get("lock_client_ids")
        if holders is None:
            holders = channel.attrs["lock_client_ids"] = set()
            channel.add_close_listener(self._channel_closed)
        holders.add(client_id)

    def _channel_closed(self, channel: Channel) -> None:
        if not isinstance(self.locks, RebalanceLockManager):
            return
        for client_id in channel.attrs.get("lock_client_ids", ()):
            others = any(
                c is not channel and not c.closed and client_id in c.attrs.get("lock_client_ids", ())
                for c in self.broker.server.channels
            )
            if not others:
                self.locks.unlock_client(client_id)
