"""What a test is told of a job the kit ran: :class:`JobOutcome`, and how it is heard.

The worker's own hooks tell the outcome (:class:`OutcomeRecorder`), so a test sees what
a worker's hooks, metrics and job store see. Handlers are wrapped (:func:`catching`) only
to keep the exception a handler raised, with its traceback, so that the kit can raise it
again in the test: the wrapper re-raises at once, and the worker classifies it as it
would any other.

Owns: the outcome value and the exceptions kept per attempt. Must never: change how the
worker classifies or settles a job.
"""

from __future__ import annotations

import enum
import functools
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from queuey_core.context import JobContext
from queuey_core.errors import Deferred, Fatal, JobCancelled, Retryable
from queuey_core.handlers import Handler, JobHandler, is_async
from queuey_core.jobs import Job
from queuey_core.testing.gate import Key
from queuey_core.worker.hooks import JobInfo, WorkerHooks


class Status(enum.Enum):
    """How a job's run ended, as the worker settled it."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEFERRED = "deferred"
    DEAD_LETTERED = "dead-lettered"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One run of one job, as the worker ended it.

    ``reason`` is the error text (retried), the deferral's reason (deferred), or the
    reason the dead letter carries (dead-lettered); ``delay`` the seconds until the job
    comes back (retried, deferred); ``result`` what a successful handler returned;
    ``error`` the exception the handler raised, if it raised one (with its traceback).
    """

    job_id: uuid.UUID
    job_type: str
    queue: str
    attempt: int
    deferrals: int
    status: Status
    reason: str = ""
    delay: float | None = None
    result: Any = None
    timed_out: bool = False
    ran: bool = True
    error: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the handler returned and the job was acked."""
        return self.status is Status.SUCCEEDED

    @property
    def retried(self) -> bool:
        """Whether the job failed and comes back for another attempt after ``delay``."""
        return self.status is Status.RETRIED

    @property
    def deferred(self) -> bool:
        """Whether the handler deferred the job for ``delay`` seconds."""
        return self.status is Status.DEFERRED

    @property
    def dead_lettered(self) -> bool:
        """Whether the job went to its dead-letter queue (``reason`` says why)."""
        return self.status is Status.DEAD_LETTERED

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled (before it ran, or while it ran)."""
        return self.status is Status.CANCELLED


#: Exceptions a handler raises on purpose: outcomes to assert on, never re-raised.
SIGNALS: tuple[type[BaseException], ...] = (Retryable, Fatal, Deferred, JobCancelled)


class OutcomeRecorder(WorkerHooks):
    """A worker hook that keeps each job event's outcome, and the exception a handler
    raised, by ledger key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[Key, JobOutcome] = {}
        self._timed_out: set[Key] = set()
        self._errors: dict[Key, BaseException] = {}

    def outcome(self, key: Key) -> JobOutcome | None:
        """The outcome of the attempt ``key``, once the worker decided it."""
        with self._lock:
            return self._outcomes.get(key)

    def keep_error(self, key: Key, exc: BaseException) -> None:
        """The exception the handler of ``key`` raised (see :func:`catching`)."""
        with self._lock:
            self._errors[key] = exc

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_succeeded`."""
        self._keep(job, Status.SUCCEEDED, "", result=job.result)

    def on_job_failed(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_failed`."""
        self._keep(job, Status.RETRIED, job.error, delay=job.delay)

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_deferred`."""
        self._keep(job, Status.DEFERRED, job.reason, delay=job.delay)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_dead_lettered`."""
        self._keep(job, Status.DEAD_LETTERED, job.reason)

    def on_job_cancelled(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_cancelled`."""
        self._keep(job, Status.CANCELLED, job.reason or job.error)

    def on_job_timed_out(self, job: JobInfo) -> None:
        """See :meth:`WorkerHooks.on_job_timed_out`."""
        with self._lock:
            self._timed_out.add((job.job_id, job.attempt, job.deferrals))

    def _keep(
        self,
        job: JobInfo,
        status: Status,
        reason: str,
        *,
        delay: float | None = None,
        result: object = None,
    ) -> None:
        key = (job.job_id, job.attempt, job.deferrals)
        with self._lock:
            self._outcomes[key] = JobOutcome(
                job_id=job.job_id,
                job_type=job.job_type,
                queue=job.queue,
                attempt=job.attempt,
                deferrals=job.deferrals,
                status=status,
                reason=reason,
                delay=delay,
                result=result,
                timed_out=key in self._timed_out,
                ran=job.duration is not None,
                error=self._errors.pop(key, None),
            )


def catching(handler: JobHandler, recorder: OutcomeRecorder) -> JobHandler:
    """``handler``, keeping what it raises in ``recorder`` before raising it again (an
    ``async def`` handler stays one, so the worker runs it on its event loop)."""
    fn: Callable[..., Any] = handler

    def keep(ctx: JobContext, exc: BaseException) -> None:
        recorder.keep_error((ctx.job_id, ctx.attempt, ctx.deferrals), exc)

    if is_async(handler):

        @functools.wraps(fn)
        async def run_async(job: Job, ctx: JobContext) -> object:
            __tracebackhide__ = True  # pytest shows the handler's frames, not this one
            try:
                return await _awaitable(fn(job, ctx))
            except BaseException as exc:
                keep(ctx, exc)
                raise

        return Handler(handler.job_type, run_async)

    @functools.wraps(fn)
    def run(job: Job, ctx: JobContext) -> object:
        __tracebackhide__ = True  # pytest shows the handler's frames, not this one
        try:
            return fn(job, ctx)
        except BaseException as exc:
            keep(ctx, exc)
            raise

    return Handler(handler.job_type, run)


def _awaitable(value: Any) -> Awaitable[object]:
    return value  # type: ignore[no-any-return]
