"""Tick maths: cron and every, time zones and DST, catch-up; pure functions of time."""

from __future__ import annotations

from datetime import datetime

import pytest

from queuey_core.schedules.ticks import CatchUp
from queuey_core.schedules.ticks import Cron
from queuey_core.schedules.ticks import Every
from queuey_core.schedules.ticks import due
from queuey_core.schedules.ticks import firing_id

SECOND = 1000
MINUTE = 60 * SECOND
GRACE = 10 * SECOND


def ms(iso: str) -> int:
    """Milliseconds since the epoch of an ISO time with its offset."""
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def iso(ms_: int) -> str:
    return datetime.fromtimestamp(ms_ / 1000).astimezone().isoformat()


def ticks(trigger: Cron | Every, after: str, count: int) -> list[int]:
    found, t = [], ms(after)
    for _ in range(count):
        t = trigger.next_after(t)
        found.append(t)
    return found


def test_every_is_aligned_to_the_epoch_so_every_scheduler_agrees() -> None:
    every = Every(90)
    assert every.next_after(ms("2026-01-01T00:00:00+00:00")) == ms("2026-01-01T00:01:30+00:00")
    assert every.next_after(ms("2026-01-01T00:01:30+00:00")) == ms("2026-01-01T00:03:00+00:00"), (
        "a tick is strictly after the instant given"
    )
    assert every.latest_at_or_before(ms("2026-01-01T00:01:30+00:00")) == ms(
        "2026-01-01T00:01:30+00:00"
    )
    assert Every(3600).next_after(ms("2026-01-01T10:20:00+00:00")) == ms(
        "2026-01-01T11:00:00+00:00"
    ), "every hour fires on the hour"


def test_every_refuses_intervals_under_a_second() -> None:
    with pytest.raises(ValueError, match="at least 1s"):
        Every(0.5)


def test_cron_every_five_minutes() -> None:
    cron = Cron("*/5 * * * *")
    assert ticks(cron, "2026-01-01T00:03:00+00:00", 3) == [
        ms("2026-01-01T00:05:00+00:00"),
        ms("2026-01-01T00:10:00+00:00"),
        ms("2026-01-01T00:15:00+00:00"),
    ]
    assert cron.latest_at_or_before(ms("2026-01-01T00:10:00+00:00")) == ms(
        "2026-01-01T00:10:00+00:00"
    )
    assert cron.latest_at_or_before(ms("2026-01-01T00:09:59.999+00:00")) == ms(
        "2026-01-01T00:05:00+00:00"
    )


def test_cron_follows_its_time_zone_across_the_year() -> None:
    cron = Cron("0 9 * * *", "Europe/Paris")
    assert cron.next_after(ms("2026-01-15T00:00:00+00:00")) == ms("2026-01-15T08:00:00+00:00")
    assert cron.next_after(ms("2026-07-15T00:00:00+00:00")) == ms("2026-07-15T07:00:00+00:00")
    ny = Cron("0 9 * * 1", "America/New_York")  # Mondays
    assert ny.next_after(ms("2026-01-14T00:00:00+00:00")) == ms("2026-01-19T14:00:00+00:00")


def test_a_time_skipped_by_spring_forward_fires_just_after_the_gap() -> None:
    # Europe/Paris, 2026-03-29: 02:00 local jumps to 03:00; 02:30 does not exist that day.
    cron = Cron("30 2 * * *", "Europe/Paris")
    assert ticks(cron, "2026-03-28T12:00:00+01:00", 3) == [
        ms("2026-03-29T03:00:00+02:00"),
        ms("2026-03-30T02:30:00+02:00"),
        ms("2026-03-31T02:30:00+02:00"),
    ]


def test_an_hour_repeated_by_fall_back_fires_at_each_of_its_instants() -> None:
    # Europe/Paris, 2026-10-25: 03:00 local falls back to 02:00; 02:30 happens twice.
    cron = Cron("30 2 * * *", "Europe/Paris")
    first, second, third = ticks(cron, "2026-10-24T12:00:00+02:00", 3)
    assert first == ms("2026-10-25T02:30:00+02:00")
    assert second == ms("2026-10-25T02:30:00+01:00")
    assert second - first == 60 * MINUTE
    assert third == ms("2026-10-26T02:30:00+01:00")
    assert firing_id("nightly", first) != firing_id("nightly", second), (
        "two instants, two firings, two job ids"
    )
    assert cron.latest_at_or_before(second) == second
    assert cron.latest_at_or_before(second - 1) == first


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("*/5 * * *", "UTC", "five fields"),
        ("0 */5 * * * *", "UTC", "five fields"),
        ("61 * * * *", "UTC", "not a valid cron"),
        ("*/5 * * * *", "Mars/Olympus", "unknown time zone"),
    ],
)
def test_a_bad_cron_or_zone_is_refused(expression: str, zone: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Cron(expression, zone)


def test_firing_ids_depend_on_the_schedule_and_the_tick_only() -> None:
    tick = ms("2026-01-01T00:05:00+00:00")
    assert firing_id("reports", tick) == firing_id("reports", tick)
    assert firing_id("reports", tick) != firing_id("reports", tick + 5 * MINUTE)
    assert firing_id("reports", tick) != firing_id("emails", tick)
    assert firing_id("reports", tick).version == 5


# -- due: what fires now ---------------------------------------------------------------


CRON = Cron("*/5 * * * *")
T0 = ms("2026-01-01T00:00:00+00:00")


def fire(last: int | None, now: int, catch_up: CatchUp = CatchUp.LATEST) -> list[int]:
    return list(due(CRON, last, now, catch_up=catch_up, grace_ms=GRACE, limit=5).ticks)


def test_a_tick_that_just_came_fires_once_whatever_the_catch_up() -> None:
    for catch_up in CatchUp:
        assert fire(T0, T0 + 5 * MINUTE, catch_up) == [T0 + 5 * MINUTE]
        assert fire(T0, T0 + 5 * MINUTE + GRACE, catch_up) == [T0 + 5 * MINUTE], (
            "a tick within the grace is on time"
        )
    assert fire(T0 + 5 * MINUTE, T0 + 5 * MINUTE + 1) == [], "already fired"
    assert fire(T0, T0 + 4 * MINUTE) == [], "not yet"


def test_missed_ticks_follow_the_catch_up() -> None:
    now = T0 + 23 * MINUTE  # ticks at 5, 10, 15, 20 were missed
    assert fire(T0, now, CatchUp.NONE) == []
    assert fire(T0, now, CatchUp.LATEST) == [T0 + 20 * MINUTE]
    assert fire(T0, now, CatchUp.ALL) == [T0 + m * MINUTE for m in (5, 10, 15, 20)]


def test_catch_up_all_fires_the_latest_ticks_up_to_the_limit() -> None:
    now = T0 + 60 * MINUTE + 3 * MINUTE  # twelve missed ticks; the limit is five
    plan = due(CRON, T0, now, catch_up=CatchUp.ALL, grace_ms=GRACE, limit=5)
    assert list(plan.ticks) == [T0 + m * MINUTE for m in (40, 45, 50, 55, 60)]
    assert plan.skipped >= 1


def test_a_missed_tick_and_an_on_time_one_both_fire_under_latest() -> None:
    now = T0 + 15 * MINUTE + 2 * SECOND  # 5 and 10 missed, 15 on time
    assert fire(T0, now, CatchUp.LATEST) == [T0 + 10 * MINUTE, T0 + 15 * MINUTE]
    assert fire(T0, now, CatchUp.NONE) == [T0 + 15 * MINUTE]


def test_every_tick_within_the_grace_is_on_time_whatever_the_catch_up() -> None:
    every = Every(2)
    now = T0 + 9 * SECOND
    plan = due(every, None, now, catch_up=CatchUp.ALL, grace_ms=GRACE)
    assert list(plan.ticks) == [T0 + 8 * SECOND], "a new fast schedule does not fire a burst"
    for catch_up in CatchUp:
        plan = due(every, T0, now, catch_up=catch_up, grace_ms=GRACE)
        assert list(plan.ticks) == [T0 + s * SECOND for s in (2, 4, 6, 8)], (
            "a gap shorter than the grace (a hand-over, a stall) loses no tick"
        )
        assert plan.skipped == 0
        assert plan.cursor == T0 + 8 * SECOND


def test_ticks_older_than_the_grace_follow_the_catch_up_and_the_rest_fire() -> None:
    every = Every(2)
    now = T0 + 15 * SECOND  # 6 .. 14 are within the grace; 2 and 4 are older
    on_time = [T0 + s * SECOND for s in (6, 8, 10, 12, 14)]
    plan = due(every, T0, now, catch_up=CatchUp.NONE, grace_ms=GRACE)
    assert (list(plan.ticks), plan.skipped) == (on_time, 2)
    plan = due(every, T0, now, catch_up=CatchUp.LATEST, grace_ms=GRACE)
    assert (list(plan.ticks), plan.skipped) == ([T0 + 4 * SECOND, *on_time], 1)
    plan = due(every, T0, now, catch_up=CatchUp.ALL, grace_ms=GRACE)
    assert (list(plan.ticks), plan.skipped) == ([T0 + 2 * SECOND, T0 + 4 * SECOND, *on_time], 0)


def test_ticks_within_the_grace_of_a_cron_are_walked_forward() -> None:
    every_minute = Cron("* * * * *", "UTC")
    now = T0 + 3 * MINUTE + 2 * SECOND
    plan = due(every_minute, T0, now, catch_up=CatchUp.NONE, grace_ms=5 * MINUTE)
    assert list(plan.ticks) == [T0 + m * MINUTE for m in (1, 2, 3)]
    plan = due(every_minute, T0, now, catch_up=CatchUp.NONE, grace_ms=5 * MINUTE, limit=2)
    assert list(plan.ticks) == [T0 + m * MINUTE for m in (2, 3)], "the latest, up to the limit"


def test_a_schedule_that_never_fired_has_missed_nothing() -> None:
    assert fire(None, T0 + 23 * MINUTE, CatchUp.ALL) == []
    assert fire(None, T0 + 20 * MINUTE + SECOND, CatchUp.ALL) == [T0 + 20 * MINUTE], (
        "a tick within the grace still fires"
    )


def test_the_cursor_moves_past_skipped_ticks() -> None:
    plan = due(CRON, T0, T0 + 23 * MINUTE, catch_up=CatchUp.NONE, grace_ms=GRACE)
    assert plan.cursor == T0 + 20 * MINUTE
    assert plan.skipped == 4
    assert due(CRON, T0, T0 + 3 * MINUTE, catch_up=CatchUp.NONE, grace_ms=GRACE).cursor == T0


def test_every_catches_up_weeks_without_walking_them() -> None:
    every = Every(1)
    start = T0
    now = start + 14 * 24 * 3600 * SECOND
    plan = due(every, start, now, catch_up=CatchUp.ALL, grace_ms=0, limit=3)
    assert list(plan.ticks) == [now - 3 * SECOND, now - 2 * SECOND, now - SECOND, now], (
        "the latest three missed ticks, then the one on time"
    )
    plan = due(every, start, now, catch_up=CatchUp.LATEST, grace_ms=GRACE)
    assert list(plan.ticks) == [now - s * SECOND for s in range(11, -1, -1)], (
        "the latest missed tick, then the ones within the grace (10 s)"
    )
    assert plan.skipped == 14 * 24 * 3600 - 12, "all but the 11 on time and the latest missed"
