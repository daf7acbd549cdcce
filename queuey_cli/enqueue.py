"""``queuey enqueue``: validate against the job's model, then publish (all or nothing)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from queuey_cli.common import backend, cli_errors, state, usage
from queuey_cli.output import err, say
from queuey_core import Job, Producer
from queuey_core.limits import check_delay
from queuey_core.producer import make_envelope
from queuey_core.settings import duration

BATCH = 2000


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
    file: Annotated[
        Path | None,
        typer.Option(help="Enqueue every line of a JSON-lines file.", exists=False, dir_okay=False),
    ] = None,
) -> None:
    """Enqueue one job (prints its id), or every line of --file."""
    if (payload is None) == (file is None):
        raise usage("give either a JSON payload or --file, not both and not neither")
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
    st = state(ctx)
    settings = st.settings()
    queue_set = settings.queue_set()
    models = {d.handler.job_type.NAME: d.handler.job_type for d in st.handlers(queue_set)}
    model = models.get(job_type)
    if model is None:
        known = ", ".join(sorted(models)) or "none: install a handlers plugin"
        raise usage(f"unknown job type {job_type!r} (known: {known})")

    if file is not None:
        jobs = _read_file(file, model)
    else:
        assert payload is not None
        jobs = [_parse(payload, model, "payload")]

    # Check every job before connecting: a bad priority publishes nothing.
    for job in jobs:
        make_envelope(job, queue_set, priority=priority, enqueued_at=0)

    producer = Producer(backend(settings), queue_set)
    if file is None:
        job_id = producer.enqueue(jobs[0], delay=seconds, priority=priority)
        say(job_id)
        return
    _publish_all(producer, jobs, seconds, priority, file)


def _parse(text: str, model: type[Job], where: str) -> Job:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise usage(f"{where}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise usage(f"{where}: a job is a JSON object, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        key = ".".join(str(p) for p in first["loc"]) or "payload"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise usage(
            f"{where}: does not fit job type {model.NAME!r}: {key}: {first['msg']}{more}"
        ) from None


def _read_file(path: Path, model: type[Job]) -> list[Job]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except IsADirectoryError:
        raise usage(f"{path}: is a directory, not a file of jobs") from None
    except OSError as exc:
        raise usage(f"{path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise usage(f"{path}: not UTF-8 text (byte {exc.start})") from None
    jobs = [
        _parse(line, model, f"{path}:{number}")
        for number, line in enumerate(lines, 1)
        if line.strip()
    ]
    if not jobs:
        raise usage(f"{path}: no jobs in it")
    return jobs


def _publish_all(
    producer: Producer, jobs: list[Job], delay: float | None, priority: int | None, path: Path
) -> None:
    started = time.monotonic()
    progress = Progress(
        TextColumn("enqueue"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    with progress:
        task = progress.add_task("enqueue", total=len(jobs))
        for start in range(0, len(jobs), BATCH):
            batch = jobs[start : start + BATCH]
            producer.enqueue_many(batch, delay=delay, priority=priority)
            progress.advance(task, len(batch))
    took = time.monotonic() - started
    say(
        f"enqueued {len(jobs)} jobs from {path} in {took:.2f}s "
        f"({len(jobs) / max(took, 1e-9):,.0f}/s), every one confirmed by the broker",
        to=err,
    )
