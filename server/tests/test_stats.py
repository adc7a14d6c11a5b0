"""BrokerStats: TPS windows over one-second samples, daily totals, per-group get TPS."""

from __future__ import annotations

from datetime import date

from rmqgate.server.stats import BrokerStats, java_double


class Puts:
    """What the stats read off the store, settable: ``n`` messages of 1000 bytes, all to topic T."""

    def __init__(self) -> None:
        self.n = 0

    def put_totals(self) -> tuple[int, int]:
        return self.n, self.n * 1000

    def topic_put_totals(self) -> dict[str, int]:
        return {"T": self.n} if self.n else {}


def run(stats: BrokerStats, puts: Puts, seconds: int, per_second: int, start: int = 0) -> int:
    day = date(2026, 11, 24)
    for i in range(seconds):
        stats.sample(now_ms=(start + i) * 1000, today=day)
        puts.n += per_second
    return start + seconds


def test_tps_windows_fill_as_samples_arrive() -> None:
    puts = Puts()
    stats = BrokerStats(puts, "C", boot_ms=0)
    run(stats, puts, 5, 100)
    info = stats.runtime_info()
    assert info["putTps"] == "  "  # no window covered yet: StoreStatsService leaves each empty
    assert info["getTotalTps"] == "0.0 0.0 0.0"  # found + miss, 0 where not covered (as Java)
    t = run(stats, puts, 6, 100, start=5)
    assert stats.runtime_info()["putTps"] == "100.0  "
    t = run(stats, puts, 60, 300, start=t)
    put_10s, put_60s, put_600s = stats.runtime_info()["putTps"].split(" ")
    assert (put_10s, put_600s) == ("300.0", "")
    assert 295.0 < float(put_60s) < 300.0  # one of its 60 seconds still ran at 100/s
    assert stats.runtime_info()["msgPutTotalTodayNow"] == str(puts.n)
    assert stats.runtime_info()["putMessageAverageSize"] == "1000.0"


def test_get_counters_and_group_tps() -> None:
    puts = Puts()
    stats = BrokerStats(puts, "C", boot_ms=0)
    day = date(2026, 11, 24)
    for second in range(21):
        stats.sample(now_ms=second * 1000, today=day)
        stats.record_pull("T", "g", 32)  # one pull a second finds 32 messages
        stats.record_pull("T", "g", 0)  # and one finds nothing
    info = stats.runtime_info()
    assert info["msgGetTotalTodayNow"] == str(21 * 32)
    assert info["getTransferedTps"].split(" ")[0] == "32.0"
    assert info["getFoundTps"].split(" ")[0] == "1.0"
    assert info["getMissTps"].split(" ")[0] == "1.0"
    assert info["getTotalTps"].split(" ")[0] == "2.0"
    # sampled every 10 s (seconds 0, 10, 20): 32 a second
    assert stats.group_get_tps("T", "g") == 32.0
    assert stats.group_get_tps("T", "other") == 0.0


def test_stats_items_over_minute_hour_and_day() -> None:
    """VIEW_BROKER_STATS_DATA's items: snapshots every 10 s (minute: the last 7), 10 min, 1 h."""
    puts = Puts()
    stats = BrokerStats(puts, "C", boot_ms=0)
    assert stats.stats_data("TOPIC_PUT_NUMS", "T") is None  # nothing put since the start yet
    t = run(stats, puts, 1, 0)
    t = run(stats, puts, 20 * 60, 5, start=t)  # 20 minutes at 5 messages a second
    stats.record_pull("T", "g", 4)
    run(stats, puts, 10, 5, start=t)
    data = stats.stats_data("TOPIC_PUT_NUMS", "T")
    assert data is not None and set(data) == {"statsDay", "statsHour", "statsMinute"}
    assert data["statsMinute"] == {"avgpt": 1.0, "sum": 300, "tps": 5.0}
    # (since the topic's first snapshot: its first 10 s held only 9 seconds of puts)
    assert (
        4.9 < data["statsHour"]["tps"] <= 5.0 and 5900 < data["statsHour"]["sum"] < puts.n
    )  # (to minute 20)
    assert stats.stats_data("BROKER_PUT_NUMS", "C")["statsMinute"]["tps"] == 5.0  # type: ignore[index]
    got = stats.stats_data("GROUP_GET_NUMS", "T@g")
    assert got is not None and got["statsMinute"]["sum"] == 4 and got["statsMinute"]["avgpt"] == 4.0
    assert stats.stats_data("GROUP_GET_NUMS", "T@nobody") is None
    puts.n = 0  # the topic was deleted: its item goes at the next snapshot
    run(stats, puts, 10, 0, start=t + 10)
    assert stats.stats_data("TOPIC_PUT_NUMS", "T") is None


def test_stats_items_exist_from_their_first_count_and_avgpt_is_per_call() -> None:
    """As BrokerStatsManager: an item answers (zeros) from its first count, not only from the next
    10 s snapshot; TOPIC_PUT_NUMS counts a batch as one call, so avgpt is messages per put; the
    BROKER_* items count no calls, so their avgpt is 0."""
    puts = Puts()
    stats = BrokerStats(puts, "C", boot_ms=0)
    stats.sample(now_ms=0, today=date(2026, 11, 24))
    puts.n = 4  # four single puts since the last snapshot
    zeros = {"avgpt": 0.0, "sum": 0, "tps": 0.0}
    assert stats.stats_data("TOPIC_PUT_NUMS", "T") == dict.fromkeys(
        ("statsDay", "statsHour", "statsMinute"), zeros
    )
    assert stats.stats_data("TOPIC_PUT_NUMS", "U") is None
    run(stats, puts, 10, 0, start=1)
    puts.n += 8
    stats.record_batch_put("T", 8)  # and one batch of eight
    run(stats, puts, 10, 0, start=11)
    minute = stats.stats_data("TOPIC_PUT_NUMS", "T")["statsMinute"]  # type: ignore[index]
    assert (minute["sum"], minute["avgpt"]) == (12, 12 / 5)
    assert stats.stats_data("BROKER_PUT_NUMS", "C")["statsMinute"]["avgpt"] == 0.0  # type: ignore[index]


def test_daily_totals_roll_at_midnight() -> None:
    puts = Puts()
    stats = BrokerStats(puts, "C", boot_ms=0)
    stats.sample(now_ms=0, today=date(2026, 11, 24))
    puts.n = 40
    stats.record_pull("T", "g", 7)
    stats.sample(now_ms=1000, today=date(2026, 11, 25))
    puts.n = 50
    stats.sample(now_ms=2000, today=date(2026, 11, 26))
    info = stats.runtime_info()
    assert (info["msgPutTotalYesterdayMorning"], info["msgPutTotalTodayMorning"]) == ("40", "50")
    assert (info["msgGetTotalYesterdayMorning"], info["msgGetTotalTodayMorning"]) == ("7", "7")


def test_java_double() -> None:
    assert java_double(0.0) == "0.0"
    assert java_double(1234.5) == "1234.5"
    assert java_double(12345678.0) == "1.2345678E7"
    assert java_double(-2.5e20) == "-2.5E20"
    assert java_double(1e7) == "1.0E7"
