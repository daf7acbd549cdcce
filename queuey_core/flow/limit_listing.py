"""What ``queuey limits`` and the dashboard show: a row per limit and key in use.

Owns: :func:`limit_rows` (the rows, from the declarations and the state's counts) and
:func:`read_limit_rows` (the same, read where the workers keep the state). Must never:
change the state (it only counts).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from queuey_core.flow.limit_setup import limit_book, limit_state_for, state_url
from queuey_core.flow.limit_spec import LimitBook, LimitSpec
from queuey_core.flow.limit_state import KeyCount
from queuey_core.jobs import Job
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
