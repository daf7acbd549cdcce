"""The lines of an ``enqueue --file``: parsed and checked, one at a time.

Owns: reading a JSON-lines file in streaming passes (:func:`read_file` checks every line
and hashes the file, keeping only counts; :func:`lines_of` reads it again, each line
with the id it is sent with), and parsing one line or payload (:func:`parse_job`). A run
holds one line at a time here, whatever the file's size: :mod:`.enqueue_file` batches.
Must never: hand out a line the first pass did not check (a file changed since is
:class:`FileChanged`).
"""

from __future__ import annotations

import enum
import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import typer
from pydantic import ValidationError

from queuey_cli.common import parse_json, usage
from queuey_core import Job, QueueSet, job_id_for
from queuey_core.first_attempts import make_envelope
from queuey_core.uuid7 import uuid7


class Outcome(enum.Enum):
    """What became of one line of a --file."""

    CONFIRMED = "confirmed"
    UNKNOWN = "unknown (may or may not be enqueued)"
    REFUSED = "refused"
    #: Not enqueued: another job holds its unique key (the job id a line chose, on a
    #: backend that keeps keys: the line was enqueued before).
    DUPLICATE = "duplicate"
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


def parse_job(
    text: str, model: type[Job], where: str, *, id_key: bool
) -> tuple[Job, dict[str, Any], uuid.UUID | None]:
    """The job on a line, the line's JSON object, and the line's ``job_id`` (when
    ``id_key`` and the model has no field of that name)."""
    data: Any = parse_json(text, where)
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


@dataclass(frozen=True)
class CheckedFile:
    """A --file whose every line was checked (the first pass): what the next passes need."""

    path: Path
    model: type[Job]
    ids_from_lines: bool
    digest: str
    jobs: int
    #: Size and modification time when checked: a file changed since is not published.
    stamp: tuple[int, int]


def _texts(fh: Iterable[bytes], path: Path) -> Iterator[tuple[int, str]]:
    """Each non-blank line of ``fh`` with its number, as ``str.splitlines`` of the whole
    decoded file would number it, one physical line in memory at a time."""
    number = 0
    for raw in fh:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise usage(f"{path}: not UTF-8 text: {exc.reason}") from None
        # (a line may hold more than one of splitlines' breaks: U+2028, \r, ...)
        for part in text.splitlines() or [""]:
            number += 1
            if part.strip():
                yield number, part


def _open(path: Path) -> IO[bytes]:
    try:
        fh = path.open("rb")
        if not os.path.isfile(path):
            fh.close()
            raise IsADirectoryError
        return fh
    except IsADirectoryError:
        raise usage(f"{path}: is a directory, not a file of jobs") from None
    except OSError as exc:
        raise usage(f"{path}: cannot read it: {exc.strerror}") from None


def _stamp(fh: IO[bytes]) -> tuple[int, int]:
    st = os.fstat(fh.fileno())
    return st.st_size, st.st_mtime_ns


class _Hashing:
    """A binary file's lines, hashed as they are read."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        for raw in self._fh:
            self.sha.update(raw)
            yield raw


def read_file(
    path: Path, model: type[Job], ids_from_lines: bool, queue_set: QueueSet, priority: int | None
) -> CheckedFile:
    """The first pass: every line parsed and checked as its job would be published (a
    bad line is a usage error, and nothing is published); nothing kept but counts."""
    with _open(path) as fh:
        stamp = _stamp(fh)
        hashing = _Hashing(fh)
        jobs = 0
        for number, text in _texts(hashing, path):
            job, _, _ = parse_job(text, model, f"{path}:{number}", id_key=True)
            if jobs == 0:
                # Checked as it will be sent: a bad priority publishes nothing. What the
                # envelope checks (queue, priority, names) is the same for every line.
                make_envelope(job, queue_set, priority=priority, enqueued_at=0)
            else:
                # What varies from line to line, checked as the producer's batch path
                # does it for every job after a type's first: its JSON.
                _to_json(job, f"{path}:{number}")
            jobs += 1
        digest = hashing.sha.hexdigest()
    if not jobs:
        raise usage(f"{path}: no jobs in it")
    return CheckedFile(path, model, ids_from_lines, digest, jobs, stamp)


def _to_json(job: Job, where: str) -> None:
    try:
        job.__pydantic_serializer__.to_json(job)
    except (ValueError, TypeError) as exc:  # PydanticSerializationError is a ValueError
        raise usage(f"{where}: cannot be sent as JSON: {exc}") from None


class FileChanged(Exception):
    """The file is not what the first pass checked."""


def lines_of(checked: CheckedFile, after: int = 0) -> Iterator[Line]:
    """The checked file's jobs, line by line (those numbered above ``after``), each with
    the id it is sent with; FileChanged if the file is not the one checked."""
    path = checked.path
    with _open(path) as fh:
        if _stamp(fh) != checked.stamp:
            raise FileChanged(f"{path}: the file changed since it was checked")
        try:
            for number, text in _texts(fh, path):
                if number <= after:
                    continue
                job, data, key = parse_job(text, checked.model, f"{path}:{number}", id_key=True)
                pinned = key is not None
                if key is None and checked.ids_from_lines:
                    key = job_id_for(f"queuey --file {checked.digest}:{number}")
                yield Line(number, text, data, job, key or uuid7(), pinned)
        except typer.Exit:  # (its line was said) it passed the first pass
            raise FileChanged(f"{path}: the file changed since it was checked") from None
