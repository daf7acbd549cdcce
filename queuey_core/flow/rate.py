"""GCRA, the generic cell rate algorithm: when a job may start under a rate limit.

One number per limit and key, the *theoretical arrival time* (``tat``, in ms): the time
the next job would be due if jobs came exactly at the rate. A job may start at ``now``
when ``now >= tat - tolerance``, where the tolerance is ``burst`` intervals, so at most
``1 + burst`` jobs start at once after a quiet spell and no window of the rate's period
admits more than ``count + burst``. A job that may not start yet is given the earliest
time it may, and that time is taken for it at once (a reservation): the jobs after it
are spaced behind it, so each waiting job comes back once, at its time, never to spin.

Owns: the maths, on integers of milliseconds. Must never: read a clock or a store
(:mod:`.limit_state` gives it both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cell:
    """One rate limit's parameters, in milliseconds."""

    interval: float  # between two starts at the steady rate
    tolerance: float  # burst * interval


def earliest(tat: int | None, now: int, cell: Cell) -> int:
    """The earliest ms at or after ``now`` at which one more job conforms."""
    if tat is None:
        return now
    return max(now, math.ceil(tat - cell.tolerance))


def taken(tat: int | None, at: int, cell: Cell) -> int:
    """The ``tat`` once a job was admitted at ``at``."""
    base = at if tat is None else max(tat, at)
    return math.ceil(base + cell.interval)


def admit(tats: Sequence[int | None], now: int, cells: Sequence[Cell]) -> tuple[int, list[int]]:
    """When a job bound by every one of ``cells`` may start, and the new ``tat`` of each.

    The job takes a token of each limit at the same time, the latest of the times each
    allows: one start, counted once by each limit.
    """
    at = max((earliest(t, now, c) for t, c in zip(tats, cells, strict=True)), default=now)
    return at, [taken(t, at, c) for t, c in zip(tats, cells, strict=True)]
