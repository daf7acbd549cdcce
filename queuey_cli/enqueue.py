"""``queuey enqueue``: validate against the job's model, then publish.

One job prints its id. A failure says which of two things happened: exit 1, the job
was not enqueued (running the command again cannot duplicate it); exit 4, it may or may
not be on the broker (run it again with ``--job-id`` set to the printed id, so that a
duplicate carries the same id). A third: exit 9, a duplicate of a job that holds its
unique key, not enqueued; the holder's id is printed instead.

``--file`` is a bulk run that can be resumed: see :mod:`queuey_cli.enqueue_file`.

``--no-validate --queue Q`` enqueues a job type this machine has no handler for (the
workers' code base is elsewhere): the payload need only be a JSON object; the worker
checks it against the job's model (:meth:`~queuey_core.Producer.enqueue_raw`).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from queuey_cli.common import backend, cli_errors, parse_json, state, usage
from queuey_cli.enqueue_args import TimeoutOption, WaitOption
from queuey_cli.output import Exit, error, say

if TYPE_CHECKING:
    from queuey_cli.job_lines import Line
    from queuey_core import DuplicateJobError, Producer, QueueSet
    from queuey_core.settings import Settings

# What a run uses (pydantic, the settings, the producer) is imported where it runs, so
# that `queuey enqueue --help` goes without (docs/performance.md).


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
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            "-q",
            help="With --no-validate: the queue to enqueue on (a configured one).",
        ),
    ] = None,
    no_validate: Annotated[
        bool,
        typer.Option(
            "--no-validate",
            help="Enqueue a job type without its model installed here: the payload need "
            "only be a JSON object; the worker validates it. Needs --queue.",
        ),
    ] = False,
    ids_from_lines: Annotated[
        bool,
        typer.Option(
            "--ids-from-lines",
            help="With --file: a line without a job_id gets one made from the file's "
            "content and the line number, so running the same file again repeats the ids.",
        ),
    ] = False,
    wait: Annotated[str | None, WaitOption] = None,
    timeout: Annotated[str | None, TimeoutOption] = None,
    workflow: Annotated[
        bool,
        typer.Option(
            "--workflow",
            help="The argument is a workflow described in JSON: a file, or - for stdin "
            "(docs/workflows.md). Prints the workflow's id.",
        ),
    ] = False,
) -> None:
    """Enqueue one job (prints its id), every line of --file, or a --workflow."""
    if workflow:
        given = (payload, delay, priority, job_id, file, failed_to, queue, wait, timeout)
        if any(v is not None for v in given) or no_validate or ids_from_lines:
            raise usage("--workflow takes the workflow's file alone: no payload, no options")
        from queuey_cli.workflow import enqueue_workflow  # noqa: PLC0415

        enqueue_workflow(ctx, job_type)
        return
    from queuey_cli.enqueue_file import Run, publish_all, report  # noqa: PLC0415
    from queuey_cli.enqueue_wait import (  # noqa: PLC0415
        after_enqueue,
        store_before_enqueue,
        wait_options,
    )
    from queuey_cli.job_lines import Line, parse_job, read_file  # noqa: PLC0415
    from queuey_core import job_id_for  # noqa: PLC0415
    from queuey_core.first_attempts import make_envelope  # noqa: PLC0415
    from queuey_core.limits import check_delay  # noqa: PLC0415
    from queuey_core.settings import duration  # noqa: PLC0415

    waiting = wait_options(wait, timeout, single=file is None)
    if (payload is None) == (file is None):
        raise usage("give either a JSON payload or --file, not both and not neither")
    if file is None and (failed_to is not None or ids_from_lines):
        raise usage("--failed-to and --ids-from-lines go with --file")
    if file is not None and job_id is not None:
        raise usage('--job-id is for one job; with --file, give each line a "job_id"')
    if queue is not None and not no_validate:
        raise usage("--queue goes with --no-validate (a validated job goes to its model's queue)")
    if no_validate and queue is None:
        raise usage("--no-validate needs --queue: without the job's model, its queue is unknown")
    if no_validate and file is not None:
        raise usage("--no-validate takes one payload, not --file")
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
    store = store_before_enqueue(settings, waiting)
    if no_validate:
        assert payload is not None
        assert queue is not None
        sent = _enqueue_raw(
            settings, queue_set, job_type, payload, queue, seconds, priority, chosen
        )
        after_enqueue(settings, store, sent, job_type, queue, waiting)
        return
    models = {d.handler.job_type.NAME: d.handler.job_type for d in st.handlers(queue_set)}
    model = models.get(job_type)
    if model is None and job_type in st.unusable:
        raise usage(st.unusable[job_type])
    if model is None:
        known = ", ".join(sorted(models)) or "none: install a handlers plugin"
        raise usage(f"unknown job type {job_type!r} (known: {known})")
    from queuey_core.flow.unique_setup import unique_problem  # noqa: PLC0415

    problem = unique_problem(model, settings)
    if problem is not None:  # before connecting: a key no job of the type can make
        raise usage(problem)

    if file is None:
        assert payload is not None
        job, data, _ = parse_job(payload, model, "payload", id_key=False)
        # Checked before connecting: a bad priority publishes nothing.
        make_envelope(job, queue_set, priority=priority, enqueued_at=0)
        line = Line(1, payload, data, job, chosen, chosen is not None)
        sent = _enqueue_one(settings, queue_set, line, seconds, priority)
        after_enqueue(settings, store, sent, job_type, model.QUEUE, waiting)
        return
    try:
        # Every line checked (a bad priority too) before connecting: a bad line
        # publishes nothing. Streaming: the lines are read again as they are sent.
        checked = read_file(file, model, ids_from_lines, queue_set, priority)
    except KeyboardInterrupt:
        error(f"{file}: interrupted while reading it: nothing was sent")
        raise typer.Exit(Exit.FORCED) from None
    run = Run(checked)
    try:
        publish_all(settings, queue_set, run, seconds, priority)
    except KeyboardInterrupt:  # a second signal while connecting: nothing was sent
        run.stopped = True
    raise typer.Exit(report(run, failed_to))


def _enqueue_one(
    settings: Settings, queue_set: QueueSet, line: Line, delay: float | None, priority: int | None
) -> uuid.UUID:
    from queuey_core import (  # noqa: PLC0415
        DuplicateJobError,
        EnqueueUnknownError,
        NotEnqueuedError,
    )

    producer = _producer(settings, queue_set)
    try:
        job_id = producer.enqueue(line.job, delay=delay, priority=priority, job_id=line.job_id)
    except DuplicateJobError as exc:
        raise _duplicate(exc) from None
    except EnqueueUnknownError as exc:
        error(str(exc))
        raise typer.Exit(Exit.UNKNOWN) from None
    except NotEnqueuedError as exc:
        error(str(exc))
        raise typer.Exit(Exit.FAILURE) from None
    say(job_id)
    return job_id


def _enqueue_raw(
    settings: Settings,
    queue_set: QueueSet,
    job_type: str,
    payload: str,
    queue: str,
    delay: float | None,
    priority: int | None,
    job_id: uuid.UUID | None,
) -> uuid.UUID:
    """``--no-validate``: every check but the model's, before connecting; then publish."""
    from queuey_core import (  # noqa: PLC0415
        DuplicateJobError,
        EnqueueUnknownError,
        NotEnqueuedError,
    )
    from queuey_core.first_attempts import make_raw_envelope  # noqa: PLC0415

    data: Any = parse_json(payload, "payload")
    if not isinstance(data, dict):
        raise usage(f"payload: a job is a JSON object, not {type(data).__name__}")
    try:
        make_raw_envelope(job_type, data, queue_set, queue=queue, priority=priority, enqueued_at=0)
    except ValueError as exc:
        raise usage(f"payload: {exc}") from None
    producer = _producer(settings, queue_set)
    try:
        sent = producer.enqueue_raw(
            job_type, data, queue=queue, priority=priority, delay=delay, job_id=job_id
        )
    except DuplicateJobError as exc:
        raise _duplicate(exc) from None
    except EnqueueUnknownError as exc:
        error(str(exc))
        raise typer.Exit(Exit.UNKNOWN) from None
    except NotEnqueuedError as exc:
        error(str(exc))
        raise typer.Exit(Exit.FAILURE) from None
    except ValueError as exc:  # a payload without a field of its unique key: unsent
        raise usage(f"payload: {exc}") from None
    say(sent)
    return sent


def _producer(settings: Settings, queue_set: QueueSet) -> Producer:
    """A producer on the settings' backend, with their unique jobs (``[unique.*]``, and
    the job store's table for the keys on RabbitMQ)."""
    from queuey_core import Producer  # noqa: PLC0415
    from queuey_core.flow.unique_setup import (  # noqa: PLC0415
        check_key_store,
        producer_options,
    )

    check_key_store(settings)  # before connecting
    broker = backend(settings)
    return Producer(broker, queue_set, **producer_options(broker, settings))


def _duplicate(exc: DuplicateJobError) -> typer.Exit:
    """Exit 9 for a duplicate: the holder's id on stdout (the job that will run), and
    one line on stderr."""
    say(exc.existing)
    error(f"not enqueued: a duplicate of job {exc.existing}, which holds its unique key")
    return typer.Exit(Exit.DUPLICATE)
