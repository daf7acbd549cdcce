"""``queuey queues``: what is waiting where."""

from __future__ import annotations

from typing import Any

import typer

from queuey_cli.common import backend, cli_errors, state
from queuey_cli.management import unacked
from queuey_cli.output import add_row, out, say, table


@cli_errors
def queues(ctx: typer.Context) -> None:
    """Each queue: ready, unacked, consumers, dead letters; and what the ladder holds."""
    settings = state(ctx).settings()
    names = list(settings.queue_set())
    broker = backend(settings)
    rows: list[tuple[str, Any, Any, Any]] = []
    for name in names:
        ready, consumers = broker.queue_counts(name)
        dead, _ = broker.queue_counts(f"{name}.dlq")
        rows.append((name, ready, consumers, dead))
    held = broker.held_count()
    broker.close()
    management = settings.broker.management_url
    found = unacked(
        management.get_secret_value() if management is not None else None,
        settings.broker.urls(),
        names,
    )
    t = table("queue", "ready", "unacked", "consumers", "dead letters", title="queues")
    for name, ready, consumers, dead in rows:
        shown = found.counts[name] if found.counts is not None else "n/a"
        add_row(t, name, ready, shown, consumers, dead)
    out.print(t)
    say(f"held in the delay ladder (all queues): {held}")
    if found.counts is None:
        say(f"unacked: n/a ({found.why_not})")
