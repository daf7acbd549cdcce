"""``queuey queues``: what is waiting where."""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request
from typing import Any

import typer
from rich.table import Table

from queuey_cli.common import backend, cli_errors, state
from queuey_cli.output import out


def _unacked(url: str, names: list[str]) -> dict[str, int] | None:
    """Unacked counts from the management API, when it answers (AMQP cannot tell)."""
    parts = urllib.parse.urlsplit(url)
    vhost = urllib.parse.unquote(parts.path[1:] or "/")
    auth = base64.b64encode(
        f"{urllib.parse.unquote(parts.username or 'guest')}:"
        f"{urllib.parse.unquote(parts.password or 'guest')}".encode()
    ).decode()
    counts = {}
    try:
        for name in names:
            api = (
                f"http://{parts.hostname}:15672/api/queues/"
                f"{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
            )
            request = urllib.request.Request(api, headers={"Authorization": f"Basic {auth}"})
            with urllib.request.urlopen(request, timeout=1) as response:
                counts[name] = int(json.load(response).get("messages_unacknowledged", 0))
    except (OSError, ValueError):
        return None
    return counts


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
    unacked = _unacked(settings.broker.url.get_secret_value(), names)
    table = Table("queue", "ready", "unacked", "consumers", "dead letters", title="queues")
    for name, ready, consumers, dead in rows:
        shown = str(unacked[name]) if unacked is not None else "n/a"
        table.add_row(name, str(ready), shown, str(consumers), str(dead))
    out.print(table)
    out.print(f"held in the delay ladder (all queues): {held}", highlight=False)
    if unacked is None:
        out.print("unacked: n/a (the RabbitMQ management API did not answer)", highlight=False)
