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
from queuey_core.flow.rate import admit


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


def test_gcra_spaces_starts_by_the_interval_after_the_burst() -> None:
    cell = Cell(interval=100, tolerance=200)  # 10/s, burst 2
    tat: int | None = None
    starts = []
    for _ in range(6):
        at, (tat,) = admit([tat], 0, [cell])
        starts.append(at)
    assert starts == [0, 0, 0, 100, 200, 300], "1 + burst at once, then one an interval"


def test_gcra_never_admits_more_than_count_plus_burst_in_any_window() -> None:
    cell = Cell(interval=100, tolerance=300)  # 10/s, burst 3
    tat: int | None = None
    starts = []
    now = 0
    for _ in range(200):  # everyone arrives at once, and as soon as allowed
        at, (tat,) = admit([tat], now, [cell])
        starts.append(at)
    for begin in range(0, starts[-1], 7):
        inside = sum(begin <= s < begin + 1000 for s in starts)
        assert inside <= 10 + 3, f"window at {begin} ms admitted {inside}"


def test_a_job_under_two_rates_takes_a_token_of_each_at_the_later_time() -> None:
    fast, slow = Cell(interval=10, tolerance=0), Cell(interval=1000, tolerance=0)
    at, tats = admit([None, 5000], 0, [fast, slow])
    assert at == 5000
    assert tats == [5010, 6000]
