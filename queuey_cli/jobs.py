"""``queuey job``, ``queuey jobs`` and ``queuey cancel``: a job's history from the job
store, and cancels that stick.

A job's result is printed only when asked (``--result``, or ``--json --result``):
results can hold what a terminal or a log should not. Every command that needs the job
store and has none says so in one line, with how to configure one (exit 2).

Exit codes of ``cancel``: 0 every id was cancelled, 7 some id is unknown to the job
store (it was still cancelled: a job the store never saw may exist), 8 some job had
already finished (not cancelled); 7 wins over 8.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Annotated

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, state, usage
from queuey_cli.output import Column, Exit, err, listing, print_json, say
from queuey_core.results import JobRecord, JobState

# The store, the settings and the backend (pydantic) are imported where they are used,
# so that `queuey jobs --help` goes without (docs/performance.md).

ResultOption = typer.Option("--result", help="Print the job's result too (it may be sensitive).")


def parse_job_id(text: str) -> uuid.UUID:
    """A job id from the command line, or a usage error: a UUID, or the key it was
    enqueued with (``enqueue --job-id order-42``), turned into its id the same way."""
    from queuey_core.job_ids import job_id_for  # noqa: PLC0415

    try:
        return job_id_for(text)
    except ValueError:
        raise usage(f"{text!r} is not a job id (a UUID, or the key given to --job-id)") from None


@cli_errors
def job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    as_json: Annotated[bool, JsonOption] = False,
    with_result: Annotated[bool, ResultOption] = False,
) -> None:
    """A job's state and every attempt (worker, times, error); its result with --result."""
    from queuey_core.results.setup import store_for  # noqa: PLC0415

    wanted = parse_job_id(job_id)
    store = store_for(state(ctx).settings())
    try:
        record = store.get(wanted)
    finally:
        store.close()
    if record is None:
        say(f"no job {wanted} in the job store (never recorded, or expired)", to=err)
        raise typer.Exit(Exit.NO_SUCH_JOB)
    if as_json:
        print_json(record.to_json(with_result=with_result))
        return
    show(record, with_result=with_result)


def show(record: JobRecord, *, with_result: bool) -> None:
    """A record as lines of text."""
    say(f"job {record.job_id}  {record.job_type} on {record.queue}: {record.state.value}")
    say(f"created {_when(record.created_at)}, updated {_when(record.updated_at)}")
    if record.error:
        say(f"error: {record.error}")
    for n, a in enumerate(record.attempts, 1):
        end = "still running or lost" if a.ended_at is None else _when(a.ended_at)
        outcome = a.outcome.value if a.outcome is not None else "-"
        line = f"  run {n} (attempt {a.number}) on {a.host} pid {a.pid}: {_when(a.started_at)}"
        say(f"{line} -> {end}: {outcome}" + (f": {a.error}" if a.error else ""))
    if with_result and record.state is JobState.SUCCEEDED:
        say(json.dumps(record.result, ensure_ascii=True))


_COLUMNS = [
    Column("Job id", "job_id", no_wrap=True),
    Column("Type", "job_type"),
    Column("Queue", "queue"),
    Column("State", "state"),
    Column("Runs", "runs"),
    Column("Updated", "updated_at"),
    Column("Error", "error"),
]


@cli_errors
def jobs(
    ctx: typer.Context,
    job_state: Annotated[
        JobState | None, typer.Option("--state", help="Only jobs in this state.")
    ] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Only this job type.")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Updated at or after: an ISO time, or an age such as 1h."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Updated before: an ISO time, or an age such as 10m.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Jobs a page.")] = 50,
    page: Annotated[int, typer.Option(min=1, help="Which page (1: the most recent).")] = 1,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """Recorded jobs, most recently updated first, filtered and paged."""
    from queuey_core.results.setup import store_for  # noqa: PLC0415

    start, end = _time(since, "--since"), _time(until, "--until")
    store = store_for(state(ctx).settings())
    try:
        found = store.search(
            state=job_state,
            job_type=job_type,
            queue=queue,
            since=start,
            until=end,
            limit=limit,
            offset=(page - 1) * limit,
        )
    finally:
        store.close()
    if as_json:
        print_json(
            {"page": page, "limit": limit, "jobs": [r.to_json(with_result=False) for r in found]}
        )
        return
    notes = [f"page {page}: more with --page {page + 1}"] if len(found) == limit else []
    listing(
        "jobs",
        _COLUMNS,
        (
            (
                r.job_id,
                r.job_type,
                r.queue,
                r.state.value,
                len(r.attempts),
                _when(r.updated_at),
                r.error or None,
            )
            for r in found
        ),
        notes=notes,
    )


@cli_errors
def cancel(
    ctx: typer.Context,
    job_ids: Annotated[list[str], typer.Argument(help="The ids of the jobs to cancel.")],
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """Cancel jobs: a waiting one never runs, a running one is told to stop (ctx.cancelled).

    The cancel reaches every worker, those started later too, for 7 days.
    """
    from queuey_core.results import CancelVerdict, cancel_jobs  # noqa: PLC0415
    from queuey_core.results.setup import results_url, store_for  # noqa: PLC0415

    wanted = [parse_job_id(text) for text in job_ids]
    settings = state(ctx).settings()
    store = store_for(settings) if results_url(settings) is not None else None
    try:
        verdicts = cancel_jobs(backend(settings), wanted, store=store)
    finally:
        if store is not None:
            store.close()
    if as_json:
        print_json({str(j): v.value for j, v in verdicts.items()})
    else:
        for job_id, verdict in verdicts.items():
            say(f"{job_id}: {verdict.said}")
    if CancelVerdict.UNKNOWN in verdicts.values():
        raise typer.Exit(Exit.NO_SUCH_JOB)
    if CancelVerdict.FINISHED in verdicts.values():
        raise typer.Exit(Exit.ALREADY_FINISHED)


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _time(text: str | None, option: str) -> datetime | None:
    """An ISO 8601 time (UTC when it has no zone), or an age back from now."""
    from queuey_core.settings import duration  # noqa: PLC0415

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            age = duration(text)
        except ValueError:
            raise usage(f"{option}: {text!r} is neither an ISO time nor an age like 1h") from None
        return datetime.fromtimestamp(datetime.now(UTC).timestamp() - age, tz=UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
