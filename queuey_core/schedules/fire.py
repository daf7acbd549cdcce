"""Enqueueing a firing under the job id its tick dictates.

A firing is an ordinary first attempt whose job id is the tick's, so that a firing
repeated around a hand-over carries the same id.
"""

from __future__ import annotations

import uuid

from queuey_core.backends.base import Backend
from queuey_core.envelope import Envelope
from queuey_core.jobs import Job
from queuey_core.producer import make_envelope
from queuey_core.queues import QueueSet


def enqueue_with_id(
    backend: Backend,
    queues: QueueSet,
    job: Job,
    *,
    job_id: uuid.UUID,
    priority: int | None,
    enqueued_at: int,
) -> Envelope:
    """Publish ``job`` as an ordinary first attempt, with ``job_id``; returns its envelope.

    Raises:
        ConfigError: the job's queue or the priority does not fit the queue set.
        BackendError: the broker did not take it.
    """
    envelope = make_envelope(job, queues, priority=priority, enqueued_at=enqueued_at, job_id=job_id)
    backend.publish(envelope)
    return envelope
