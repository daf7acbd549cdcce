"""The producer: validates jobs against the queue set and publishes their envelopes.

What an ``enqueue`` call can end with, and what each means for the job:

* it returns: the broker confirmed the job;
* :class:`~queuey_core.errors.EnqueueUnknownError`: the job was sent and not confirmed
  (publishers blocked by an alarm, no confirm within ``publish_timeout``, connection lost
  and not republished in time): it may or may not be on the broker;
* any other error: the job was not enqueued (it failed validation, the broker refused or
  could not route it, or it was never sent), so trying again cannot duplicate it.

:meth:`Producer.enqueue_raw` enqueues by job type name, for code bases that do not have
the job's class: the payload is only checked to be a JSON object and the envelope to fit
the wire; the worker still validates the payload against the job's model when it reads
it (and dead-letters one that does not fit).

A caller who retries after an unknown outcome should choose the job id (``job_id=``):
the retry then carries the id of the job that may be on the broker (a handler can tell).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from queuey_core.backends.base import Backend
from queuey_core.backends.capabilities import PublishesAhead, PublishesEncoded
from queuey_core.clock import Clock, SystemClock
from queuey_core.envelope import EncodedEnvelope, Envelope, json_string
from queuey_core.errors import EnqueueUnknownError, NotEnqueuedError
from queuey_core.first_attempts import (
    batch_ids,
    check_delay_given,
    json_object,
    make_envelope,
    make_raw_envelope,
)
from queuey_core.flow.unique_claims import UniqueClaims, encoded_mark
from queuey_core.job_ids import JOB_ID_NAMESPACE, JobId, job_id_for
from queuey_core.jobs import Job
from queuey_core.pending import PendingBatch, attribute
from queuey_core.queues import QueueSet
from queuey_core.trace_context import TraceContext
from queuey_core.tracing import producer_tracing
from queuey_core.uuid7 import uuid7

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from queuey_core.flow.unique import Unique
    from queuey_core.flow.unique_keys import UniqueKeys
    from queuey_core.results.producing import QueuedRecorder
    from queuey_core.results.store import JobStore

__all__ = [
    "JOB_ID_NAMESPACE",
    "JobId",
    "PendingBatch",
    "Producer",
    "job_id_for",
    "json_object",
    "make_envelope",
    "make_raw_envelope",
]


class Producer:
    """Enqueues jobs. Every check happens before anything is published.

    With a tracer provider (``tracer_provider``, else OpenTelemetry's global one, when
    the ``otel`` extra is installed), each enqueue call is a PRODUCER span and its jobs
    carry its W3C trace context (``docs/tracing.md``); without one, nothing is traced.

    With a ``job_store``, published jobs are recorded as queued, in batches by a writer
    thread, or before each call returns with ``record_now`` (docs/results.md). Call
    :meth:`close` before the process ends to write what is waiting.

    Unique jobs (``UNIQUE``, or ``unique`` by job type name) have their keys claimed
    in ``unique_keys`` before they are published: see :class:`.UniqueClaims`.
    """

    def __init__(
        self,
        backend: Backend,
        queues: QueueSet,
        *,
        clock: Clock | None = None,
        tracer_provider: TracerProvider | None = None,
        job_store: JobStore | None = None,
        record_now: bool = False,
        unique_keys: UniqueKeys | None = None,
        unique: Mapping[str, Unique] | None = None,
    ) -> None:
        self._backend = backend
        #: Claims the keys of unique jobs; counts the duplicates (``unique.duplicates()``).
        self.unique = UniqueClaims.of(backend, unique_keys, unique)
        self._queues = queues
        self._clock: Clock = clock or SystemClock()
        # Looked for once: no provider, no per-job cost.
        self._tracing = producer_tracing(tracer_provider)
        backend.declare(list(queues.values()))
        #: What records this producer's jobs as queued (None without a job store).
        self.recorder: QueuedRecorder | None = None
        if job_store is not None:
            from queuey_core.results.producing import QueuedRecorder  # noqa: PLC0415

            self.recorder = QueuedRecorder(job_store, synchronous=record_now)

    def close(self) -> None:
        """Write the queued records still waiting; the backend stays (it is the caller's)."""
        if self.recorder is not None:
            self.recorder.close()

    def envelope(
        self, job: Job, *, priority: int | None = None, job_id: JobId | None = None
    ) -> Envelope:
        """The first-attempt envelope of ``job``; see :func:`make_envelope`."""
        return make_envelope(
            job, self._queues, priority=priority, enqueued_at=self._clock.wall_ms(), job_id=job_id
        )

    def enqueue(
        self,
        job: Job,
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_id: JobId | None = None,
    ) -> uuid.UUID:
        """Publish one job (after ``delay`` seconds, if given); returns its job id.

        ``job_id`` chooses the id (see :func:`job_id_for`); by default it is random.

        Raises:
            EnqueueUnknownError: the job may or may not be on the broker.
            NotEnqueuedError: the broker refused it, could not route it, or it was never
                sent. ConfigError and ValueError (bad job, priority, delay or id) too
                mean nothing was published.
            DuplicateJobError: another job holds its unique key; nothing was published.
        """
        check_delay_given(delay)
        env = self.envelope(job, priority=priority, job_id=job_id)
        env = self.unique.mark(env, type(job), job_id)
        self._publish(env, delay)
        if self.recorder is not None:
            self.recorder.enqueued([env])
        return env.job_id

    def enqueue_raw(
        self,
        job_type: str,
        payload: Mapping[str, Any],
        *,
        queue: str,
        priority: int | None = None,
        delay: float | None = None,
        job_id: JobId | None = None,
    ) -> uuid.UUID:
        """Publish one job by its type name, without its class; returns its job id.

        For producers that are not the workers' code base. ``payload`` must be a JSON
        object that survives encoding unchanged; nothing checks it against the job's
        model here: the worker does, and dead-letters a payload that does not fit
        ("decode error"), or a job type it has no handler for ("no handler").

        Raises:
            EnqueueUnknownError: the job may or may not be on the broker.
            NotEnqueuedError: the broker refused it, could not route it, or it was never
                sent. UnknownQueueError, InvalidPriorityError and ValueError (a payload
                that is not a JSON object, a job type or id that does not fit the wire,
                a bad delay) mean nothing was published.
        """
        check_delay_given(delay)
        env = make_raw_envelope(
            job_type,
            payload,
            self._queues,
            queue=queue,
            priority=priority,
            enqueued_at=self._clock.wall_ms(),
            job_id=job_id,
        )
        env = self.unique.mark(env, None, job_id)
        self._publish(env, delay)
        if self.recorder is not None:
            self.recorder.enqueued([env])
        return env.job_id

    def _publish(self, env: Envelope, delay: float | None) -> None:
        """Publish one envelope, its unique keys claimed first; see :meth:`_publish_one`."""
        if env.unique:
            self.unique.guarded(env, lambda: self._publish_one(env, delay), self._clock.wall_ms)
        else:
            self._publish_one(env, delay)

    def _publish_one(self, env: Envelope, delay: float | None) -> None:
        """Publish one envelope, in its PRODUCER span when tracing."""
        tracing = self._tracing
        try:
            if tracing is None:
                self._backend.publish(env, delay=delay)
            else:
                with tracing.publishing([env]) as trace:
                    self._backend.publish(env.with_trace(trace), delay=delay)
        except (NotEnqueuedError, EnqueueUnknownError) as exc:
            attribute(exc, [env.job_id])
            raise

    def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_ids: Sequence[JobId | None] | None = None,
    ) -> list[uuid.UUID]:
        """Publish many jobs as one batch; every job is checked before any is published.

        ``job_ids``, if given, holds one id per job (None: a random one). Returns the ids
        in order.

        Raises:
            EnqueueUnknownError: some may or may not be on the broker; the error lists
                the ``confirmed``, ``unknown`` and ``not_enqueued`` job ids.
            NotEnqueuedError: none is in doubt; ``not_enqueued`` lists those that did not
                make it, ``confirmed`` those that did.
        """
        pending = self.begin_enqueue_many(jobs, delay=delay, priority=priority, job_ids=job_ids)
        return pending.result()

    def begin_enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_ids: Sequence[JobId | None] | None = None,
    ) -> PendingBatch:
        """:meth:`enqueue_many` in two steps: every job is checked and handed to the
        backend now, and :meth:`PendingBatch.result` waits for the broker's answer.

        Batches are handed over in the order of the calls, so a caller can hand the next
        one over while the last one waits for its confirms: the broker never waits
        between batches, and the jobs reach their queues in order (``queuey enqueue
        --file`` does this). On a backend that cannot (not
        :class:`~queuey_core.backends.PublishesAhead`), and when tracing, the whole
        publish happens here and ``result`` reports it.

        Call ``result`` on every batch begun: it is what says the batch was confirmed,
        and when the producer has a job store, what records its jobs as queued.

        Raises (here, nothing published): ``ValueError``, ``UnknownQueueError`` and
        ``InvalidPriorityError`` for a job that cannot be sent. What the publish ends
        with is raised by ``result``.
        """
        check_delay_given(delay)
        jobs = list(jobs)
        ids = batch_ids(jobs, job_ids)
        if self.unique.applies(jobs, ids):  # keys claimed first, duplicates left out
            marked = [
                self.unique.mark(self.envelope(job, priority=priority, job_id=key), type(job), key)
                for job, key in zip(jobs, ids, strict=True)
            ]
            return self.unique.begin(
                marked,
                self._clock,
                lambda sent, more: self._hand_over(jobs, ids, sent, delay, priority, more),
            )
        return self._hand_over(jobs, ids, None, delay, priority, {})

    def _hand_over(
        self,
        jobs: list[Job],
        ids: Sequence[JobId | None],
        models: list[Envelope] | None,
        delay: float | None,
        priority: int | None,
        more: dict[str, Any],
    ) -> PendingBatch:
        """Publish a checked batch (``models``: its marked envelopes, else made here)."""
        backend = self._backend
        pending: dict[str, Any] = {"recorder": self.recorder, **more}
        # Traced, each message carries headers: the models' path, which writes them.
        if isinstance(backend, PublishesEncoded) and self._tracing is None:
            encoded = (
                self._encode_many(jobs, ids, priority)
                if models is None
                else [encoded_mark(env) for env in models]
            )
            items = [(env, delay) for env in encoded]
            try:
                if isinstance(backend, PublishesAhead):
                    return PendingBatch(encoded, wait=backend.publish_ahead(items), **pending)
                backend.publish_encoded(items)
            except (NotEnqueuedError, EnqueueUnknownError) as exc:
                return PendingBatch(encoded, error=exc, **pending)
            return PendingBatch(encoded, **pending)
        if models is None:
            models = [
                self.envelope(job, priority=priority, job_id=job_id)
                for job, job_id in zip(jobs, ids, strict=True)
            ]
        error = None
        try:
            with self._span(models) as trace:
                if trace is not None:
                    models = [env.with_trace(trace) for env in models]
                backend.publish_many([(env, delay) for env in models])
        except (NotEnqueuedError, EnqueueUnknownError) as exc:
            error = exc
        return PendingBatch(models, error=error, **pending)

    def check_many(
        self,
        jobs: Sequence[Job],
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_ids: Sequence[JobId | None] | None = None,
    ) -> list[uuid.UUID]:
        """Every check :meth:`enqueue_many` makes, nothing published; the batch's job ids
        (a random one for each job without ``job_ids``), to publish it in parts with.

        For a caller that publishes a batch in slices and must not publish the first
        if a later one would be refused (:class:`~queuey_core.aio.AsyncProducer`).

        Raises:
            ValueError, UnknownQueueError, InvalidPriorityError: as ``enqueue_many``.
        """
        check_delay_given(delay)
        ids = [uuid7() if key is None else job_id_for(key) for key in batch_ids(jobs, job_ids)]
        # The checks of the batch path itself (the first job of each type in full, the
        # JSON of the others), not a copy of them; the encoded jobs are dropped.
        self._encode_many(list(jobs), ids, priority)
        return ids

    @contextlib.contextmanager
    def _span(
        self, envelopes: Sequence[Envelope | EncodedEnvelope]
    ) -> Iterator[TraceContext | None]:
        """A batch's PRODUCER span when tracing (the context its jobs carry), else None."""
        if self._tracing is None:
            yield None
            return
        with self._tracing.publishing(envelopes) as trace:
            yield trace

    def _encode_many(
        self, jobs: list[Job], ids: Sequence[JobId | None], priority: int | None
    ) -> list[EncodedEnvelope]:
        """The first-attempt envelopes of ``jobs``, encoded, every one checked.

        The first job of each type gets a real :class:`Envelope` (:meth:`envelope`),
        which runs every check the model has (queue, priority, names, id); what varies
        from one job of a type to the next (its id, time and payload) is checked or
        made here. The others are encoded straight from the job's own JSON, which is
        what makes a batch fast: no model to build and validate per job.
        """
        kinds: dict[type[Job], tuple[str, str, tuple[bytes, bytes], int]] = {}
        wall_ms = self._clock.wall_ms
        # The random ids' bytes in one read of the OS's random source, not one per job.
        entropy = os.urandom(16 * len(jobs))
        out: list[EncodedEnvelope] = []
        for i, (job, key) in enumerate(zip(jobs, ids, strict=True)):
            kind = kinds.get(type(job))
            if kind is None:
                env = self.envelope(job, priority=priority, job_id=key)
                names = (json_string(env.job_type), json_string(env.queue))
                kinds[type(job)] = (env.job_type, env.queue, names, env.priority)
                out.append(
                    EncodedEnvelope(
                        env.job_id,
                        env.job_type,
                        env.queue,
                        env.priority,
                        env.enqueued_at,
                        env.encode(),
                    )
                )
                continue
            name, queue, names, prio = kind
            # The body and a fresh id are left to the backend (see EncodedEnvelope); what
            # can fail (the id given, the payload's JSON) is done before any is published.
            out.append(
                EncodedEnvelope(
                    None if key is None else job_id_for(key),
                    name,
                    queue,
                    prio,
                    wall_ms(),
                    names=names,
                    payload=job.__pydantic_serializer__.to_json(job),
                    entropy=entropy[16 * i : 16 * i + 16],
                )
            )
        return out
