"""What ``queuey limits``, ``queuey queues`` and the dashboard show: a row per limit and
key in use, and per queue the limits that bind its jobs and what they hold out of it.

Owns: :func:`limit_rows` (the rows, from the declarations and the state's counts),
:func:`queue_limits` (the same, per queue) and their readers from where the workers keep
the state. Must never: change the state (it only counts).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.flow.limit_setup import limit_book, limit_state_for, state_url
from queuey_core.flow.limit_spec import LimitBook, LimitSpec
from queuey_core.flow.limit_state import KeyCount
from queuey_core.jobs import Job, job_identity
from queuey_core.settings import Settings

#: The fields of a row, in the order a listing shows them.
FIELDS = ("limit", "key", "rate", "concurrency", "running", "reserved", "parked", "next_start_in")


def limit_rows(book: LimitBook, counts: Sequence[KeyCount], now_ms: int) -> list[dict[str, Any]]:
    """A row a limit and key in use (a limit with none in use: one row, key None)."""

    def row(spec: LimitSpec, found: KeyCount | None) -> dict[str, Any]:
        due = found.next_due_ms if found is not None else None
        return {
            "limit": spec.name,
            "key": found.key if found is not None else None,
            "rate": None if spec.rate is None else f"{spec.rate} (burst {spec.burst})",
            "concurrency": spec.concurrency,
            "running": found.running if found is not None else 0,
            "reserved": found.reserved if found is not None else 0,
            "parked": found.parked if found is not None else 0,
            "next_start_in": None if due is None else f"{max(0, due - now_ms) / 1000:.3g}s",
        }

    rows: list[dict[str, Any]] = []
    for spec in book.specs:
        mine = [c for c in counts if c.limit == spec.name]
        if mine:
            rows.extend(row(spec, c) for c in mine)
        else:
            rows.append(row(spec, None))
    return rows


def read_limit_rows(
    settings: Settings, job_types: Iterable[type[Job]] = ()
) -> list[dict[str, Any]]:
    """The rows of the limits ``settings`` and ``job_types`` declare, read from their
    store (none: []).

    Raises:
        ConfigError: a bad limit, or no place where their state is kept.
        LimitStateError: that place cannot be reached.
    """
    book = limit_book(settings, job_types)
    if not book:
        return []
    state = limit_state_for(state_url(settings), book)
    try:
        now = int(time.time() * 1000)
        return limit_rows(book, state.counts(now_ms=now), now)
    finally:
        state.close()


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """What limits do to one queue.

    Args:
        limits: the limits that bind its jobs (by its name, a job type of it, or a job
            of it parked behind them), by name.
        held: its jobs parked now behind a concurrency limit: acked, kept with the
            limits' state, so in none of the queue's counts (a job waiting for its rate
            is deferred, so among the messages held for a delay).
        keys: a row (:data:`FIELDS`) a limit and key in use. A limit and key count
            every job of theirs, on whichever queue: a limit shared by two queues shows
            the same keys under each.
    """

    limits: tuple[str, ...] = ()
    held: int = 0
    keys: tuple[dict[str, Any], ...] = ()

    def record(self) -> dict[str, Any]:
        """The ``--json`` fields: ``limits``, ``held_by_limits``, ``limited_keys``."""
        return {
            "limits": list(self.limits),
            "held_by_limits": self.held,
            "limited_keys": list(self.keys),
        }


def queue_limits(
    book: LimitBook,
    counts: Sequence[KeyCount],
    parked: Mapping[tuple[str, str], int],
    names: Iterable[str],
    *,
    queue_of: Mapping[str, str],
    now_ms: int,
) -> dict[str, QueueLimits]:
    """Per queue of ``names``: the limits of ``book`` that bind it, the jobs ``parked``
    (by (queue, limit)) hold out of it, and their keys in use (``counts``).

    ``queue_of`` maps a job type to its queue (``Job.QUEUE``): a limit binds a queue it
    names, and the queue of each job type it names.
    """
    found: dict[str, QueueLimits] = {}
    for queue in names:
        specs = [
            spec
            for spec in book.specs
            if queue in spec.queues
            or any(queue_of.get(job) == queue for job in spec.jobs)
            or parked.get((queue, spec.name))
        ]
        rows = limit_rows(LimitBook(specs), counts, now_ms)
        found[queue] = QueueLimits(
            limits=tuple(spec.name for spec in specs),
            held=sum(n for (where, _), n in parked.items() if where == queue),
            keys=tuple(row for row in rows if row["key"] is not None),
        )
    return found


def read_queue_limits(
    settings: Settings, names: Sequence[str], job_types: Iterable[type[Job]] = ()
) -> dict[str, QueueLimits]:
    """:func:`queue_limits` of the limits ``settings`` and ``job_types`` declare, read
    from their store; {} when none is declared.

    Raises:
        ConfigError: a bad limit, or no place where their state is kept.
        LimitStateError: that place cannot be reached.
    """
    job_types = list(job_types)
    book = limit_book(settings, job_types)
    if not book:
        return {}
    state = limit_state_for(state_url(settings), book)
    try:
        now = int(time.time() * 1000)
        counts, parked = state.counts(now_ms=now), state.parked_by_queue()
    finally:
        state.close()
    queue_of = dict(job_identity(job) for job in job_types)
    return queue_limits(book, counts, parked, names, queue_of=queue_of, now_ms=now)
