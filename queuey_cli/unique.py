"""``queuey unique``: which job holds which unique key, and letting go of a gone job's.

Reads the keys where producers keep them (the embedded backend's file, or the table of
the store ``[results] url`` names on RabbitMQ, which it never connects to); refused in
one line where there is none. ``release`` is the operator's way out when a key is held by
a job that will never let it go (docs/flow-control.md, "Faults"): it asks the job store
first and refuses while that job may still wait or run.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated

import typer

from queuey_cli.common import JsonOption, cli_errors, state
from queuey_cli.jobs import parse_job_id
from queuey_cli.output import Column, Exit, error, listing, print_json, say

app = typer.Typer(
    help="Unique jobs' keys: which job holds which, and letting go of a gone job's.",
    no_args_is_help=True,
)

COLUMNS = [
    Column("Key", "key", no_wrap=True),
    Column("Job id", "job_id", no_wrap=True),
    Column("Held until", "held_until"),
]

#: What "Held until" says of a key held until its job's worker lets it go.
UNTIL_LET_GO = "its job starts or ends"


def _until(expires_at: int | None) -> str:
    if expires_at is None:
        return UNTIL_LET_GO
    when = dt.datetime.fromtimestamp(expires_at / 1000, tz=dt.UTC)
    return when.isoformat(timespec="seconds")


@app.command("list")
@cli_errors
def list_keys(
    ctx: typer.Context,
    job: Annotated[
        str | None, typer.Option("--job", help="Only the keys this job (id or key) holds.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="Keys at most.")] = 100,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """The unique keys held now, by key: the job that holds each, and until when."""
    from queuey_core.flow.unique_setup import open_key_table  # noqa: PLC0415

    holder = None if job is None else str(parse_job_id(job))
    with open_key_table(state(ctx).settings()) as keys:
        # One more than shown: whether there are more to say so.
        held = keys.holding(int(time.time() * 1000), job_id=holder, limit=limit + 1)
    more = len(held) > limit
    rows = [
        {"key": h.key, "job_id": h.job_id, "held_until": _until(h.expires_at)} for h in held[:limit]
    ]
    if as_json:
        print_json({"keys": rows, "more": more})
        return
    notes = [f"the first {limit} keys: --limit for more"] if more else []
    listing("unique keys", COLUMNS, [[r[c.name] for c in COLUMNS] for r in rows], notes=notes)


@app.command("release")
@cli_errors
def release(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job (id, or the key given to --job-id).")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Even if the job store says the job may still wait or run."),
    ] = False,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """Let go of every unique key JOB_ID holds, so that enqueueing its key again is no
    longer refused as a duplicate of it: for a job that is gone (an enqueue cut short,
    a store out of reach when its worker let go). Refused while the job store says the
    job is queued, running or coming back (a second one would run beside it)."""
    from queuey_core.flow.unique_setup import open_key_table  # noqa: PLC0415
    from queuey_core.results.setup import results_url, store_for  # noqa: PLC0415

    settings = state(ctx).settings()
    wanted = parse_job_id(job_id)
    if not force and results_url(settings) is not None:
        store = store_for(settings)
        try:
            record = store.get(wanted)
        finally:
            store.close()
        if record is not None and not record.state.finished:
            error(
                f"job {wanted} is {record.state.value} (the job store says so): its keys "
                "keep a second one out while it may still run; cancel it "
                f"(`queuey cancel {wanted}`) or let go anyway with --force"
            )
            raise typer.Exit(Exit.FAILURE)
    with open_key_table(settings) as keys:
        let_go = keys.let_go(str(wanted))
    if as_json:
        print_json({"job_id": str(wanted), "released": let_go})
    elif let_go:
        n = len(let_go)
        say(f"let go of {n} key{'s' if n != 1 else ''} of job {wanted}: its key can be enqueued")
    else:
        say(f"job {wanted} holds no unique key")
