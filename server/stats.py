"""Broker statistics mqadmin and the dashboards read: StoreStatsService's TPS over 10 s / 60 s /
600 s, BrokerStats' daily put and get totals, BrokerStatsManager's per-group get TPS (consumeTps).

Puts are read off the store (``put_totals``); the pull processor bumps the get counters once per
request. ``sample`` runs once a second."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import NamedTuple

SAMPLES = 600  # one a second: ten minutes, the longest TPS window
GROUP_SAMPLE_EVERY = 10  # seconds; a group's TPS is over the last minute (StatsItem's minute list)
GROUP_SAMPLES = 7


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
    def __init__(self, put_totals: Callable[[], tuple[int, int]], boot_ms: int | None = None) -> None:
        self.put_totals = put_totals
        self.boot_ms = int(time.time() * 1000) if boot_ms is None else boot_ms
        self.get_found = 0  # GET requests that found messages
        self.get_miss = 0
        self.get_transferred = 0  # messages answered to pulls
        self.group_get: dict[tuple[str, str], int] = {}  # (topic, group) -> messages pulled
        self._samples: deque[Snapshot] = deque(maxlen=SAMPLES + 1)
        self._group_samples: dict[tuple[str, str], deque[tuple[int, int]]] = {}
        self._ticks = 0
        self._day = date.today()
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0

    def record_pull(self, topic: str, group: str, found: int) -> None:
        """One GET answered with ``found`` messages (0: nothing there for it)."""
        if found:
            self.get_found += 1
            self.get_transferred += found
            key = (topic, group)
            self.group_get[key] = self.group_get.get(key, 0) + found
        else:
            self.get_miss += 1

    def sample(self, now_ms: int | None = None, today: date | None = None) -> None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        put = self.put_totals()[0]
        self._samples.append(Snapshot(now_ms, put, self.get_found, self.get_miss, self.get_transferred))
        today = date.today() if today is None else today
        if today != self._day:  # BrokerStats.record at midnight
            self._day = today
            self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, put
            self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, self.get_transferred
        if self._ticks % GROUP_SAMPLE_EVERY == 0:
            for key, total in self.group_get.items():
                samples = self._group_samples.get(key)
                if samples is None:
                    samples = self._group_samples[key] = deque(maxlen=GROUP_SAMPLES)
                samples.append((now_ms, total))
        self._ticks += 1

    def _window(self, field: int, seconds: int) -> float | None:
        s = self._samples
        if len(s) <= seconds:
            return None
        begin, end = s[-(seconds + 1)], s[-1]
        return tps(begin.ms, begin[field], end.ms, end[field])

    def _windows(self, *fields: int) -> str:
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
        samples = self._group_samples.get((topic, group))
        if not samples or len(samples) < 2:
            return 0.0
        (begin_ms, begin), (end_ms, end) = samples[0], samples[-1]
        return tps(begin_ms, begin, end_ms, end)

    def runtime_info(self) -> dict[str, str]:
        put, size = self.put_totals()
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
            "putTps": self._windows(Snapshot._fields.index("put")),
            "getFoundTps": self._windows(Snapshot._fields.index("found")),
            "getMissTps": self._windows(Snapshot._fields.index("miss")),
            "getTotalTps": self._windows(Snapshot._fields.index("found"), Snapshot._fields.index("miss")),
            "getTransferedTps": self._windows(Snapshot._fields.index("transferred")),
        }
