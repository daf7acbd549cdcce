"""Recording that jobs were enqueued: the ``queued`` state, written by the producer.

Owns: :func:`record_enqueued`, a synchronous write (an enqueue from the command line
ends right after), and :class:`QueuedRecorder`, what a library
:class:`~queuey_core.Producer` given a job store uses: by default it hands the jobs to a
writer thread (a :class:`~queuey_core.results.JobRecorder`'s), so an enqueue never waits
on the store. Neither ever fails an enqueue: the job is on the broker whatever the store
says; a store that refuses is logged and counted.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from queuey_core.errors import QueueyError
from queuey_core.results.recording import JobRecorder
from queuey_core.results.records import JobEvent, JobState
from queuey_core.results.store import JobStore

logger = logging.getLogger(__name__)


def record_enqueued(
    store: JobStore, jobs: Sequence[tuple[uuid.UUID, str, str]]
) -> QueueyError | None:
    """Record ``(job_id, job_type, queue)`` of jobs just enqueued as queued; the store's
    error, logged, when it refused (the jobs are enqueued all the same)."""
    now = int(time.time() * 1000)
    events = [JobEvent(j, t, q, JobState.QUEUED, at=now, enqueued_at=now) for j, t, q in jobs]
    try:
        store.write(events)
    except QueueyError as exc:
        logger.warning("enqueued, but not recorded as queued: %s", exc)
        return exc
    return None


class _Enqueued(NamedTuple):
    """What the writer reads of a job just enqueued (an envelope, or its encoded form,
    which has no ``attempt``)."""

    job_id: uuid.UUID
    job_type: str
    queue: str
    enqueued_at: int
    attempt: int = 1


class QueuedRecorder:
    """Records a producer's jobs as queued in ``store``, once they are enqueued.

    By default through a writer thread, in batches: an enqueue only appends to a queue
    (events the writer cannot keep up with, or the store refuses, are counted in
    :attr:`unrecorded` and logged). ``synchronous=True`` writes before the enqueue
    returns instead: a reader then finds the record at once, at the price of a store
    write per enqueue call.
    """

    def __init__(self, store: JobStore, *, synchronous: bool = False) -> None:
        self._store = store
        self._writer: JobRecorder | None = None
        self._failed = 0
        if not synchronous:
            self._writer = JobRecorder(store)
            self._writer.start()

    @property
    def unrecorded(self) -> int:
        """Jobs enqueued but not recorded as queued so far."""
        return self._failed + (self._writer.unrecorded if self._writer is not None else 0)

    def enqueued(self, jobs: Iterable[Any]) -> None:
        """Record ``jobs`` (envelopes just published) as queued."""
        rows = [_Enqueued(j.job_id, j.job_type, j.queue, j.enqueued_at) for j in jobs]
        if self._writer is not None:
            self._writer.record_queued(rows)
        elif record_enqueued(self._store, [(r.job_id, r.job_type, r.queue) for r in rows]):
            self._failed += len(rows)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is waiting (up to ``timeout`` seconds), then stop the writer."""
        if self._writer is not None:
            self._writer.stop(timeout=timeout)
