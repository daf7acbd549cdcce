"""Limit declarations and the GCRA maths: pure, no store, no clock."""

from __future__ import annotations

import pytest

from queuey_core.errors import ConfigError
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import Rate
from queuey_core.flow.limit_spec import key_of
from queuey_core.flow.limit_spec import parse_rate
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.rate import Cell
from queuey_core.flow.rate import Decision
from queuey_core.flow.rate import Meter
from queuey_core.flow.rate import Step
from queuey_core.flow.rate import decide


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("20/s", 20, 1),
        ("20 per second", 20, 1),
        ("1000 per hour", 1000, 3600),
        ("5 per 10s", 5, 10),
        ("3/min", 3, 60),
        ("100 per day", 100, 86400),
    ],
)
def test_rates_are_read_as_users_write_them(text: str, count: float, period: float) -> None:
    assert parse_rate(text) == Rate(count, period)


@pytest.mark.parametrize("text", ["fast", "20", "0/s", "20 per fortnight", "20/0s"])
def test_a_rate_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


def test_a_limit_with_nothing_to_limit_or_bind_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"\[limits.api\] sets neither rate nor concurrency"):
        spec_from_table("api", {"jobs": ["x"]})
    with pytest.raises(ConfigError, match=r"\[limits.api\] binds nothing"):
        spec_from_table("api", {"rate": "1/s"})
    with pytest.raises(ConfigError, match="unknown setting 'rates'"):
        spec_from_table("api", {"rates": "1/s", "jobs": ["x"]})


def test_a_limit_naming_an_unknown_job_type_or_queue_is_refused() -> None:
    book = LimitBook([spec_from_table("api", {"rate": "1/s", "jobs": ["pay"]})])
    with pytest.raises(ConfigError, match="no job type named 'pay'"):
        book.check_known(["greet"], ["default"])
    book = LimitBook([spec_from_table("api", {"rate": "1/s", "queues": ["slow"]})])
    with pytest.raises(ConfigError, match="no queue named 'slow'"):
        book.check_known(["greet"], ["default"])


def test_the_key_is_the_payload_field_and_a_missing_one_is_still_limited() -> None:
    spec = spec_from_table("t", {"concurrency": 1, "key": "tenant", "jobs": ["x"]})
    assert key_of(spec, {"tenant": "acme"}) == "acme"
    assert key_of(spec, {"tenant": 7}) == "7"
    assert key_of(spec, {}) == "", "no field: counted together, never unlimited"
    whole = spec_from_table("all", {"concurrency": 1, "jobs": ["x"]})
    assert key_of(whole, {"tenant": "acme"}) == ""


def test_a_job_type_binds_the_limits_that_name_it_or_its_queue() -> None:
    book = LimitBook(
        [
            spec_from_table("by_job", {"rate": "1/s", "jobs": ["pay"]}),
            spec_from_table("by_queue", {"concurrency": 2, "queues": ["slow"]}),
        ]
    )
    assert [s.name for s in book.binding("pay", "slow")] == ["by_job", "by_queue"]
    assert [s.name for s in book.binding("pay", "fast")] == ["by_job"]
    assert book.binding("greet", "fast") == ()


def _arrive(
    meter: Meter, cell: Cell, now: int, booking: int | None = None
) -> tuple[Decision, Meter]:
    decision = decide([meter], [cell], now, booking)
    return decision, decision.meters[0]


def test_gcra_starts_one_plus_burst_at_once_then_books_one_an_interval() -> None:
    cell = Cell(interval=100, tolerance=200)  # 10/s, burst 2
    meter = Meter()
    steps = []
    for _ in range(6):
        decision, meter = _arrive(meter, cell, 0)
        steps.append((decision.step, decision.at))
    assert steps == [
        (Step.START, 0),
        (Step.START, 0),
        (Step.START, 0),
        (Step.BOOK, 100),
        (Step.BOOK, 200),
        (Step.BOOK, 300),
    ], "1 + burst at once, then each waiting job gets its own time"


def test_a_booked_job_starts_at_its_time_and_waits_if_early() -> None:
    cell = Cell(interval=100, tolerance=0)
    _, meter = _arrive(Meter(), cell, 0)
    booked, meter = _arrive(meter, cell, 0)
    assert (booked.step, booked.at) == (Step.BOOK, 100)
    early, _ = _arrive(meter, cell, 50, booking=100)
    assert (early.step, early.at) == (Step.WAIT, 100)
    on_time, _ = _arrive(meter, cell, 100, booking=100)
    assert on_time.step is Step.START


def test_a_newcomer_does_not_start_ahead_of_bookings() -> None:
    cell = Cell(interval=100, tolerance=0)
    _, meter = _arrive(Meter(), cell, 0)
    _, meter = _arrive(meter, cell, 0)  # booked for 100
    _, meter = _arrive(meter, cell, 0)  # booked for 200
    late, _ = _arrive(meter, cell, 150)
    assert (late.step, late.at) == (Step.BOOK, 300), "behind the bookings, not in their place"


def test_jobs_handed_back_in_a_bunch_start_within_the_rate() -> None:
    cell = Cell(interval=100, tolerance=300)  # 10/s, burst 3
    meter = Meter()
    bookings = []
    for _ in range(100):  # everyone arrives at once
        decision, meter = _arrive(meter, cell, 0)
        bookings.append(decision.at if decision.step is Step.BOOK else None)
    starts = [0] * 4
    # The worker was busy for 3 s: every booking up to then comes back at once, late.
    now = 3000
    waiting = [b for b in bookings if b is not None]
    for _ in range(100):
        still = []
        for booking in sorted(waiting):
            if booking > now:
                still.append(booking)
                continue
            decision, meter = _arrive(meter, cell, now, booking)
            if decision.step is Step.START:
                starts.append(now)
            else:
                still.append(decision.at)
        waiting = still
        now += 50
    for begin in range(0, now, 10):
        inside = sum(begin <= s < begin + 1000 for s in starts)
        assert inside <= 10 + 3, f"window at {begin} ms started {inside}"
    after = sum(s >= 3000 for s in starts)
    assert after >= (now - 3000) / 100 - 1, f"and the rate is used: {after} starts after 3 s"


def test_a_job_under_two_rates_starts_when_both_allow() -> None:
    fast, slow = Cell(interval=10, tolerance=0), Cell(interval=1000, tolerance=0)
    decision = decide([Meter(), Meter(tat=5000)], [fast, slow], 0, None)
    assert (decision.step, decision.at) == (Step.BOOK, 5000)
    assert [m.book for m in decision.meters] == [5010, 6000]
