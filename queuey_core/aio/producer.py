"""The asyncio producer: ``await producer.enqueue(job)`` from a web app's request handler.

:class:`AsyncProducer` keeps every promise of :class:`~queuey_core.producer.Producer`
(the same checks before anything is published, the same outcomes, duplicates of unique
jobs included, the same errors; see :mod:`queuey_core.producer`), and never blocks the
event loop that awaits it: the publish and its confirm wait run on threads of the
producer's own, so a batch of ten thousand jobs is confirmed while the loop goes on
serving requests. One instance is safe to share across tasks (and loops), and ``async
with`` closes it.

A large batch is encoded and published in slices (:data:`SLICE` jobs, each under a
millisecond of work), and the loop gets the interpreter back between two slices: a
thread that kept it for the whole batch would make the loop wait up to the
interpreter's switch interval (5 ms) at every turn. A batch keeps the outcome of one
call: every job is checked before any is published; if a slice fails, the slices after
it are not sent, and the error lists what was confirmed, what is in doubt and what was
not enqueued, across the whole batch. Duplicates of a slice do not stop the others: the
batch then ends with one DuplicateJobError listing them all, and every job confirmed.

Owns: moving the producer's work off the loop, and closing. Must never: call the
backend on the loop's thread, or lose track of a job of a batch (each is confirmed,
unknown or not enqueued, and the error says which).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from queuey_core.backends.base import Backend
from queuey_core.clock import Clock
from queuey_core.errors import (
    DuplicateJobError,
    EnqueueUnknownError,
    NotEnqueuedError,
    QueueyError,
)
from queuey_core.jobs import Job
from queuey_core.producer import JobId, Producer
from queuey_core.queues import QueueSet

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from queuey_core.flow.unique import Unique
    from queuey_core.flow.unique_keys import UniqueKeys
    from queuey_core.results.store import JobStore

T = TypeVar("T")

#: A batch larger than this is published in slices.
SLICE = 500
#: The first slice's size; the next ones are sized to take about SLICE_CPU seconds of
#: the publishing thread's CPU (which it holds the interpreter for), within the bounds.
FIRST_SLICE = 50
SLICE_CPU = 0.001
MIN_SLICE = 20
MAX_SLICE = 5000
#: Threads publishing at once (each waits on the broker's confirms, not on the CPU).
THREADS = 4


class AsyncProducer:
    """Enqueues jobs from asyncio code without blocking its event loop.

    Args:
        backend: where jobs go (declared on construction, on the caller's thread: make
            the producer at start-up, before the loop serves requests).
        queues: the application's queue set.
        clock: time source for timestamps.
        tracer_provider: as :class:`~queuey_core.producer.Producer`'s.
        job_store: record published jobs as queued there, as a ``Producer`` given one
            does (by a writer thread in batches; :meth:`aclose` writes what waits).
        record_now: write each call's records before it returns (on the producer's
            threads, never on the loop).
        close_backend: close the backend too in :meth:`aclose` (off by default: a
            backend is often shared).
        unique_keys, unique: as :class:`~queuey_core.producer.Producer`'s (unique jobs).
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
        close_backend: bool = False,
        unique_keys: UniqueKeys | None = None,
        unique: Mapping[str, Unique] | None = None,
    ) -> None:
        self._producer = Producer(
            backend,
            queues,
            clock=clock,
            tracer_provider=tracer_provider,
            job_store=job_store,
            record_now=record_now,
            unique_keys=unique_keys,
            unique=unique,
        )
        self._backend = backend
        self._close_backend = close_backend
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=THREADS, thread_name_prefix="queuey-aio-producer"
        )
        self._closed = False

    @property
    def producer(self) -> Producer:
        """The blocking producer underneath (for code that runs on threads)."""
        return self._producer

    async def enqueue(
        self,
        job: Job,
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_id: JobId | None = None,
    ) -> uuid.UUID:
        """:meth:`Producer.enqueue <queuey_core.producer.Producer.enqueue>`, awaited: the
        job's id once the broker confirmed it, or the same errors."""
        return await self._run(
            self._producer.enqueue, job, delay=delay, priority=priority, job_id=job_id
        )

    async def enqueue_raw(
        self,
        job_type: str,
        payload: Mapping[str, Any],
        *,
        queue: str,
        priority: int | None = None,
        delay: float | None = None,
        job_id: JobId | None = None,
    ) -> uuid.UUID:
        """:meth:`Producer.enqueue_raw <queuey_core.producer.Producer.enqueue_raw>`,
        awaited."""
        return await self._run(
            self._producer.enqueue_raw,
            job_type,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            job_id=job_id,
        )

    async def enqueue_many(
        self,
        jobs: Iterable[Job],
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_ids: Sequence[JobId | None] | None = None,
    ) -> list[uuid.UUID]:
        """:meth:`Producer.enqueue_many <queuey_core.producer.Producer.enqueue_many>`,
        awaited: the ids in order, or the same errors, which list the ``confirmed``,
        ``unknown`` and ``not_enqueued`` job ids of the whole batch.

        Every job is checked before any is published (a batch of more than
        :data:`SLICE` by :meth:`Producer.check_many
        <queuey_core.producer.Producer.check_many>` on a thread, then sent in slices).
        """
        jobs = list(jobs)
        if len(jobs) <= SLICE:
            return await self._run(
                self._producer.enqueue_many,
                jobs,
                delay=delay,
                priority=priority,
                job_ids=job_ids,
            )
        # Checked before the first slice is published (a bad job in the last one must
        # not leave the first ones enqueued), and the ids chosen: an error must name the
        # jobs never sent.
        ids: list[uuid.UUID] = await self._run(
            self._producer.check_many, jobs, delay=delay, priority=priority, job_ids=job_ids
        )
        confirmed: list[uuid.UUID] = []
        duplicates: dict[uuid.UUID, uuid.UUID] = {}
        size = FIRST_SLICE
        start = 0
        while start < len(jobs):
            part, part_ids = jobs[start : start + size], ids[start : start + size]
            try:
                done, cpu = await self._run(self._publish_slice, part, part_ids, delay, priority)
            except DuplicateJobError as exc:  # the slice's others are confirmed
                done, cpu = list(exc.confirmed), None  # (its CPU unknown: size kept)
                duplicates.update(exc.duplicates)
            except (NotEnqueuedError, EnqueueUnknownError) as exc:
                exc.with_jobs(
                    confirmed=[*confirmed, *exc.confirmed],
                    unknown=exc.unknown,
                    not_enqueued=[*exc.not_enqueued, *ids[start + len(part) :]],
                )
                exc.duplicates = {**duplicates, **exc.duplicates}
                raise
            confirmed += done
            start += len(part)
            if cpu is not None:
                # The next slice sized to take the publishing thread about SLICE_CPU of CPU.
                per_job = cpu / len(part)
                size = int(
                    min(MAX_SLICE, max(MIN_SLICE, SLICE_CPU / per_job if per_job else MAX_SLICE))
                )
        if duplicates:
            raise DuplicateJobError(duplicates, confirmed=confirmed)
        return confirmed

    def _publish_slice(
        self,
        jobs: list[Job],
        ids: Sequence[JobId | None],
        delay: float | None,
        priority: int | None,
    ) -> tuple[list[uuid.UUID], float]:
        """On a producer thread: publish one slice; its ids and the CPU it took."""
        cpu = time.thread_time()
        done = self._producer.enqueue_many(jobs, delay=delay, priority=priority, job_ids=ids)
        return done, time.thread_time() - cpu

    async def aclose(self) -> None:
        """Wait for the enqueues under way, write the queued records still waiting (with
        a ``job_store``), then stop the threads (and the backend, if ``close_backend``).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def _close(self) -> None:
        self._threads.shutdown(wait=True)
        self._producer.close()  # the queued records still waiting, if it has a store
        if self._close_backend:
            self._backend.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise QueueyError("the producer is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: call(*args, **kwargs))
