"""The producer: validates jobs against the queue set and publishes their envelopes."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from queuey_core.backends.base import Backend
from queuey_core.clock import Clock, SystemClock
from queuey_core.envelope import Envelope
from queuey_core.errors import InvalidPriorityError
from queuey_core.jobs import Job, job_identity
from queuey_core.queues import QueueSet


class Producer:
    """Enqueues jobs. Every check happens before anything is published."""

    def __init__(self, backend: Backend, queues: QueueSet, *, clock: Clock | None = None) -> None:
        self._backend = backend
        self._queues = queues
        self._clock: Clock = clock or SystemClock()
        backend.declare(list(queues.values()))

    def envelope(self, job: Job, *, priority: int | None = None) -> Envelope:
        """The first-attempt envelope of ``job``; see :func:`make_envelope`."""
        return make_envelope(
            job, self._queues, priority=priority, enqueued_at=self._clock.wall_ms()
        )

    def enqueue(
        self, job: Job, *, delay: float | None = None, priority: int | None = None
    ) -> uuid.UUID:
        """Publish one job (after ``delay`` seconds, if given); returns its job id."""
        _check_delay(delay)
        env = self.envelope(job, priority=priority)
        self._backend.publish(env, delay=delay)
        return env.job_id

    def enqueue_many(
        self, jobs: Iterable[Job], *, delay: float | None = None, priority: int | None = None
    ) -> list[uuid.UUID]:
        """Publish many jobs as one batch; every job is checked before any is published."""
        _check_delay(delay)
        envelopes = [self.envelope(job, priority=priority) for job in jobs]
        self._backend.publish_many([(env, delay) for env in envelopes])
        return [env.job_id for env in envelopes]


def make_envelope(
    job: Job, queues: QueueSet, *, priority: int | None = None, enqueued_at: int
) -> Envelope:
    """The first-attempt envelope of ``job``, checked against its queue; no I/O.

    Raises:
        UnknownQueueError: the job's queue is not in the queue set.
        InvalidPriorityError: the priority is above what the queue supports.
    """
    _, queue_name = job_identity(type(job))
    config = queues[queue_name]
    prio = priority or 0
    if prio < 0 or prio > config.top_priority:
        raise InvalidPriorityError(queue_name, prio, config.max_priority)
    return Envelope.for_job(job, enqueued_at=enqueued_at, priority=prio)


def _check_delay(delay: float | None) -> None:
    if delay is not None and delay < 0:
        raise ValueError("a delay cannot be negative")
