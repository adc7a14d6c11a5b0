"""Broker statistics mqadmin and the dashboards read: StoreStatsService's TPS over 10 s / 60 s /
600 s, BrokerStats' daily put and get totals, and BrokerStatsManager's stats items (puts per topic,
gets per topic@group, per broker) over the last minute, hour and day, which consumeTps and
VIEW_BROKER_STATS_DATA report.

Puts are read off the store (``put_totals``, ``topic_put_totals``: nothing is counted on the put
path); the pull processor bumps the get counters once per request. ``sample`` runs once a second."""

from __future__ import annotations

import time
from collections import deque
from datetime import date
from decimal import Decimal
from typing import NamedTuple, Protocol

SAMPLES = 600  # one a second: ten minutes, the longest TPS window
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
# StatsItem's snapshot lists: (seconds between snapshots, how many are kept)
_MINUTE, _HOUR, _DAY = (10, 7), (600, 7), (3600, 25)


class PutSource(Protocol):
    def put_totals(self) -> tuple[int, int]: ...
    def topic_put_totals(self) -> dict[str, int]: ...


class StatsItem:
    """(ms, value, times) snapshots every 10 s / 10 min / 1 h, as StatsItem's csList* keep them."""

    __slots__ = ("day", "hour", "minute")

    def __init__(self, first: tuple[int, int, int]) -> None:
        self.minute = deque([first], maxlen=_MINUTE[1])
        self.hour = deque([first], maxlen=_HOUR[1])
        self.day = deque([first], maxlen=_DAY[1])

    @staticmethod
    def summary(snapshots: deque[tuple[int, int, int]]) -> dict[str, float | int]:
        """StatsItem.computeStatsData: sum, TPS and value per call between the oldest and the newest."""
        (t0, v0, n0), (t1, v1, n1) = snapshots[0], snapshots[-1]
        total = v1 - v0
        return {
            "avgpt": total / (n1 - n0) if n1 > n0 else 0.0,
            "sum": total,
            "tps": total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0,
        }

    def data(self) -> dict[str, dict[str, float | int]]:
        """A BrokerStatsData body."""
        return {
            "statsDay": self.summary(self.day),
            "statsHour": self.summary(self.hour),
            "statsMinute": self.summary(self.minute),
        }


class Snapshot(NamedTuple):
    ms: int
    put: int
    found: int
    miss: int
    transferred: int


def tps(begin_ms: int, begin: int, end_ms: int, end: int) -> float:
    """CallSnapshot.getTPS: calls per second between two samples."""
    return (end - begin) / (end_ms - begin_ms) * 1000 if end_ms > begin_ms else 0.0


def java_double(value: float) -> str:
    """``Double.toString``: the shortest digits that round-trip, with an exponent from 10^7 up."""
    value = float(value)
    if abs(value) < 1e7 or value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    sign, digits, exp = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exp, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + exp}"


class BrokerStats:
    def __init__(self, store: PutSource, cluster: str, boot_ms: int | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.boot_ms = int(time.time() * 1000) if boot_ms is None else boot_ms
        self.get_found = 0  # GET requests that found messages
        self.get_miss = 0
        self.get_transferred = 0  # messages answered to pulls
        self.group_get: dict[tuple[str, str], list[int]] = {}  # (topic, group) -> [messages, pulls]
        self.batch_extra: dict[str, int] = {}  # topic -> messages beyond the first of each batch put
        self.items: dict[tuple[str, str], StatsItem] = {}  # (statsName, statsKey) -> snapshots
        self._samples: deque[Snapshot] = deque(maxlen=SAMPLES + 1)
        self._ticks = 0
        self._last_item_ms = self.boot_ms
        self._day = date.today()
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0

    def record_pull(self, topic: str, group: str, found: int) -> None:
        """One GET answered with ``found`` messages (0: nothing there for it)."""
        if found:
            self.get_found += 1
            self.get_transferred += found
            counts = self.group_get.get((topic, group))
            if counts is None:
                counts = self.group_get[(topic, group)] = [0, 0]
            counts[0] += found
            counts[1] += 1
        else:
            self.get_miss += 1

    def record_batch_put(self, topic: str, messages: int) -> None:
        """A batch SEND put ``messages`` messages in one call (TOPIC_PUT_NUMS counts calls as times,
        so its avgpt is messages per put); single puts need no record, the store counts them."""
        self.batch_extra[topic] = self.batch_extra.get(topic, 0) + messages - 1

    def sample(self, now_ms: int | None = None, today: date | None = None) -> None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        put = self.store.put_totals()[0]
        self._samples.append(Snapshot(now_ms, put, self.get_found, self.get_miss, self.get_transferred))
        today = date.today() if today is None else today
        if today != self._day:  # BrokerStats.record at midnight
            self._day = today
            self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, put
            self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, self.get_transferred
        if self._ticks % _MINUTE[0] == 0:
            self._sample_items(now_ms, put)
        self._ticks += 1

    def _values(self, put: int) -> dict[tuple[str, str], tuple[int, int]]:
        """Each stats item's (value, times) now. Java adds no times to the BROKER_* items, whose
        avgpt is then 0."""
        extra = self.batch_extra
        values: dict[tuple[str, str], tuple[int, int]] = {
            (TOPIC_PUT_NUMS, topic): (n, n - extra.get(topic, 0))
            for topic, n in self.store.topic_put_totals().items()
        }
        for (topic, group), (n, pulls) in self.group_get.items():
            values[(GROUP_GET_NUMS, f"{topic}@{group}")] = (n, pulls)
        if put:
            values[(BROKER_PUT_NUMS, self.cluster)] = (put, 0)
        if self.get_transferred:
            values[(BROKER_GET_NUMS, self.cluster)] = (self.get_transferred, 0)
        return values

    def _sample_items(self, now_ms: int, put: int) -> None:
        values = self._values(put)
        items = self.items
        for key in [k for k in items if k not in values]:  # a deleted topic
            del items[key]
        elapsed = self._ticks  # seconds since the first sample
        for key, (value, times) in values.items():
            snap = (now_ms, value, times)
            item = items.get(key)
            if item is None:  # nothing at the previous snapshot: it all came since
                item = items[key] = StatsItem((self._last_item_ms, 0, 0))
                item.hour.append(snap)
                item.day.append(snap)
            else:
                if elapsed % _HOUR[0] == 0:
                    item.hour.append(snap)
                if elapsed % _DAY[0] == 0:
                    item.day.append(snap)
            item.minute.append(snap)
        self._last_item_ms = now_ms

    def stats_data(self, name: str, key: str) -> dict[str, dict[str, float | int]] | None:
        """A stats item's BrokerStatsData; zeros for one counted since the last sample (Java creates
        the item at its first count); None for one never counted."""
        item = self.items.get((name, key))
        if item is None:
            if (name, key) not in self._values(self.store.put_totals()[0]):
                return None
            item = StatsItem((0, 0, 0))
        return item.data()

    def _window(self, field: str, seconds: int) -> float | None:
        s = self._samples
        if len(s) <= seconds:
            return None
        begin, end = s[-(seconds + 1)], s[-1]
        return tps(begin.ms, getattr(begin, field), end.ms, getattr(end, field))

    def _windows(self, *fields: str) -> str:
        """Three TPS figures (10 s, 60 s, 600 s) as StoreStatsService joins them; a window the samples
        do not cover yet is empty."""
        out = []
        for seconds in (10, 60, 600):
            values = [self._window(f, seconds) for f in fields]
            if values[0] is None and len(fields) == 1:
                out.append("")
            else:  # (getTotalTps: found + miss, 0 for a window not covered yet)
                out.append(java_double(sum(v or 0.0 for v in values)))
        return " ".join(out)

    def group_get_tps(self, topic: str, group: str) -> float:
        """BrokerStatsManager.tpsGroupGetNums: messages a second over the last minute."""
        item = self.items.get((GROUP_GET_NUMS, f"{topic}@{group}"))
        return 0.0 if item is None else float(StatsItem.summary(item.minute)["tps"])

    def runtime_info(self) -> dict[str, str]:
        put, size = self.store.put_totals()
        times = put or 1  # (as Java: the average is over at least one)
        return {
            "msgPutTotalTodayNow": str(put),
            "msgPutTotalTodayMorning": str(self.put_today_morning),
            "msgPutTotalYesterdayMorning": str(self.put_yesterday_morning),
            "msgGetTotalTodayNow": str(self.get_transferred),
            "msgGetTotalTodayMorning": str(self.get_today_morning),
            "msgGetTotalYesterdayMorning": str(self.get_yesterday_morning),
            "putMessageTimesTotal": str(times),
            "putMessageSizeTotal": str(size),
            "putMessageAverageSize": java_double(size / times),
            "putTps": self._windows("put"),
            "getFoundTps": self._windows("found"),
            "getMissTps": self._windows("miss"),
            "getTotalTps": self._windows("found", "miss"),
            "getTransferedTps": self._windows("transferred"),
        }
