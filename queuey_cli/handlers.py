"""``queuey handlers``: what the installed plugins can run."""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import JsonOption, cli_errors, state
from queuey_cli.output import Column, listing, print_json

COLUMNS = [
    Column("job type", "job_type"),
    Column("queue", "queue"),
    Column("entry point", "entry_point"),
    Column("distribution", "distribution"),
]


@cli_errors
def handlers(ctx: typer.Context, as_json: Annotated[bool, JsonOption] = False) -> None:
    """List job types with their queue, entry point and distribution."""
    st = state(ctx)
    found = st.handlers(st.settings().queue_set())
    records = [
        {
            "job_type": item.handler.job_type.NAME,
            "queue": item.handler.job_type.QUEUE,
            "entry_point": item.entry_point,
            "distribution": item.distribution,
        }
        for item in found
    ]
    if as_json:
        print_json(records)
        return
    listing("handlers", COLUMNS, [[r[c.name] for c in COLUMNS] for r in records])
