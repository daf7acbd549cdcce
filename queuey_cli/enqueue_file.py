"""``queuey enqueue --file``: a bulk run that says what became of every line.

Owns: reading and checking a JSON-lines file (a ``job_id`` key sets a line's id;
``--ids-from-lines`` derives one from the file's SHA-256 and the line number), publishing
it in batches with SIGINT / SIGTERM handlers installed for the run (the first stops it
between batches, a second at once), and, whatever ends it, the counts (confirmed,
unknown, refused, not sent), the republished count, the ``--failed-to`` file and the
exit code. Also the helpers the one-job path shares: parsing a payload, the backend.
Must never: report a line as confirmed that the broker did not confirm, or as not sent
one that was.
"""

from __future__ import annotations

import enum
import hashlib
import json
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from queuey_cli.common import backend, usage
from queuey_cli.output import Exit, console_of, err, error
from queuey_core import (
    BackendError,
    EnqueueUnknownError,
    Job,
    NotEnqueuedError,
    Producer,
    QueueSet,
    job_id_for,
)
from queuey_core.backends.capabilities import Republishes
from queuey_core.settings import Settings

BATCH = 2000


class Outcome(enum.Enum):
    """What became of one line of a --file."""

    CONFIRMED = "confirmed"
    UNKNOWN = "unknown (may or may not be enqueued)"
    REFUSED = "refused"
    NOT_SENT = "not sent"


@dataclass(slots=True)
class Line:
    """One job of a --file: where it came from, its id, and what became of it."""

    number: int
    text: str
    data: dict[str, Any]
    job: Job
    job_id: uuid.UUID | None
    #: The line names its id itself (a rerun of it as written gives the same id).
    pinned: bool
    outcome: Outcome = Outcome.NOT_SENT


@dataclass
class Run:
    """How far a --file run got."""

    path: Path
    lines: list[Line]
    republished: int = 0
    stopped: bool = False  # by a signal
    seconds: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for line in self.lines if line.outcome is outcome)


def parse_job(
    text: str, model: type[Job], where: str, *, id_key: bool
) -> tuple[Job, dict[str, Any], uuid.UUID | None]:
    """The job on a line, the line's JSON object, and the line's ``job_id`` (when
    ``id_key`` and the model has no field of that name)."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise usage(f"{where}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise usage(f"{where}: a job is a JSON object, not {type(data).__name__}")
    key = None
    payload = data
    if id_key and "job_id" in data and "job_id" not in model.model_fields:
        payload = dict(data)
        raw = payload.pop("job_id")
        try:
            if not isinstance(raw, str):
                raise ValueError(f"a job id is a UUID or a non-empty string, not {raw!r}")
            key = job_id_for(raw)
        except ValueError as exc:
            raise usage(f"{where}: job_id: {exc}") from None
    try:
        job = model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(p) for p in first["loc"]) or "payload"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise usage(
            f"{where}: does not fit job type {model.NAME!r}: {loc}: {first['msg']}{more}"
        ) from None
    return job, data, key


def read_file(path: Path, model: type[Job], ids_from_lines: bool) -> list[Line]:
    try:
        raw = path.read_bytes()
        lines = raw.decode("utf-8").splitlines()
    except IsADirectoryError:
        raise usage(f"{path}: is a directory, not a file of jobs") from None
    except OSError as exc:
        raise usage(f"{path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise usage(f"{path}: not UTF-8 text: {exc.reason}") from None
    digest = hashlib.sha256(raw).hexdigest()
    parsed = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        job, data, key = parse_job(text, model, f"{path}:{number}", id_key=True)
        pinned = key is not None
        if key is None and ids_from_lines:
            key = job_id_for(f"queuey --file {digest}:{number}")
        parsed.append(Line(number, text, data, job, key, pinned))
    if not parsed:
        raise usage(f"{path}: no jobs in it")
    return parsed


class _Stop:
    """SIGINT / SIGTERM while a --file runs: the first stops it after the batch in
    flight; a second stops it at once (that batch's outcome is then unknown)."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        err.print(
            f"{signal.Signals(signum).name}: stopping after the batch in flight "
            "(again to stop at once)",
            highlight=False,
        )


@contextmanager
def _signals(stop: _Stop) -> Iterator[None]:
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def publish_all(
    settings: Settings, queue_set: QueueSet, run: Run, delay: float | None, priority: int | None
) -> None:
    started = time.monotonic()
    # Every line gets its id now, so an outcome can be traced back to its line.
    for line in run.lines:
        if line.job_id is None:
            line.job_id = uuid.uuid4()
    pending = list(run.lines)
    stop = _Stop()
    rabbit: Any = None
    # Imported here: loading the command line (for `queuey worker` too) skips Rich.
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn("enqueue"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console_of(err),
        transient=True,
    )
    try:
        with _signals(stop), progress:
            rabbit = backend(settings)
            producer = Producer(rabbit, queue_set)
            task = progress.add_task("enqueue", total=len(pending))
            while pending and not stop.requested:
                batch, pending = pending[:BATCH], pending[BATCH:]
                try:
                    producer.enqueue_many(
                        [line.job for line in batch],
                        delay=delay,
                        priority=priority,
                        job_ids=[line.job_id for line in batch],
                    )
                except (EnqueueUnknownError, NotEnqueuedError) as exc:
                    _sort(batch, exc)
                    error(str(exc))
                    break
                except KeyboardInterrupt:
                    for line in batch:
                        line.outcome = Outcome.UNKNOWN
                    break
                for line in batch:
                    line.outcome = Outcome.CONFIRMED
                progress.advance(task, len(batch))
    except BackendError as exc:  # could not connect or declare: nothing was sent
        error(str(exc))
    finally:
        run.stopped = stop.requested
        run.seconds = time.monotonic() - started
        if rabbit is not None:
            run.republished = rabbit.republished if isinstance(rabbit, Republishes) else 0
            rabbit.close()


def _sort(batch: list[Line], exc: EnqueueUnknownError | NotEnqueuedError) -> None:
    """Each line of a failed batch as the error says (unknown when it does not say)."""
    unknown, refused, confirmed = set(exc.unknown), set(exc.not_enqueued), set(exc.confirmed)
    for line in batch:
        if line.job_id in unknown:
            line.outcome = Outcome.UNKNOWN
        elif line.job_id in refused:
            line.outcome = Outcome.REFUSED
        elif line.job_id in confirmed:
            line.outcome = Outcome.CONFIRMED
        elif isinstance(exc, EnqueueUnknownError):
            line.outcome = Outcome.UNKNOWN
        else:
            line.outcome = Outcome.REFUSED


def report(run: Run, failed_to: Path | None) -> Exit:
    """Print how the run went, write --failed-to, and choose the exit code."""
    total = len(run.lines)
    left = [line for line in run.lines if line.outcome is not Outcome.CONFIRMED]
    if not left:
        err.print(
            f"enqueued {total} jobs from {run.path} in {run.seconds:.2f}s "
            f"({total / max(run.seconds, 1e-9):,.0f}/s), every one confirmed by the broker",
            highlight=False,
        )
    else:
        counts = ", ".join(f"{run.count(o):,} {o.value}" for o in Outcome)
        err.print(f"{run.path}: {counts}, of {total:,} jobs", highlight=False)
    if run.republished:
        err.print(
            f"{run.republished:,} messages were republished after a lost connection: they "
            "may be on the queue twice, with the same job id",
            highlight=False,
        )
    if failed_to is not None:
        _write_failed(failed_to, left)
        if left:
            err.print(
                f"the {len(left):,} jobs not confirmed are in {failed_to}: run again with "
                f"--file {failed_to} (and the same options)",
                highlight=False,
            )
    if not left:
        return Exit.OK
    if run.count(Outcome.UNKNOWN):
        return Exit.UNKNOWN
    if run.stopped:
        return Exit.FORCED
    return Exit.FAILURE


def _write_failed(path: Path, lines: list[Line]) -> None:
    """The lines as given, each with the job id it was (or would have been) sent with."""
    with path.open("w", encoding="utf-8") as fh:
        for line in lines:
            if line.pinned or "job_id" in line.data:
                fh.write(line.text + "\n")
            else:
                fh.write(json.dumps({"job_id": str(line.job_id), **line.data}) + "\n")
