"""The store interface's value parsing: messageDelayLevel as ScheduleMessageService reads it."""

from __future__ import annotations

import pytest

from rmqgate.store.api import DEFAULT_DELAY_LEVELS, parse_delay_levels


def test_delay_levels_as_java_parses_them() -> None:
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS)[18] == 7_200_000
    assert parse_delay_levels("1s 2m 3h 1d") == {1: 1000, 2: 120_000, 3: 10_800_000, 4: 86_400_000}
    assert parse_delay_levels("+1s 2s ") == {
        1: 1000,
        2: 2000,
    }  # Long.parseLong's sign; trailing parts dropped
    assert parse_delay_levels("-1s") == {1: -1000}  # Java takes it: delivered at once


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("1s 2x", r"level 2 '2x' has no unit"),
        ("1s  2s", r"level 2 '' has no unit"),  # split on single spaces, as String.split(" ")
        (" 1s", r"level 1 '' has no unit"),
        ("1.5s", r"level 1 '1.5s' is not a valid Long"),
        ("99999999999999999999s", r"is out of range of a Java Long"),
        ("", r"no delay levels"),  # Java stops on this one too ("".split(" ") is [""])
        ("   ", r"no delay levels"),  # Java runs with no levels and files delayed messages under queue -1
    ],
)
def test_delay_levels_java_refuses_are_refused_with_the_part_named(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_delay_levels(spec)
