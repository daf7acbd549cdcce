"""``queuey limits``: every declared limit, and each key in use with its counts.

Reads the limits' state where the worker keeps it (the embedded backend's file, or the
store ``[results] url`` names on RabbitMQ); refused in one line where there is none.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from queuey_cli.common import JsonOption, cli_errors, state
from queuey_cli.output import Column, listing, print_json, say

COLUMNS = [
    Column("limit", "limit"),
    Column("key", "key"),
    Column("rate", "rate"),
    Column("concurrency", "concurrency"),
    Column("running", "running"),
    Column("let go", "reserved"),
    Column("parked", "parked"),
    Column("next start in", "next_start_in"),
]


@cli_errors
def limits(ctx: typer.Context, as_json: Annotated[bool, JsonOption] = False) -> None:
    """Each rate and concurrency limit, and the keys in use: running, parked, next start."""
    # Here, not at the top: `queuey --help` does not load the flow package.
    from queuey_core.flow.limit_setup import limit_book, limit_state_for, state_url  # noqa: PLC0415
    from queuey_core.flow.limit_spec import LimitSpec  # noqa: PLC0415

    settings = state(ctx).settings()
    book = limit_book(settings)
    if not book:
        if as_json:
            print_json({"limits": []})
        else:
            say("no limits are declared ([limits.NAME] in queuey.toml)")
        return
    limit_state = limit_state_for(state_url(settings), book)
    try:
        now = int(time.time() * 1000)
        counts = limit_state.counts(now_ms=now)
    finally:
        limit_state.close()

    def row(spec: LimitSpec, key: str | None, found: Any = None) -> dict[str, Any]:
        due = found.next_due_ms if found is not None else None
        return {
            "limit": spec.name,
            "key": key,
            "rate": None if spec.rate is None else f"{spec.rate} (burst {spec.burst})",
            "concurrency": spec.concurrency,
            "running": found.running if found is not None else 0,
            "reserved": found.reserved if found is not None else 0,
            "parked": found.parked if found is not None else 0,
            "next_start_in": None if due is None else f"{max(0, due - now) / 1000:.3g}s",
        }

    rows: list[dict[str, Any]] = []
    for spec in book.specs:
        mine = [c for c in counts if c.limit == spec.name]
        rows.extend(row(spec, c.key, c) for c in mine)
        if not mine:
            rows.append(row(spec, None))
    if as_json:
        print_json({"limits": rows})
        return
    listing("limits", COLUMNS, [[r[c.name] for c in COLUMNS] for r in rows])
