"""``queuey limits``: every declared limit, and each key in use with its counts.

Reads the limits' state where the worker keeps it (the embedded backend's file, or the
store ``[results] url`` names on RabbitMQ); refused in one line where there is none.
"""

from __future__ import annotations

from typing import Annotated

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
    from queuey_core.flow.limit_listing import read_limit_rows  # noqa: PLC0415
    from queuey_core.handlers import discover  # noqa: PLC0415

    # With the job types plugins register: limits declared on a job class count too.
    rows = read_limit_rows(state(ctx).settings(), [d.handler.job_type for d in discover()])
    if as_json:
        print_json({"limits": rows})
    elif not rows:
        say("no limits are declared ([limits.NAME] in queuey.toml)")
    else:
        listing("limits", COLUMNS, [[r[c.name] for c in COLUMNS] for r in rows])
