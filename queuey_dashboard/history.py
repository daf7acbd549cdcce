"""What the dashboard remembers of the last minutes: queue depths and jobs done, sampled
whenever a page asks, and drawn as small SVG charts (pure: no I/O, no clock of its own).

Samples come at most every :data:`MIN_SPACING` seconds and are kept for
:data:`WINDOW` seconds. Nothing is sampled while no page is open, so a chart starts
when someone looks, and a gap shows as a straight line.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Seconds of history kept.
WINDOW = 600.0
#: The closest two samples may be, in seconds.
MIN_SPACING = 1.0
#: The shortest time a chart spans: a fresh one is not a single dot at the right.
MIN_SPAN = 60.0
#: The size of a chart, in SVG units.
WIDTH, HEIGHT = 160, 32


@dataclass(frozen=True, slots=True)
class Chart:
    """An SVG polyline's points (``"x,y x,y"``, numbers only) and what it shows."""

    points: str
    latest: float
    peak: float
    rate: float | None
    """The change per second over the window, or None with fewer than two samples."""
    width: int = WIDTH
    height: int = HEIGHT


def chart(samples: Sequence[tuple[float, float]], *, now: float) -> Chart:
    """A chart of ``(time, value)`` samples over the last :data:`WINDOW` seconds (or
    since the first sample, but at least :data:`MIN_SPAN`)."""
    kept = [(t, v) for t, v in samples if now - t <= WINDOW]
    if not kept:
        return Chart("", 0.0, 0.0, None)
    peak = max(v for _, v in kept) or 1.0
    span = min(WINDOW, max(MIN_SPAN, now - kept[0][0]))
    start = now - span
    points = " ".join(
        f"{(t - start) / span * WIDTH:.1f},{HEIGHT - 1 - v / peak * (HEIGHT - 2):.1f}"
        for t, v in kept
    )
    rate = None
    if len(kept) > 1 and kept[-1][0] > kept[0][0]:
        rate = (kept[-1][1] - kept[0][1]) / (kept[-1][0] - kept[0][0])
    return Chart(points, kept[-1][1], max(v for _, v in kept), rate)


class Series:
    """Samples of named values (queue depths), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        self._last = float("-inf")

    def add(self, now: float, values: Mapping[str, float]) -> bool:
        """Record ``values`` at ``now`` unless the last sample is too recent; whether it did."""
        with self._lock:
            if now - self._last < MIN_SPACING:
                return False
            self._last = now
            for name, value in values.items():
                kept = self._samples.setdefault(name, deque())
                kept.append((now, value))
                while kept and now - kept[0][0] > WINDOW:
                    kept.popleft()
            return True

    def chart(self, name: str, *, now: float) -> Chart:
        """The chart of ``name``'s samples."""
        with self._lock:
            samples = list(self._samples.get(name, ()))
        return chart(samples, now=now)


class Throughput:
    """Jobs done per second across the live workers, from their counters.

    Each sample is every worker's count of runs (succeeded and failed); the rate between
    two samples adds the increase of each worker present in both, so a worker that
    starts or stops does not show as a jump.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._previous: tuple[float, dict[str, int]] | None = None
        self._rates: deque[tuple[float, float]] = deque()

    def add(self, now: float, done_by_worker: Mapping[str, int]) -> None:
        """Record each worker's runs so far at ``now``."""
        with self._lock:
            previous = self._previous
            if previous is not None and now - previous[0] < MIN_SPACING:
                return
            self._previous = (now, dict(done_by_worker))
            if previous is None:
                return
            then, before = previous
            grown = sum(
                max(0, count - before[wid])
                for wid, count in done_by_worker.items()
                if wid in before
            )
            self._rates.append((now, grown / (now - then)))
            while self._rates and now - self._rates[0][0] > WINDOW:
                self._rates.popleft()

    def chart(self, *, now: float) -> Chart:
        """Jobs per second over the window."""
        with self._lock:
            samples = list(self._rates)
        return chart(samples, now=now)
