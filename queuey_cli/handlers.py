"""``queuey handlers``: what the installed plugins can run."""

from __future__ import annotations

import typer

from queuey_cli.common import cli_errors, state
from queuey_cli.output import add_row, out, table


@cli_errors
def handlers(ctx: typer.Context) -> None:
    """List job types with their queue, entry point and distribution."""
    st = state(ctx)
    found = st.handlers(st.settings().queue_set())
    t = table("job type", "queue", "entry point", "distribution", title="handlers")
    for item in found:
        job = item.handler.job_type
        add_row(t, job.NAME, job.QUEUE, item.entry_point, item.distribution)
    out.print(t)
