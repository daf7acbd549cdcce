"""The charts' maths: samples kept for the window, points inside the box, rates."""

from __future__ import annotations

from queuey_dashboard.history import HEIGHT
from queuey_dashboard.history import WIDTH
from queuey_dashboard.history import WINDOW
from queuey_dashboard.history import Series
from queuey_dashboard.history import Throughput
from queuey_dashboard.history import chart


def points(text: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in text.split())]


def test_a_chart_fits_its_box_and_says_the_change_per_second() -> None:
    drawn = chart([(1000.0, 0.0), (1010.0, 50.0), (1020.0, 100.0)], now=1020.0)

    assert drawn.rate == 5.0
    assert (drawn.latest, drawn.peak) == (100.0, 100.0)
    for x, y in points(drawn.points):
        assert 0 <= x <= WIDTH
        assert 0 <= y <= HEIGHT
    assert points(drawn.points)[-1] == (WIDTH, 1.0), "the newest sample at the right, on top"


def test_samples_older_than_the_window_are_dropped_and_spacing_is_kept() -> None:
    series = Series()
    assert series.add(0.0, {"q": 1})
    assert not series.add(0.5, {"q": 2}), "closer than a second to the last one"
    assert series.add(WINDOW + 10, {"q": 3})

    drawn = series.chart("q", now=WINDOW + 10)
    assert drawn.latest == 3, "only the newest is inside the window"
    assert drawn.rate is None
    assert series.chart("unknown", now=0).points == ""


def test_throughput_adds_each_workers_increase_and_ignores_comings_and_goings() -> None:
    rates = Throughput()
    rates.add(0.0, {"a": 100, "b": 50})
    rates.add(10.0, {"a": 150, "c": 1_000_000})  # b left, c came: neither counts

    assert rates.chart(now=10.0).latest == 5.0
