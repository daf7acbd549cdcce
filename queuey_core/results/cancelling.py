"""Cancelling jobs: what ``queuey cancel`` and its library call do.

Owns: :func:`cancel_jobs`, which checks each id against the job store when there is
one (an id it does not know, a job already over), records the cancel on the backend
(:class:`~queuey_core.backends.capabilities.SupportsCancellation`: every worker, those
that start later too, sees it for the retention window), and marks jobs that are only
waiting as cancelled in the store at once (a running one is marked when its handler
stops). Must never: cancel a job the store says is over.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Sequence

from queuey_core.backends.capabilities import SupportsCancellation, require
from queuey_core.results.records import JobEvent, JobState
from queuey_core.results.store import JobStore


class CancelVerdict(enum.StrEnum):
    """What a cancel of one id did."""

    CANCELLED = "cancelled"
    """Recorded: the job will not run, or is told to stop."""
    UNCHECKED = "unchecked"
    """Recorded; no job store to say whether the job exists or is over."""
    UNKNOWN = "unknown"
    """Recorded, but the store does not know the id (a typo, or a job it never saw)."""
    FINISHED = "finished"
    """Not recorded: the job is already over."""

    @property
    def said(self) -> str:
        """What a cancel of one id did, as ``queuey cancel`` and the dashboard say it."""
        return _SAID[self]


_SAID = {
    CancelVerdict.CANCELLED: "cancelled",
    CancelVerdict.UNCHECKED: "cancelled (no job store to check that it exists)",
    CancelVerdict.UNKNOWN: "unknown to the job store (cancelled anyway, should it exist)",
    CancelVerdict.FINISHED: "already finished: not cancelled",
}


def cancel_jobs(
    backend: object, job_ids: Sequence[uuid.UUID], *, store: JobStore | None = None
) -> dict[uuid.UUID, CancelVerdict]:
    """Cancel ``job_ids``; what happened to each, in order.

    Raises:
        MissingCapabilityError: the backend cannot cancel.
        BackendError: the cancels could not be recorded.
        JobStoreError: the store cannot be read.
    """
    cancels = require(backend, SupportsCancellation, "`queuey cancel`")
    verdicts: dict[uuid.UUID, CancelVerdict] = {}
    waiting: list[JobEvent] = []
    now = int(time.time() * 1000)
    for job_id in job_ids:
        if store is None:
            verdicts[job_id] = CancelVerdict.UNCHECKED
            continue
        record = store.get(job_id)
        if record is None:
            verdicts[job_id] = CancelVerdict.UNKNOWN
        elif record.state.finished:
            verdicts[job_id] = CancelVerdict.FINISHED
        else:
            verdicts[job_id] = CancelVerdict.CANCELLED
            if record.state is not JobState.RUNNING:
                waiting.append(
                    JobEvent(
                        job_id,
                        record.job_type,
                        record.queue,
                        JobState.CANCELLED,
                        at=now,
                        enqueued_at=int(record.created_at.timestamp() * 1000),
                        error="cancelled before it ran",
                        ran=False,
                    )
                )
    recorded = [j for j, v in verdicts.items() if v is not CancelVerdict.FINISHED]
    if recorded:
        cancels.cancel_jobs(recorded)
    if store is not None and waiting:
        store.write(waiting)
    return verdicts
