"""What ``queuey queues`` shows, sampled: each queue's counts (:func:`take`), as records
and cells, and the notes below the table. Shared by the one-off listing and ``--watch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queuey_cli.output import Column

if TYPE_CHECKING:
    from queuey_core.backends.capabilities import Inspectable, Inspection
    from queuey_core.management_api import Unacked
    from queuey_core.settings import Settings

#: Shown in the ready column of a queue the broker does not have yet.
NOT_DECLARED = "not declared yet"

COLUMNS = [
    Column("queue", "name"),
    Column("ready", "ready"),
    Column("unacked", "unacked"),
    Column("consumers", "consumers"),
    Column("dead letters", "dead_letters"),
    Column("paused", "paused"),
]

#: On the embedded backend: "running" (leased to a live worker) instead of "unacked".
EMBEDDED_COLUMNS = [Column("running", "unacked") if c.name == "unacked" else c for c in COLUMNS]


#: When a sample is taken; tests replace it to get exact rates.
monotonic: Callable[[], float] = time.monotonic


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the configured queues, and when (``time.monotonic()``) it was taken."""

    at: float
    inspection: Inspection
    unacked: Unacked
    embedded: bool = False
    paused: frozenset[str] | None = None


def take(broker: Inspectable, settings: Settings, names: list[str]) -> Sample:
    """Count ``names`` on the broker, and their unacked messages where the API answers."""
    from queuey_core.queue_counts import look  # noqa: PLC0415 - not for `queuey queues --help`

    found = look(broker, settings, names)
    return Sample(
        monotonic(), found.inspection, found.unacked, embedded=found.embedded, paused=found.paused
    )


def records(sample: Sample) -> list[dict[str, Any]]:
    """One record a queue, with the ``--json`` field names (None: not known)."""
    result: list[dict[str, Any]] = []
    for name, counts in sample.inspection.queues.items():
        unacked_counts = sample.unacked.counts
        result.append(
            {
                "name": name,
                "exists": counts is not None,
                "ready": None if counts is None else counts.ready,
                "unacked": (
                    unacked_counts.get(name) if unacked_counts and counts is not None else None
                ),
                "consumers": None if counts is None else counts.consumers,
                "dead_letters": None if counts is None else counts.dead_letters,
                "paused": None if sample.paused is None else name in sample.paused,
            }
        )
    return result


def cells(record: dict[str, Any], *, unacked_known: bool) -> list[object]:
    """A record as table cells: "not declared yet" and "n/a" where a number is missing."""
    # None (a backend that cannot pause) shows as a missing value does.
    paused = {True: "paused", False: "no", None: None}[record["paused"]]
    if not record["exists"]:
        return [record["name"], NOT_DECLARED, None, None, None, paused]
    shown = record["unacked"] if unacked_known else "n/a"
    return [
        record["name"],
        record["ready"],
        shown,
        record["consumers"],
        record["dead_letters"],
        paused,
    ]


def held_note(sample: Sample) -> str:
    """What the delay ladder holds, for every queue together."""
    held = sample.inspection.held
    if sample.embedded:
        return f"held (waiting for their delay, all queues): {held}"
    return f"held in the delay ladder (all queues): {NOT_DECLARED if held is None else held}"


def unroutable_note(sample: Sample) -> str:
    """What ``queuey.unroutable`` holds, with where to look when it is not empty."""
    count = sample.inspection.unroutable
    hint = " (for queues that do not exist: queuey dlq list --queue queuey.unroutable)"
    return f"unroutable (queuey.unroutable): {count}{hint if count else ''}"
