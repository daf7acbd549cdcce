"""``queuey enqueue``: validate against the job's model, then publish.

One job prints its id. A failure says which of two things happened: exit 1, the job
was not enqueued (running the command again cannot duplicate it); exit 4, it may or may
not be on the broker (run it again with ``--job-id`` set to the printed id, so that a
duplicate carries the same id).

``--file`` is a bulk run that can be resumed: see :mod:`queuey_cli.enqueue_file`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queuey_cli.common import backend, cli_errors, state, usage
from queuey_cli.enqueue_file import (
    Line,
    Run,
    parse_job,
    publish_all,
    read_file,
    report,
)
from queuey_cli.output import Exit, error, say
from queuey_core import EnqueueUnknownError, NotEnqueuedError, Producer, QueueSet, job_id_for
from queuey_core.limits import check_delay
from queuey_core.producer import make_envelope
from queuey_core.settings import Settings, duration


@cli_errors
def enqueue(
    ctx: typer.Context,
    job_type: Annotated[str, typer.Argument(help="The job type, e.g. greet.")],
    payload: Annotated[
        str | None, typer.Argument(help='The job as JSON, e.g. \'{"name":"ada"}\'.')
    ] = None,
    delay: Annotated[str | None, typer.Option(help="Run no earlier than this, e.g. 10s.")] = None,
    priority: Annotated[
        int | None, typer.Option(help="Priority (queue's maximum at most).")
    ] = None,
    job_id: Annotated[
        str | None,
        typer.Option(
            "--job-id",
            help="The job's id: a UUID, or any string (the same string always gives the "
            "same id). Default: a random one.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            help='Enqueue every line of a JSON-lines file (a "job_id" key in a line sets its id).',
            exists=False,
            dir_okay=False,
        ),
    ] = None,
    failed_to: Annotated[
        Path | None,
        typer.Option(
            "--failed-to",
            help="With --file: write the lines not confirmed here (with their job ids), "
            "to run again.",
            dir_okay=False,
        ),
    ] = None,
    ids_from_lines: Annotated[
        bool,
        typer.Option(
            "--ids-from-lines",
            help="With --file: a line without a job_id gets one made from the file's "
            "content and the line number, so running the same file again repeats the ids.",
        ),
    ] = False,
) -> None:
    """Enqueue one job (prints its id), or every line of --file."""
    if (payload is None) == (file is None):
        raise usage("give either a JSON payload or --file, not both and not neither")
    if file is None and (failed_to is not None or ids_from_lines):
        raise usage("--failed-to and --ids-from-lines go with --file")
    if file is not None and job_id is not None:
        raise usage('--job-id is for one job; with --file, give each line a "job_id"')
    seconds = None
    if delay is not None:
        try:
            seconds = duration(delay)
        except ValueError as exc:
            raise usage(f"--delay: {exc}") from None
        try:
            check_delay(seconds, "--delay")
        except ValueError as exc:
            raise usage(str(exc)) from None
    chosen = None
    if job_id is not None:
        try:
            chosen = job_id_for(job_id)
        except ValueError as exc:
            raise usage(f"--job-id: {exc}") from None
    st = state(ctx)
    settings = st.settings()
    queue_set = settings.queue_set()
    models = {d.handler.job_type.NAME: d.handler.job_type for d in st.handlers(queue_set)}
    model = models.get(job_type)
    if model is None:
        known = ", ".join(sorted(models)) or "none: install a handlers plugin"
        raise usage(f"unknown job type {job_type!r} (known: {known})")

    if file is not None:
        try:
            lines = read_file(file, model, ids_from_lines)
        except KeyboardInterrupt:
            error(f"{file}: interrupted while reading it: nothing was sent")
            raise typer.Exit(Exit.FORCED) from None
    else:
        assert payload is not None
        job, data, _ = parse_job(payload, model, "payload", id_key=False)
        lines = [Line(1, payload, data, job, chosen, chosen is not None)]

    # Check every job before connecting: a bad priority publishes nothing.
    for line in lines:
        make_envelope(line.job, queue_set, priority=priority, enqueued_at=0)

    if file is None:
        _enqueue_one(settings, queue_set, lines[0], seconds, priority)
        return
    run = Run(file, lines)
    try:
        publish_all(settings, queue_set, run, seconds, priority)
    except KeyboardInterrupt:  # a second signal while connecting: nothing was sent
        run.stopped = True
    raise typer.Exit(report(run, failed_to))


def _enqueue_one(
    settings: Settings, queue_set: QueueSet, line: Line, delay: float | None, priority: int | None
) -> None:
    producer = Producer(backend(settings), queue_set)
    try:
        job_id = producer.enqueue(line.job, delay=delay, priority=priority, job_id=line.job_id)
    except EnqueueUnknownError as exc:
        error(str(exc))
        raise typer.Exit(Exit.UNKNOWN) from None
    except NotEnqueuedError as exc:
        error(str(exc))
        raise typer.Exit(Exit.FAILURE) from None
    say(job_id)
