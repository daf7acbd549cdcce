"""Tick maths: when a schedule fires, which missed ticks to catch up, and each tick's id.

Pure functions of time in milliseconds since the Unix epoch; no I/O, no clock. Every
scheduler computes the same ticks from the same configuration (``every`` ticks are
aligned to the epoch, not to a start time), so a tick's job id, derived from the
schedule's name and the tick's instant, is the same wherever and however often it is
fired.
"""

from __future__ import annotations

import collections
import enum
import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from croniter import croniter


def _croniter() -> type[croniter]:
    """croniter, imported with the first cron schedule (a plain worker never needs it)."""
    from croniter import croniter  # noqa: PLC0415

    return croniter


#: The namespace of the job ids of scheduled firings (uuid5 of ``name@tick_ms``).
FIRING_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "queuey:schedules")


class CatchUp(enum.StrEnum):
    """What to do with ticks missed while no scheduler ran (later than the grace)."""

    NONE = "none"  # skip them
    LATEST = "latest"  # fire the latest of them, once
    ALL = "all"  # fire each of them (up to a limit), oldest first


class Trigger(Protocol):
    """When a schedule's ticks fall, in milliseconds since the epoch."""

    def next_after(self, ms: int) -> int:
        """The first tick strictly after ``ms``."""

    def latest_at_or_before(self, ms: int) -> int | None:
        """The last tick at or before ``ms`` (None if there is none)."""

    def describe(self) -> str:
        """``every 90s`` / ``cron */5 * * * * (Europe/Paris)``, for people."""


@dataclass(frozen=True)
class Every:
    """A tick every ``seconds``, aligned to the Unix epoch (``"1h"`` fires on the hour, UTC)."""

    seconds: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.seconds) or self.seconds < 1:
            raise ValueError("an 'every' interval must be at least 1s")

    @property
    def ms(self) -> int:
        """The interval in milliseconds."""
        return round(self.seconds * 1000)

    def next_after(self, ms: int) -> int:
        """See :meth:`Trigger.next_after`."""
        return (ms // self.ms + 1) * self.ms

    def latest_at_or_before(self, ms: int) -> int | None:
        """See :meth:`Trigger.latest_at_or_before`."""
        return (ms // self.ms) * self.ms

    def describe(self) -> str:
        """See :meth:`Trigger.describe`."""
        return f"every {self.seconds:g}s"


@dataclass(frozen=True)
class Cron:
    """Standard five-field cron in a time zone; DST changes handled as croniter does.

    On a spring-forward day a time that does not exist fires at the first instant after
    the gap (``30 2 * * *`` at 03:00 in Europe/Paris); on a fall-back day a time that
    happens twice fires twice, once at each instant.
    """

    expression: str
    timezone: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.expression.split()) != 5:
            raise ValueError(
                f"cron {self.expression!r} must have five fields (minute hour day month weekday)"
            )
        if not _croniter().is_valid(self.expression):
            raise ValueError(f"cron {self.expression!r} is not a valid cron expression")
        object.__setattr__(self, "_zone", zone(self.timezone))

    @property
    def zone(self) -> ZoneInfo:
        """The time zone the expression is read in."""
        return self._zone

    def _at(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC).astimezone(self._zone)

    def next_after(self, ms: int) -> int:
        """See :meth:`Trigger.next_after`."""
        found: datetime = _croniter()(self.expression, self._at(ms)).get_next(datetime)
        return _ms(found)

    def latest_at_or_before(self, ms: int) -> int | None:
        """See :meth:`Trigger.latest_at_or_before`."""
        # get_prev is strictly before its start: start one millisecond later.
        found: datetime = _croniter()(self.expression, self._at(ms + 1)).get_prev(datetime)
        return _ms(found)

    def previous(self, ms: int, count: int) -> list[int]:
        """Up to ``count`` ticks strictly before ``ms``, latest first."""
        it = _croniter()(self.expression, self._at(ms))
        return [_ms(it.get_prev(datetime)) for _ in range(count)]

    def describe(self) -> str:
        """See :meth:`Trigger.describe`."""
        return f"cron {self.expression} ({self.timezone})"


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError naming it if it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name like 'Europe/Paris')"
        ) from None


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def firing_id(schedule: str, tick_ms: int) -> uuid.UUID:
    """The job id of ``schedule``'s firing for the tick at ``tick_ms``: the same everywhere."""
    return uuid.uuid5(FIRING_NAMESPACE, f"{schedule}@{tick_ms}")


@dataclass(frozen=True)
class Due:
    """What a schedule should fire now, and how far it has been accounted for.

    ``ticks``: to fire, oldest first. ``skipped``: missed ticks not fired (catch-up
    ``none``, ``latest``, or beyond the limit of ``all``). ``cursor``: the latest tick at
    or before now (fired or skipped): the next look starts after it.
    """

    ticks: tuple[int, ...]
    skipped: int
    cursor: int | None


def due(
    trigger: Trigger,
    last: int | None,
    now: int,
    *,
    catch_up: CatchUp,
    grace_ms: int,
    limit: int = 1000,
) -> Due:
    """The ticks to fire at ``now``, given the last tick already fired (``last``).

    Every tick after ``last`` that is at most ``grace_ms`` old is on time, and fires
    (the latest ``limit`` of them): a hand-over between schedulers, or a leader that
    stalled for a moment, loses none of them. Older ticks after ``last`` were missed,
    and ``catch_up`` decides: none of them, the latest, or all (the latest ``limit`` of
    them). A schedule that never fired (no ``last``) has missed nothing, and only its
    latest tick can be on time: a new fast schedule does not start with a burst. So a
    scheduler that wakes at each tick fires exactly that tick, and one that takes over
    after a gap fires what ``catch_up`` says, once, plus the ticks within the grace.
    """
    latest = trigger.latest_at_or_before(now)
    fresh = latest is not None and (last is None or latest > last)
    on_time: list[int] = []
    if fresh and latest is not None and now - latest <= grace_ms:
        if last is None:
            on_time = [latest]
        else:
            first = trigger.next_after(max(last, now - grace_ms - 1))
            on_time = _walk(trigger, first, latest, limit)
    missed: list[int] = []
    skipped = 0
    if last is not None:
        upto = on_time[0] - 1 if on_time else now
        missed, skipped = _missed(trigger, last, upto, catch_up, limit)
    cursor = latest if fresh else last
    return Due(tuple(missed + on_time), skipped, cursor)


def _missed(
    trigger: Trigger, after: int, upto: int, catch_up: CatchUp, limit: int
) -> tuple[list[int], int]:
    """The missed ticks in ``(after, upto]`` to fire, and how many are skipped."""
    if upto <= after:
        return [], 0
    first = trigger.next_after(after)
    if first > upto:
        return [], 0
    latest = trigger.latest_at_or_before(upto)
    if latest is None or latest < first:  # not a consistent trigger; nothing to catch up
        return [], 0
    if catch_up is CatchUp.NONE:
        return [], _count(trigger, first, latest, limit)
    if catch_up is CatchUp.LATEST:
        return [latest], _count(trigger, first, latest, limit) - 1
    ticks = _latest_ticks(trigger, first, latest, limit)
    return ticks, _count(trigger, first, latest, limit + 1) - len(ticks)


def _latest_ticks(trigger: Trigger, first: int, latest: int, limit: int) -> list[int]:
    """Up to ``limit`` ticks in ``[first, latest]``, the latest ones, oldest first."""
    if isinstance(trigger, Every):
        step = trigger.ms
        lo = max(first, latest - (limit - 1) * step)
        return list(range(lo, latest + 1, step))
    if isinstance(trigger, Cron):
        earlier = [t for t in trigger.previous(latest, limit - 1) if t >= first]
        return [*reversed(earlier), latest]
    ticks = [first]
    while len(ticks) < 10 * limit and (t := trigger.next_after(ticks[-1])) <= latest:
        ticks.append(t)
    return ticks[-limit:]


def _walk(trigger: Trigger, first: int, latest: int, limit: int) -> list[int]:
    """The ticks in ``[first, latest]`` (the latest ``limit``), walked forward: a span
    of a grace holds few ticks, and a cron's steps forward are cheaper than back."""
    if isinstance(trigger, Every):
        return _latest_ticks(trigger, first, latest, limit)
    ticks = collections.deque([first], maxlen=limit)
    while (t := trigger.next_after(ticks[-1])) <= latest:
        ticks.append(t)
    return list(ticks)


def _count(trigger: Trigger, first: int, latest: int, cap: int) -> int:
    """How many ticks in ``[first, latest]`` (counting stops at ``cap``: "at least")."""
    if isinstance(trigger, Every):
        return (latest - first) // trigger.ms + 1
    return len(_latest_ticks(trigger, first, latest, cap))


def next_due(trigger: Trigger, cursor: int | None, now: int) -> int:
    """When the next tick after ``cursor`` falls (never before now's next tick if none)."""
    return trigger.next_after(cursor if cursor is not None else now)
