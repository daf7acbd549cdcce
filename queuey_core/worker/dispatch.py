"""One delivery, start to settle: the seed's per-delivery algorithm, guarded.

Before the seed's steps, a delivery the worker cannot trust is dead-lettered unrun:

* redelivered :data:`~.redelivery.MAX_REDELIVERIES` times without being settled
  ("redelivered N times without being settled");
* an envelope whose ``queue`` is not the queue it came from ("envelope queue ... is not
  the queue it was delivered from"). Retries and dead letters always go by the
  delivery's queue, never by what the envelope says.

Then the seed's algorithm:

1. no handler for ``envelope.job_type`` -> dead letter ("no handler ..."); a job type
   bound to another queue, or a priority above the queue's, too (:mod:`.admission`);
2. the payload does not validate against the handler's job model -> dead letter
   ("decode error ..."), and the handler never runs;
3. the handler runs, under the job timeout if one applies (:mod:`.timeout`);
4. it returns -> ack;
5. it raises :class:`Fatal` -> dead letter ("fatal error ...");
6. it raises :class:`Deferred` -> ``defer(envelope.deferred(top priority), delay)``:
   nothing failed, so the attempt is unchanged and the retry policy is not consulted;
7. it raises :class:`Retryable`, any other exception, or times out -> the policy
   (job override, else queue default) decides: retry with ``envelope.next_attempt()``
   after the backoff, or dead letter ("max attempts (N) exhausted ...").

A retry or deferral that cannot be built (a delay beyond what the broker holds, a
counter at its limit, a policy that raises) is dead-lettered with the reason instead of
attempted ("retry delay ... is beyond ...").

Owns: choosing the settle for each outcome (a deferral, attempt unchanged, where a guard
holds a start or an end it could not record: :mod:`.end_guard`). Must never: raise out of
:meth:`Dispatcher.dispatch`, or leave a delivery unsettled because of what it holds or
of a bug on the way (a last-resort dead letter, "worker error ..."). A settle the broker
did not take is logged and counted in the :class:`WorkerHandle`: the broker still owns
that message and will redeliver it. A success on a delivery that can ack without waiting
(:class:`~queuey_core.backends.capabilities.EarlyAck`, RabbitMQ's) hands the ack to the
backend and goes on; an ack that cannot be sent is counted when the backend finds out.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queuey_core.backends.base import Delivery
from queuey_core.backends.capabilities import acks_at_once, acks_early
from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.errors import DecodeError, JobTimeout
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job
from queuey_core.limits import check_delay
from queuey_core.logs.hot import HotLine
from queuey_core.queues import QueueConfig
from queuey_core.retry import GiveUp, RetryPolicy
from queuey_core.worker.admission import refusal
from queuey_core.worker.cancels import NOT_RUN, CancelEvent, Cancels
from queuey_core.worker.end_guard import (
    end_unrun,
    fatal_reason,
    give_up_reason,
    held_end,
    held_start,
)
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.hooks import HookRunner
from queuey_core.worker.limited import run_limited
from queuey_core.worker.outcome import Kind, Outcome, call_handler, handler_error_text
from queuey_core.worker.outcome import failure_fields as _failed
from queuey_core.worker.outcome import kind_words as _kind_words
from queuey_core.worker.outcome import timed_out_outcome as _timed_out
from queuey_core.worker.redelivery import MAX_REDELIVERIES, RedeliveryCounter
from queuey_core.worker.timeout import run_with_timeout
from queuey_core.worker.tracked import Tracked

if TYPE_CHECKING:  # asyncio is imported only by a worker with async handlers
    from queuey_core.flow.limit_gate import LimitGate
    from queuey_core.flow.limit_spec import LimitSpec
    from queuey_core.worker.async_job import AsyncJob
    from queuey_core.worker.asyncio_runner import AsyncRunner

logger = logging.getLogger(__name__)
_succeeded = HotLine(logger, logging.INFO, "job succeeded")  # every job's: see logs/hot.py


@dataclass(frozen=True, slots=True)
class Route:
    """Everything the worker needs to run one job type."""

    handler: JobHandler
    job_type: type[Job]
    queue: QueueConfig
    policy: RetryPolicy
    is_async: bool = False  # run on the worker's event loop (:mod:`.asyncio_runner`)
    #: The limits its jobs count against (:mod:`queuey_core.flow`); None: not one, so
    #: its jobs cost nothing more than this attribute's read.
    limits: tuple[LimitSpec, ...] | None = None


class Dispatcher:
    """Runs deliveries to their settle, one call per delivery, from any job thread."""

    def __init__(
        self,
        routes: dict[str, Route],
        *,
        handle: WorkerHandle,
        clock: Clock,
        job_timeout: float | None,
        timeout_grace: float,
        hooks: HookRunner | None = None,
        aio: AsyncRunner | None = None,
        cancels: Cancels | None = None,
        gate: LimitGate | None = None,
    ) -> None:
        self._gate = gate
        self._aio = aio
        self._hooks = hooks if hooks is not None else HookRunner((), clock)
        self._cancels = cancels if cancels is not None else Cancels()
        self._routes = routes
        self._handle = handle
        self._clock = clock
        self._job_timeout = job_timeout
        self._timeout_grace = timeout_grace
        self._redeliveries = RedeliveryCounter()

    def dispatch(self, delivery: Delivery) -> None:
        tracked = Tracked(delivery)
        try:
            self._dispatch(tracked)
        except Exception as exc:  # a bug on our side: the delivery must still be settled
            fields = {"queue": _safe(lambda: delivery.queue)}
            logger.critical("worker error while processing a delivery", exc_info=True, extra=fields)
            if not tracked.attempted:
                self.settle(
                    tracked.dead_letter, (f"worker error: {handler_error_text(exc)}",), fields
                )

    def _dispatch(self, delivery: Tracked) -> None:
        inner = delivery.inner  # read through once: Tracked's properties cost a call each
        env, queue, redelivered = inner.envelope, inner.queue, inner.redelivered
        fields: dict[str, Any] = {
            "job_id": str(env.job_id),
            "job_type": env.job_type,
            "queue": queue,
            "attempt": env.attempt,
        }
        if inner.is_stale():
            # Pulled before its channel died: the broker has already handed it out again,
            # so running it here would only run it twice.
            logger.info("delivery's channel is gone; leaving it to its redelivery", extra=fields)
            return
        key = (queue, env.job_id, env.attempt, env.deferrals)
        redeliveries = self._redeliveries.note(key, redelivered)
        if redeliveries >= MAX_REDELIVERIES:
            logger.error(
                "delivery came back %d times without being settled; dead-lettering",
                redeliveries,
                extra=fields,
            )
            reason = f"redelivered {redeliveries} times without being settled"
            return end_unrun(self._hooks, self.settle, delivery, reason, fields)
        if env.queue != queue:
            logger.error("envelope names another queue; dead-lettering", extra=fields)
            reason = (
                f"envelope queue {env.queue!r} is not the queue it was delivered from ({queue!r})"
            )
            return end_unrun(self._hooks, self.settle, delivery, reason, fields)
        if env.job_id in self._cancels:  # `queuey cancel`: acked unrun
            return end_unrun(self._hooks, self.settle, delivery, NOT_RUN, fields, "cancelled")
        route = self._routes.get(env.job_type)
        if route is None:
            logger.warning("no handler registered; dead-lettering", extra=fields)
            reason = f"no handler for job type {env.job_type!r}"
            return end_unrun(self._hooks, self.settle, delivery, reason, fields)
        refused = refusal(env, queue, route.queue)
        if refused is not None:
            logger.error("%s; dead-lettering", refused, extra=fields)
            return end_unrun(self._hooks, self.settle, delivery, refused, fields)
        try:
            job = env.decode_job(route.job_type)
        except DecodeError as exc:
            logger.error("payload does not fit the job model: %s", exc, extra=fields)
            return end_unrun(self._hooks, self.settle, delivery, f"decode error: {exc}", fields)
        if route.limits is not None and self._gate is not None:
            run = functools.partial(self._run, delivery, route, job, fields)
            args = (self._gate, delivery, route.limits, job, fields)
            return run_limited(*args, settle=self.settle, run=run, gives_back=not route.is_async)
        self._run(delivery, route, job, fields)

    def _run(self, delivery: Tracked, route: Route, job: Job, fields: dict[str, Any]) -> None:
        """Run the job of ``delivery`` (decoded; admitted, if limited) and settle it."""
        inner = delivery.inner
        env, queue, redelivered = inner.envelope, inner.queue, inner.redelivered
        ctx = JobContext(
            job_id=env.job_id,
            job_type=env.job_type,
            queue=route.queue.name,
            attempt=env.attempt,
            max_attempts=route.policy.max_attempts,
            deferrals=env.deferrals,
            priority=env.priority,
            age=max(0.0, (self._clock.wall_ms() - env.enqueued_at) / 1000),
            redelivered=redelivered,
            cancel_event=self._aio.cancel_event()
            if route.is_async and self._aio
            else CancelEvent(),
        )
        timeout = route.queue.job_timeout or self._job_timeout
        logger.debug("running job", extra=fields)
        if self._hooks.guards and (held := held_start(self._hooks.guards, env)) is not None:
            self._settle_outcome(delivery, route, held, fields)  # deferred, not run
            if route.is_async and route.limits is not None and self._gate is not None:
                self._gate.release(fields["job_id"])  # as an async job's settle would
            return
        self._hooks.started(delivery)
        (cancels := self._cancels).track(env.job_id, ctx.cancel_event)
        if route.is_async and self._aio is not None:  # to the event loop, settled there
            self._aio.submit(
                route.handler,
                job,
                ctx,
                queue,
                timeout,
                fields,
                delivery=delivery,
                route=route,
                settler=self,
                timed_out=_timed_out(timeout or 0.0),
                success_here=acks_at_once(delivery.inner),
            )
            return
        if timeout is None:
            try:
                outcome = call_handler(route.handler, job, ctx)
            except JobTimeout:  # raised by the handler itself: no timer of ours is running
                outcome = Outcome(Kind.RETRYABLE, "JobTimeout raised by the handler")
        else:
            timed = self._call_with_timeout(route, job, ctx, timeout, delivery, fields)
            if timed is None:
                return
            outcome = timed
        self._settle_outcome(delivery, route, cancels.ended(ctx, outcome), fields)

    def settle_async(self, item: AsyncJob, outcome: Outcome) -> None:
        """Settle an async job's delivery for ``outcome`` (on the loop or a settle
        thread); the hooks hear of a timeout first."""
        if outcome.timed_out:
            self._hooks.timed_out(item.delivery, outcome.error)
        outcome = self._cancels.ended(item.ctx, outcome)
        try:
            self._settle_outcome(item.delivery, item.route, outcome, item.fields)
        finally:  # a limited job's slots are given back once it is settled
            if item.route.limits is not None and self._gate is not None:
                self._gate.release(item.fields["job_id"])

    def _call_with_timeout(
        self,
        route: Route,
        job: Job,
        ctx: JobContext,
        timeout: float,
        delivery: Delivery,
        fields: dict[str, Any],
    ) -> Outcome | None:
        """Run the handler under ``timeout``; None if a watchdog already settled it."""
        timed_out = _timed_out(timeout)

        def on_stuck() -> None:
            self._handle.record_stuck(1)
            self._hooks.timed_out(delivery, timed_out.error)
            logger.error(
                "job thread still running %gs after its timeout; settling it as timed "
                "out, its slot stays taken until the thread returns",
                self._timeout_grace,
                extra=fields,
            )
            # Off the clock's thread: a settle may wait on the broker.
            threading.Thread(
                target=self._settle_outcome,
                args=(delivery, route, timed_out, fields),
                name="queuey-stuck-settle",
                daemon=True,
            ).start()

        outcome = run_with_timeout(
            lambda: call_handler(route.handler, job, ctx),
            ctx,
            timeout=timeout,
            grace=self._timeout_grace,
            clock=self._clock,
            timed_out=timed_out,
            on_stuck=on_stuck,
            fields=fields,
        )
        if outcome is None:
            self._handle.record_stuck(-1)
            logger.warning("stuck job thread returned at last", extra=fields)
        elif outcome.timed_out:  # (with the traceback of where it was interrupted)
            self._hooks.timed_out(delivery, timed_out.error)
        return outcome

    def _settle_outcome(
        self, delivery: Delivery, route: Route, outcome: Outcome, fields: dict[str, Any]
    ) -> None:
        if self._hooks.guards:  # an end a guard could not record is deferred instead
            outcome = held_end(self._hooks.guards, delivery.envelope, route.policy, outcome)
        try:
            operation, args = self._decide(delivery, route, outcome, fields)
        except Exception as exc:
            # The retry or deferral cannot even be built: the job is not lost, it is
            # dead-lettered with the reason, and the settle path never sees the bad value.
            word, cause = _kind_words(outcome)
            reason = (
                f"{word} could not be scheduled: {handler_error_text(exc)} "
                f"({cause}: {outcome.error})"
            )
            logger.error("%s; dead-lettering", reason, extra=_failed(fields, outcome))
            self._hooks.dead_lettered(delivery, reason, outcome.error)
            operation, args = delivery.dead_letter, (reason,)
        self.settle(operation, args, fields)

    def _decide(
        self, delivery: Delivery, route: Route, outcome: Outcome, fields: dict[str, Any]
    ) -> tuple[Callable[..., None], tuple[Any, ...]]:
        """The settle for ``outcome``, as an operation and its arguments."""
        kind = outcome.kind
        if kind is Kind.SUCCESS:
            _succeeded(fields)
            self._hooks.succeeded(delivery, outcome.result)
            if isinstance(delivery, Tracked) and acks_early(delivery.inner):
                return delivery.ack_early, (functools.partial(self._ack_failed, fields),)
            return delivery.ack, ()
        if kind is Kind.CANCELLED:  # stopped by its handler after a `queuey cancel`
            self._hooks.cancelled(delivery, outcome.error)
            return delivery.ack, ()
        if kind is Kind.FATAL:
            logger.error("job failed fatally: %s", outcome.error, extra=_failed(fields, outcome))
            self._hooks.dead_lettered(delivery, fatal_reason(outcome.error), outcome.error)
            return delivery.dead_letter, (fatal_reason(outcome.error),)
        env = delivery.envelope
        if kind is Kind.DEFERRED:
            # Nothing failed: the attempt stays, the policy is not consulted, and the job
            # comes back at its queue's top priority.
            check_delay(outcome.delay, "deferral delay")  # ValueError if no broker holds it
            logger.info("job deferred for %gs: %s", outcome.delay, outcome.error, extra=fields)
            self._hooks.deferred(delivery, outcome.error, outcome.delay)
            return delivery.defer, (env.deferred(route.queue.top_priority), outcome.delay)
        decision = route.policy.decide(env.attempt)
        if isinstance(decision, GiveUp):
            logger.error(
                "job failed; giving up after %d attempts: %s",
                env.attempt,
                outcome.error,
                extra=_failed(fields, outcome),
            )
            reason = give_up_reason(route.policy, env.attempt, outcome.error)
            self._hooks.dead_lettered(delivery, reason, outcome.error)
            return delivery.dead_letter, (reason,)
        check_delay(decision.delay, "retry delay")
        logger.warning(
            "job failed; retrying in %.3gs: %s",
            decision.delay,
            outcome.error,
            extra=_failed(fields, outcome),
        )
        self._hooks.failed(delivery, outcome.error, decision.delay)
        return delivery.retry, (env.next_attempt(), decision.delay)

    def _ack_failed(self, fields: dict[str, Any], error: BaseException) -> None:
        """Count and log an ack sent without waiting that could not be sent after all."""
        self._handle.record_settle_failure()
        logger.error("failed to settle delivery (ack): %s", handler_error_text(error), extra=fields)

    def settle(
        self, operation: Callable[..., None], args: tuple[Any, ...], fields: dict[str, Any]
    ) -> None:
        """Run a settle; log and count (never raise) a failure: the broker keeps the job."""
        try:
            operation(*args)
        except Exception:
            self._handle.record_settle_failure()
            logger.error(
                "failed to settle delivery (%s)",
                getattr(operation, "__name__", "settle"),
                extra=fields,
                exc_info=True,
            )


def _safe(read: Callable[[], str]) -> str:
    try:
        return read()
    except Exception:
        return "?"
