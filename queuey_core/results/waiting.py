"""Asking the job store how a job went: its record now, or once it has finished.

Owns: :func:`wait_for_record` (poll until the job is over, or give up) and
:func:`wait_for_result` (its result, or its failure raised as
:class:`~queuey_core.errors.JobFailed` with the reason). Polling starts every few
milliseconds and slows to :data:`MAX_POLL`, so ``wait`` returns within tens of
milliseconds of the store hearing of the end.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, TypeVar

from pydantic import BaseModel

from queuey_core.errors import JobFailed, JobWaitTimeout
from queuey_core.results.records import JobRecord, JobState
from queuey_core.results.store import JobStore

#: The longest pause between two looks at the store, in seconds.
MAX_POLL = 0.01
_FIRST_POLL = 0.002

M = TypeVar("M", bound=BaseModel)


def wait_for_record(
    store: JobStore, job_id: uuid.UUID | str, *, timeout: float | None = None
) -> JobRecord:
    """The record of ``job_id`` once it has finished (succeeded, dead-lettered or
    cancelled); ``timeout`` None waits for ever.

    Raises:
        JobWaitTimeout: it had not finished within ``timeout`` seconds.
        JobStoreError: the store cannot be read.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = _FIRST_POLL
    while True:
        record = store.get(job_id)
        if record is not None and record.state.finished:
            return record
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            state = "unknown to the store" if record is None else record.state.value
            raise JobWaitTimeout(f"job {job_id} had not finished after {timeout:g}s ({state})")
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))
        pause = min(MAX_POLL, pause * 2)


def wait_for_result(
    store: JobStore,
    job_id: uuid.UUID | str,
    *,
    timeout: float | None = None,
    result_type: type[M] | None = None,
) -> Any:
    """The result of ``job_id`` once it has succeeded (validated as ``result_type``, a
    pydantic model, if given).

    Raises:
        JobFailed: it was dead-lettered or cancelled; ``.record`` is its record, the
            message its reason.
        JobWaitTimeout: it had not finished within ``timeout`` seconds.
        JobStoreError: the store cannot be read.
    """
    record = wait_for_record(store, job_id, timeout=timeout)
    return result_of(record, result_type)


def result_of(record: JobRecord, result_type: type[M] | None = None) -> Any:
    """The result of a finished record, or its failure raised as JobFailed."""
    if record.state is not JobState.SUCCEEDED:
        what = record.state.value.replace("_", "-")
        reason = f": {record.error}" if record.error else ""
        raise JobFailed(f"job {record.job_id} was {what}{reason}", record)
    if result_type is not None:
        return result_type.model_validate(record.result)
    return record.result
