"""Recording that jobs were enqueued: the ``queued`` state, written by the producer.

Owns: :func:`record_enqueued`. The write is synchronous (an enqueue from the command
line ends right after) and never fails an enqueue: the job is on the broker whatever
the store says; a store that refuses is logged and the error returned.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from queuey_core.errors import QueueyError
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
