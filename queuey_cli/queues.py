"""``queuey queues``: what is waiting where, once (table, plain text or JSON) or live.

A configured queue that does not exist on the broker yet (nothing declared it: no
worker or enqueue has run) is shown as "not declared yet", never a NOT_FOUND failure.
Unacked counts come from the management API only (:mod:`queuey_cli.management`); on
the embedded backend (``sqlite://``) they are the jobs running (leased to a live
worker), and the delay ladder's count is what waits for its delay.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, state, usage
from queuey_cli.output import Column, listing, print_json
from queuey_core.backends.capabilities import Inspectable, Inspection, require
from queuey_core.settings import Settings, duration

if TYPE_CHECKING:
    from queuey_cli.management import Unacked

#: Shown in the ready column of a queue the broker does not have yet.
NOT_DECLARED = "not declared yet"

COLUMNS = [
    Column("queue", "name"),
    Column("ready", "ready"),
    Column("unacked", "unacked"),
    Column("consumers", "consumers"),
    Column("dead letters", "dead_letters"),
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


def take(broker: Inspectable, settings: Settings, names: list[str]) -> Sample:
    """Count ``names`` on the broker, and their unacked messages where the API answers."""
    inspection = broker.inspect(names)
    if settings.broker.is_embedded():
        from queuey_cli.management import Unacked  # noqa: PLC0415
        from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

        assert isinstance(broker, SqliteBackend)
        running = {name: c[0].leased for name, c in broker.counts(names).items()}
        return Sample(monotonic(), inspection, Unacked(running), embedded=True)
    # Imported here: the management-API client is for this command alone, not the worker.
    from queuey_cli.management import unacked  # noqa: PLC0415

    management = settings.broker.management_url
    found = unacked(
        management.get_secret_value() if management is not None else None,
        settings.broker.urls(),
        names,
    )
    return Sample(monotonic(), inspection, found)


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
            }
        )
    return result


def cells(record: dict[str, Any], *, unacked_known: bool) -> list[object]:
    """A record as table cells: "not declared yet" and "n/a" where a number is missing."""
    if not record["exists"]:
        return [record["name"], NOT_DECLARED, None, None, None]
    shown = record["unacked"] if unacked_known else "n/a"
    return [record["name"], record["ready"], shown, record["consumers"], record["dead_letters"]]


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


def interval_seconds(text: str) -> float:
    """``--interval`` in seconds: a duration (``500ms``, ``2s``) or a number, >= 0.1 s."""
    try:
        seconds = duration(text)
    except ValueError as exc:
        raise usage(f"--interval: {exc}") from None
    if not math.isfinite(seconds) or seconds < 0.1:
        raise usage(f"--interval: {text!r}: must be at least 100ms")
    return seconds


@cli_errors
def queues(
    ctx: typer.Context,
    as_json: Annotated[bool, JsonOption] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="A live table, refreshed until Ctrl-C.")
    ] = False,
    interval: Annotated[
        str | None, typer.Option(help="With --watch: seconds between refreshes (default 2s).")
    ] = None,
) -> None:
    """Each queue: ready, unacked, consumers, dead letters; and what the ladder holds."""
    if watch and as_json:
        raise usage("--watch and --json do not go together: run --json at each interval instead")
    if interval is not None and not watch:
        raise usage("--interval goes with --watch")
    seconds = interval_seconds(interval) if interval is not None else 2.0
    settings = state(ctx).settings()
    names = list(settings.queue_set())
    broker = backend(settings)
    counted = require(broker, Inspectable, "`queuey queues`")
    if watch:
        # Here, not at the top: queuey_cli.watch imports this module.
        from queuey_cli.watch import watch_queues  # noqa: PLC0415

        watch_queues(broker, lambda: take(counted, settings, names), seconds)
        return
    try:
        sample = take(counted, settings, names)
    finally:
        broker.close()
    found = records(sample)
    if as_json:
        print_json(
            {
                "queues": found,
                "held": sample.inspection.held,
                "unroutable": sample.inspection.unroutable,
                "unacked_error": sample.unacked.why_not or None,
            }
        )
        return
    notes = [held_note(sample)]
    if not sample.embedded:  # a file has no unroutable messages: a publish is refused
        notes.append(unroutable_note(sample))
    if sample.unacked.counts is None:
        notes.append(f"unacked: n/a ({sample.unacked.why_not})")
    known = sample.unacked.counts is not None
    columns = EMBEDDED_COLUMNS if sample.embedded else COLUMNS
    listing("queues", columns, [cells(r, unacked_known=known) for r in found], notes=notes)
