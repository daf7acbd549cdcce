"""GCRA, the generic cell rate algorithm, on starts, with bookings so that waiting jobs
do not spin: when a job may start under a rate limit.

Each limit and key keeps two numbers, in ms. ``tat``, the *theoretical arrival time* of
the starts: a job may start at ``now`` when ``now >= tat - tolerance`` (the tolerance is
``burst`` intervals), and then ``tat = max(tat, now) + interval``; so no window of the
rate's period holds more than ``count + burst`` starts, however the jobs arrive. And
``book``, the next free *booking*: a job that may not start is given the earliest time
it may (a booking, kept by job id) and comes back then, once, instead of spinning; the
bookings after it are spaced one interval behind.

A booked job that comes back and may not start (it came back late, behind others that
started in its place) waits a little if its turn is less than half an interval away,
else is booked again at the end of the line: starts stay within the rate even when the
broker hands jobs back in a bunch (a worker busy with a backlog, a restart).

Owns: the maths, on integers of milliseconds. Must never: read a clock or a store
(:mod:`.limit_state` gives it both).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cell:
    """One rate limit's parameters, in milliseconds."""

    interval: float  # between two starts at the steady rate
    tolerance: float  # burst * interval


@dataclass(frozen=True, slots=True)
class Meter:
    """One rate limit's state for one key (None: nothing started or booked yet)."""

    tat: int | None = None
    book: int | None = None


class Step(enum.Enum):
    """What a job is told."""

    START = "start"  # start now
    WAIT = "wait"  # come back at ``at``, booking kept
    BOOK = "book"  # come back at ``at``, booked for then


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer, and each meter as it is after it."""

    step: Step
    at: int
    meters: tuple[Meter, ...]


def _conforms_at(meter: Meter, cell: Cell) -> int:
    """The earliest ms a start conforms to ``meter`` (0: any time)."""
    return 0 if meter.tat is None else math.ceil(meter.tat - cell.tolerance)


def decide(
    meters: Sequence[Meter], cells: Sequence[Cell], now: int, booking: int | None
) -> Decision:
    """What a job bound by ``cells`` (their meters for its keys) does at ``now``;
    ``booking`` is the time it was booked for, if it was.

    A job takes a start of every limit at once, or none.
    """
    pairs = list(zip(meters, cells, strict=True))
    if booking is not None and booking > now:
        return Decision(Step.WAIT, booking, tuple(meters))  # back early: not yet
    conform = max((_conforms_at(m, c) for m, c in pairs), default=0)
    free = max((m.book or 0 for m, _ in pairs), default=0)
    if conform <= now and (booking is not None or free <= now):
        # A booked job's turn, or a newcomer with no booking ahead of it.
        started = tuple(
            Meter(math.ceil(max(m.tat or now, now) + c.interval), m.book) for m, c in pairs
        )
        return Decision(Step.START, now, started)
    shortest = min(c.interval for _, c in pairs)
    if booking is not None and conform - now <= shortest / 2:
        return Decision(Step.WAIT, conform, tuple(meters))  # its turn, a moment away
    at = max(now, conform, free)
    booked = tuple(Meter(m.tat, math.ceil(at + c.interval)) for m, c in pairs)
    return Decision(Step.BOOK, at, booked)
