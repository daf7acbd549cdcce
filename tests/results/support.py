"""Helpers of the job-store tests: a worker that records, and a way to wait on the store."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Iterable

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core import WorkerHooks
from queuey_core.results import JobRecord
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from tests.support import Greet
from tests.support import wait_for


def recording_worker(
    backend: MemoryBackend,
    queues: QueueSet,
    clock: ManualClock,
    greet: Callable[[Greet, JobContext], object],
    recorder: JobRecorder,
    *,
    hooks: Iterable[WorkerHooks] = (),
    job_timeout: float | None = None,
) -> Worker:
    """A worker of ``greet`` that records into ``recorder``'s store."""
    return Worker(
        backend,
        queues,
        [Handler(Greet, greet)],
        concurrency=2,
        clock=clock,
        hooks=[recorder, *hooks],
        job_timeout=job_timeout,
    )


def settled_record(
    store: JobStore, job_id: uuid.UUID, clock: ManualClock | None, state: JobState
) -> JobRecord:
    """Wait (advancing ``clock``) until the store has ``job_id`` in ``state``."""

    def there() -> bool:
        record = store.get(job_id)
        return record is not None and record.state is state

    wait_for(there, clock)
    record = store.get(job_id)
    assert record is not None
    return record
