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
from typing import Any, Generic, TypeVar

from queuey_core.context import JobContext
from queuey_core.envelope import Envelope
from queuey_core.errors import Deferred, Fatal, JobCancelled, Retryable
from queuey_core.handlers import Handler, JobHandler, is_async
from queuey_core.jobs import Job
from queuey_core.testing.gate import Key
from queuey_core.testing.limits import Held
from queuey_core.worker.hooks import JobInfo, WorkerHooks

J = TypeVar("J", bound=Job)


class Status(enum.Enum):
    """How a job's run ended, as the worker settled it."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    DEFERRED = "deferred"
    DEAD_LETTERED = "dead-lettered"
    CANCELLED = "cancelled"
    WAITED = "waited"
    PARKED = "parked"


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One run of one job, as the worker ended it.

    ``reason`` is the error text (retried), the deferral's reason (deferred), or the
    reason the dead letter carries (dead-lettered); ``delay`` the seconds until the job
    comes back (retried, deferred); ``result`` what a successful handler returned;
    ``error`` the exception the handler raised, if it raised one (with its traceback).
    A job a limit did not let start (waited, parked) never ran and spent no attempt;
    ``limit`` names the limit.
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
    limit: str = ""

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

    @property
    def waited(self) -> bool:
        """Whether a rate limit (or its store out of reach) made the job wait ``delay``
        seconds: deferred unrun, its attempt and priority kept."""
        return self.status is Status.WAITED

    @property
    def parked(self) -> bool:
        """Whether a full concurrency limit parked the job (acked unrun, kept with the
        limit's state until a slot of its key frees and lets it go)."""
        return self.status is Status.PARKED


@dataclass(frozen=True, slots=True)
class Enqueued(Generic[J]):
    """A job waiting to run: its typed job, and what its envelope says.

    ``delay`` is the seconds of clock time until it is due (0 when it is ready): a delayed
    enqueue, a retry's backoff or a deferral.
    """

    job: J
    job_id: uuid.UUID
    queue: str
    priority: int
    attempt: int
    deferrals: int
    delay: float
    envelope: Envelope


@dataclass
class Running:
    """A job :meth:`QueueyKit.running` holds at its start; ``outcome`` once it ended."""

    job_id: uuid.UUID
    outcome: JobOutcome | None = None


#: Real seconds between two looks of a held handler at its hold.
HOLD_POLL = 0.005

#: Exceptions a handler raises on purpose: outcomes to assert on, never re-raised.
SIGNALS: tuple[type[BaseException], ...] = (Retryable, Fatal, Deferred, JobCancelled)


@dataclass(frozen=True, slots=True)
class Hold:
    """A handler held at its start (:meth:`~queuey_core.testing.QueueyKit.running`):
    ``started`` once it is there, and it goes on once ``go`` is set."""

    started: threading.Event
    go: threading.Event


class OutcomeRecorder(WorkerHooks):
    """A worker hook that keeps each job event's outcome, and the exception a handler
    raised, by ledger key; and the holds the kit puts on handlers' starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[Key, JobOutcome] = {}
        self._timed_out: set[Key] = set()
        self._errors: dict[Key, BaseException] = {}
        self._holds: dict[Key, Hold] = {}

    def hold(self, key: Key) -> Hold:
        """Hold the handler of the attempt ``key`` at its start."""
        with self._lock:
            made = self._holds[key] = Hold(threading.Event(), threading.Event())
            return made

    def take_hold(self, key: Key) -> Hold | None:
        """The hold on the attempt ``key``, if there is one (taken: it holds once)."""
        with self._lock:
            return self._holds.pop(key, None)

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


def held_outcome(envelope: Envelope, held: Held) -> JobOutcome:
    """The outcome of a job a limit did not let start."""
    return JobOutcome(
        job_id=envelope.job_id,
        job_type=envelope.job_type,
        queue=envelope.queue,
        attempt=envelope.attempt,
        deferrals=envelope.deferrals,
        status=Status.PARKED if held.parked else Status.WAITED,
        reason=held.reason,
        delay=None if held.parked else held.delay,
        ran=False,
        limit=held.limit,
    )


def catching(handler: JobHandler, recorder: OutcomeRecorder) -> JobHandler:
    """``handler``, keeping what it raises in ``recorder`` before raising it again (an
    ``async def`` handler stays one, so the worker runs it on its event loop)."""
    fn: Callable[..., Any] = handler

    def keep(ctx: JobContext, exc: BaseException) -> None:
        recorder.keep_error((ctx.job_id, ctx.attempt, ctx.deferrals), exc)

    def held(ctx: JobContext) -> Hold | None:
        hold = recorder.take_hold((ctx.job_id, ctx.attempt, ctx.deferrals))
        if hold is not None:
            hold.started.set()
        return hold

    if is_async(handler):

        @functools.wraps(fn)
        async def run_async(job: Job, ctx: JobContext) -> object:
            __tracebackhide__ = True  # pytest shows the handler's frames, not this one
            try:
                hold = held(ctx)
                if hold is not None:
                    import asyncio  # noqa: PLC0415 - only a held async handler needs it

                    while not hold.go.is_set():
                        await asyncio.sleep(HOLD_POLL)
                return await _awaitable(fn(job, ctx))
            except BaseException as exc:
                keep(ctx, exc)
                raise

        return Handler(handler.job_type, run_async)

    @functools.wraps(fn)
    def run(job: Job, ctx: JobContext) -> object:
        __tracebackhide__ = True  # pytest shows the handler's frames, not this one
        try:
            hold = held(ctx)
            # In slices: a job timeout's asynchronous exception still lands.
            while hold is not None and not hold.go.wait(HOLD_POLL):
                pass
            return fn(job, ctx)
        except BaseException as exc:
            keep(ctx, exc)
            raise

    return Handler(handler.job_type, run)


def _awaitable(value: Any) -> Awaitable[object]:
    return value  # type: ignore[no-any-return]
