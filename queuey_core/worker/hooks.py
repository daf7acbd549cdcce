"""Lifecycle hooks: what a library user (or queuey's own metrics) is told as jobs run.

Subclass :class:`WorkerHooks`, override the methods you need (every one is a no-op), and
give instances to ``Worker(..., hooks=[...])``. Job events carry a frozen
:class:`JobInfo`; worker events carry the :class:`~queuey_core.worker.Worker` itself,
typed as :class:`RunningWorker` (what a hook may read of it: the worker imports this
module, so this module does not import the worker).

Owns: the hook protocol, the info handed to hooks, and :class:`HookRunner`, which calls
every hook in order and times each job. Must never: let a hook's exception (or its
return value) reach the worker: a hook that raises is logged and skipped, and the job's
outcome stays what the handler made it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from queuey_core.backends.base import Delivery
from queuey_core.clock import Clock
from queuey_core.worker.end_guard import SettleGuard, guards_of
from queuey_core.worker.running import RunningWorker

logger = logging.getLogger(__name__)


class EnvelopeSink(Protocol):
    """A hook that takes job events as the envelope itself (the job store's recorder),
    so that no :class:`JobInfo` is built for it: a worker calls this for every job.

    A hook is taken as a sink when it has ``takes_envelopes = True``; its ``on_job_*``
    methods are then not called by a worker (they stay for callers of their own).
    """

    takes_envelopes: bool

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        """``event`` is the ``on_job_*`` name without its prefix (``started``,
        ``succeeded``, ...); ``text`` the error (failed) or the reason (the others);
        ``ran``: the handler ran; ``result`` what it returned (succeeded only). A job's
        start and end carry the same envelope object (its delivery's)."""


class EventCounts(Protocol):
    """What :class:`HookRunner` tells the control channel's counts
    (:class:`~queuey_core.control.responder.JobCounts`) of every event."""

    def on_worker_starting(self, worker: RunningWorker) -> None: ...
    def on_worker_consuming(self, worker: RunningWorker) -> None: ...
    def on_worker_draining(self, worker: RunningWorker) -> None: ...
    def on_worker_stopped(self, worker: RunningWorker) -> None: ...

    def count(self, event: str, *, ran: bool) -> None:
        """Count one job event; ``ran``: its handler ran."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job event, as hooks see it.

    ``job_type`` and ``queue`` are what the message says: for a message with no handler
    they can be anything a sender wrote, so do not use them as unbounded labels.
    """

    job_id: uuid.UUID
    job_type: str
    queue: str
    attempt: int
    deferrals: int
    priority: int
    enqueued_at: int
    """Milliseconds since the Unix epoch when the job was first enqueued (a retry or a
    deferral keeps it)."""
    age: float
    """Seconds from ``enqueued_at`` to this event, on the worker's clock (never < 0)."""
    duration: float | None = None
    """Seconds the handler ran; None when it never ran (no handler, bad payload) and in
    :meth:`WorkerHooks.on_job_started`."""
    error: str = ""
    """What failed: the exception's text (failed, timed out, dead-lettered after one)."""
    reason: str = ""
    """Why: a deferral's reason, or the reason a dead letter carries."""
    delay: float | None = None
    """Seconds until the job comes back: a retry's backoff, a deferral's delay."""
    result: Any = None
    """What the handler returned (:meth:`WorkerHooks.on_job_succeeded` only)."""


class WorkerHooks:
    """Called as a worker runs; override what you need, every method is a no-op.

    Job events run on the job's thread (an ``async def`` job's on a settle thread, or
    on the event loop for a success acked early), in the order the hooks were given,
    before the settle they announce is sent to the broker (a settle the broker then refuses is
    counted in :meth:`WorkerHandle.settle_failures`, and the job will come back). Keep
    them quick: the job's slot is held while they run. A hook that raises is logged
    (``queuey_core.worker.hooks``) and skipped; nothing else changes.

    Every job that starts ends in exactly one of succeeded, failed (retried), deferred,
    dead-lettered or cancelled; a timed-out job also gets :meth:`on_job_timed_out`
    first. A message that never reaches a handler (no handler for its type, a payload
    that does not fit, a job cancelled before it ran) gets only its
    :meth:`on_job_dead_lettered` or :meth:`on_job_cancelled`.
    """

    def on_worker_starting(self, worker: RunningWorker) -> None:
        """``run()`` began, on the run loop's thread; consumers are not started yet."""

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """Every consumer is started and the job threads run: jobs are being taken."""

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """Shutdown began (or a consumer ended): no new jobs, the pulled ones finish."""

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        """``run()`` is about to return (or raise); every job thread has ended."""

    def on_job_started(self, job: JobInfo) -> None:
        """The handler is about to run (its payload fitted the job model)."""

    def on_job_succeeded(self, job: JobInfo) -> None:
        """The handler returned: the job is acked."""

    def on_job_failed(self, job: JobInfo) -> None:
        """The handler failed (or timed out) and the job is retried after ``job.delay``."""

    def on_job_deferred(self, job: JobInfo) -> None:
        """The handler deferred the job for ``job.delay`` seconds (``job.reason``)."""

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """The job goes to its dead-letter queue with ``job.reason``: fatal, out of
        attempts, no handler, or a payload that does not fit."""

    def on_job_timed_out(self, job: JobInfo) -> None:
        """The job outlived its timeout; its failed or dead-lettered event follows."""

    def on_job_cancelled(self, job: JobInfo) -> None:
        """The job was cancelled (``queuey cancel``): acked without running (``duration``
        None), or its handler stopped with :class:`~queuey_core.errors.JobCancelled`."""


class HookRunner:
    """Calls every hook, guarded, and times each job from its start to its outcome.

    Internal: the worker holds one, the dispatcher and the run loop call it. With no
    hooks every call returns at once. An event goes only to the hooks that override its
    method (the others are no-ops), and its :class:`JobInfo` is built only when one does:
    a worker calls these for every job. ``counts`` (the control channel's) is told of
    every event as a last hook would be, but through :meth:`JobCounts.count`, which
    needs no JobInfo.
    """

    def __init__(
        self, hooks: Iterable[WorkerHooks], clock: Clock, *, counts: EventCounts | None = None
    ) -> None:
        self._hooks = tuple(hooks)
        self._clock = clock
        self._counts = counts
        sinks = [h for h in self._hooks if getattr(h, "takes_envelopes", False) is True]
        self._sinks = tuple(cast(EnvelopeSink, h) for h in sinks)
        #: The hooks that record starts and ends before the worker acts (:mod:`.end_guard`).
        self.guards: tuple[SettleGuard, ...] = guards_of(self._hooks)
        others = tuple(h for h in self._hooks if not any(h is s for s in sinks))
        self._calls = {
            name: _overriding(self._hooks if name in _WORKER_EVENTS else others, name)
            for name in _EVENTS
        }
        # Timing is needed as soon as a job event has a hook: durations, and whether a
        # job ran for the counts. The clock is read only for the hooks that see durations.
        self._durations = any(self._calls[name] for name in _JOB_EVENTS)
        self._timed = counts is not None or bool(self._sinks) or self._durations
        # id(delivery) -> (delivery, monotonic start); the delivery is held so that its id
        # cannot be another's while the entry stands. No lock: a dict's item set, get and
        # pop are each atomic, and a delivery's end always follows its start.
        self._running: dict[int, tuple[Delivery, float]] = {}
        self._on_started = self._calls["on_job_started"]

    def __bool__(self) -> bool:
        return bool(self._hooks) or self._counts is not None

    # -- the run loop ----------------------------------------------------------------

    def worker_starting(self, worker: RunningWorker) -> None:
        self._call_all("on_worker_starting", worker)
        if self._counts is not None:
            self._counts.on_worker_starting(worker)

    def worker_consuming(self, worker: RunningWorker) -> None:
        self._call_all("on_worker_consuming", worker)
        if self._counts is not None:
            self._counts.on_worker_consuming(worker)

    def worker_draining(self, worker: RunningWorker) -> None:
        self._call_all("on_worker_draining", worker)
        if self._counts is not None:
            self._counts.on_worker_draining(worker)

    def worker_stopped(self, worker: RunningWorker) -> None:
        self._call_all("on_worker_stopped", worker)
        if self._counts is not None:
            self._counts.on_worker_stopped(worker)

    # -- the dispatcher ----------------------------------------------------------------

    def started(self, delivery: Delivery) -> None:
        """The handler of ``delivery`` is about to run."""
        if not self._timed:
            return
        start = self._clock.monotonic() if self._durations else 0.0
        self._running[id(delivery)] = (delivery, start)
        if self._on_started:
            self._call_all("on_job_started", self._info(delivery))
        for sink in self._sinks:  # inline, not a method: this runs for every job
            try:
                sink.job_event("started", delivery.envelope, True, "", None)
            except KeyboardInterrupt:
                raise
            except BaseException:  # a hook must never break the worker or the job
                _sink_failed(sink, "started", delivery)
        if self._counts is not None:
            self._counts.count("started", ran=True)

    def succeeded(self, delivery: Delivery, result: object = None) -> None:
        if self._timed:
            self._ended("succeeded", delivery, "", "", None, result)

    def failed(self, delivery: Delivery, error: str, delay: float) -> None:
        if self._timed:
            self._ended("failed", delivery, error, "", delay)

    def deferred(self, delivery: Delivery, reason: str, delay: float) -> None:
        if self._timed:
            self._ended("deferred", delivery, "", reason, delay)

    def dead_lettered(self, delivery: Delivery, reason: str, error: str = "") -> None:
        if self._timed:
            self._ended("dead_lettered", delivery, error, reason)

    def cancelled(self, delivery: Delivery, reason: str) -> None:
        if self._timed:
            self._ended("cancelled", delivery, "", reason)

    def timed_out(self, delivery: Delivery, error: str) -> None:
        """The job timed out; unlike the outcomes, this does not end its timing."""
        if not self._timed:
            return
        entry = self._running.get(id(delivery))
        if self._calls["on_job_timed_out"]:
            duration = None if entry is None else max(0.0, self._clock.monotonic() - entry[1])
            self._call_all("on_job_timed_out", self._info(delivery, duration, error=error))
        if self._counts is not None:
            self._counts.count("timed_out", ran=entry is not None)

    # -- internals ---------------------------------------------------------------------

    def _info(self, delivery: Delivery, duration: float | None = None, **extra: Any) -> JobInfo:
        env = delivery.envelope
        return JobInfo(
            env.job_id,
            env.job_type,
            env.queue,
            env.attempt,
            env.deferrals,
            env.priority,
            env.enqueued_at,
            max(0.0, (self._clock.wall_ms() - env.enqueued_at) / 1000),
            duration,
            **extra,
        )

    def _ended(
        self,
        event: str,
        delivery: Delivery,
        error: str,
        reason: str,
        delay: float | None = None,
        result: object = None,
    ) -> None:
        entry = self._running.pop(id(delivery), None)
        method = _METHODS[event]
        if self._calls[method]:
            duration = None if entry is None else max(0.0, self._clock.monotonic() - entry[1])
            info = self._info(
                delivery, duration, error=error, reason=reason, delay=delay, result=result
            )
            self._call_all(method, info)
        text = error if event == "failed" else reason
        for sink in self._sinks:
            try:
                sink.job_event(event, delivery.envelope, entry is not None, text, result)
            except KeyboardInterrupt:
                raise
            except BaseException:  # a hook must never break the worker or the job
                _sink_failed(sink, event, delivery)
        if self._counts is not None:
            self._counts.count(event, ran=entry is not None)

    def _call_all(self, method: str, arg: object) -> None:
        for hook in self._calls[method]:
            try:
                getattr(hook, method)(arg)
            except KeyboardInterrupt:  # only the main thread's run loop gets one: let it
                raise
            except BaseException:  # a hook must never break the worker or the job
                fields = _fields(arg)
                logger.error(
                    "hook %s.%s failed; ignored",
                    type(hook).__qualname__,
                    method,
                    extra=fields,
                    exc_info=True,
                )


_JOB_EVENTS = (
    "on_job_started",
    "on_job_succeeded",
    "on_job_failed",
    "on_job_deferred",
    "on_job_dead_lettered",
    "on_job_timed_out",
    "on_job_cancelled",
)
_WORKER_EVENTS = (
    "on_worker_starting",
    "on_worker_consuming",
    "on_worker_draining",
    "on_worker_stopped",
)
_EVENTS = (*_WORKER_EVENTS, *_JOB_EVENTS)
_METHODS = {name.removeprefix("on_job_"): name for name in _JOB_EVENTS}


def _overriding(hooks: tuple[WorkerHooks, ...], name: str) -> tuple[WorkerHooks, ...]:
    """The hooks whose ``name`` does something, in order.

    Only the base class's own no-op is left out: a hook that is no :class:`WorkerHooks`,
    or sets the method on the instance, is called as before (and a missing method is
    logged as a failing hook when the event comes, as before).
    """
    noop = getattr(WorkerHooks, name)
    return tuple(
        hook
        for hook in hooks
        if getattr(type(hook), name, None) is not noop or name in getattr(hook, "__dict__", {})
    )


def _sink_failed(sink: EnvelopeSink, event: str, delivery: Delivery) -> None:
    """Log a sink's exception (called inside its ``except``)."""
    envelope = delivery.envelope
    logger.error(
        "hook %s.job_event(%s) failed; ignored",
        type(sink).__qualname__,
        event,
        extra={"job_id": str(envelope.job_id), "job_type": envelope.job_type},
        exc_info=True,
    )


def _fields(arg: object) -> dict[str, Any]:
    if isinstance(arg, JobInfo):
        return {
            "job_id": str(arg.job_id),
            "job_type": arg.job_type,
            "queue": arg.queue,
            "attempt": arg.attempt,
        }
    return {}
