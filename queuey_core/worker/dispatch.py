"""One delivery, start to settle: the seed's per-delivery algorithm.

1. no handler for ``envelope.job_type`` -> dead letter ("no handler ...");
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

Owns: choosing the settle for each outcome. Must never: raise out of
:meth:`Dispatcher.dispatch` (a settle that fails is logged and counted in the
:class:`WorkerHandle`: the broker still owns that message and will redeliver it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queuey_core.backends.base import Delivery
from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.errors import DecodeError
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job
from queuey_core.queues import QueueConfig
from queuey_core.retry import GiveUp, RetryPolicy
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.hooks import HookRunner
from queuey_core.worker.outcome import Kind, Outcome, call_handler
from queuey_core.worker.timeout import run_with_timeout

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    """Everything the worker needs to run one job type."""

    handler: JobHandler
    job_type: type[Job]
    queue: QueueConfig
    policy: RetryPolicy


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
    ) -> None:
        self._hooks = hooks if hooks is not None else HookRunner((), clock)
        self._routes = routes
        self._handle = handle
        self._clock = clock
        self._job_timeout = job_timeout
        self._timeout_grace = timeout_grace

    def dispatch(self, delivery: Delivery) -> None:
        env = delivery.envelope
        fields: dict[str, Any] = {
            "job_id": str(env.job_id),
            "job_type": env.job_type,
            "queue": env.queue,
            "attempt": env.attempt,
        }
        route = self._routes.get(env.job_type)
        if route is None:
            logger.warning("no handler registered; dead-lettering", extra=fields)
            self._hooks.dead_lettered(delivery, f"no handler for job type {env.job_type!r}")
            self._settle(
                delivery.dead_letter, (f"no handler for job type {env.job_type!r}",), fields
            )
            return
        try:
            job = env.decode_job(route.job_type)
        except DecodeError as exc:
            logger.error("payload does not fit the job model: %s", exc, extra=fields)
            self._hooks.dead_lettered(delivery, f"decode error: {exc}")
            self._settle(delivery.dead_letter, (f"decode error: {exc}",), fields)
            return

        ctx = JobContext(
            job_id=env.job_id,
            job_type=env.job_type,
            queue=route.queue.name,
            attempt=env.attempt,
            max_attempts=route.policy.max_attempts,
            deferrals=env.deferrals,
            priority=env.priority,
            age=max(0.0, (self._clock.wall_ms() - env.enqueued_at) / 1000),
        )
        timeout = route.queue.job_timeout or self._job_timeout
        logger.debug("running job", extra=fields)
        self._hooks.started(delivery)
        if timeout is None:
            outcome = call_handler(route.handler, job, ctx)
        else:
            timed = self._call_with_timeout(route, job, ctx, timeout, delivery, fields)
            if timed is None:
                return
            outcome = timed
        self._settle_outcome(delivery, route, outcome, fields)

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
        timed_out = Outcome(Kind.RETRYABLE, f"job timed out after {timeout:g}s")

        def on_stuck() -> None:
            self._handle._add_stuck(1)
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
            self._handle._add_stuck(-1)
            logger.warning("stuck job thread returned at last", extra=fields)
        elif outcome is timed_out:
            self._hooks.timed_out(delivery, timed_out.error)
        return outcome

    def _settle_outcome(
        self, delivery: Delivery, route: Route, outcome: Outcome, fields: dict[str, Any]
    ) -> None:
        env = delivery.envelope
        kind = outcome.kind
        if kind is Kind.SUCCESS:
            logger.info("job succeeded", extra=fields)
            self._hooks.succeeded(delivery)
            self._settle(delivery.ack, (), fields)
        elif kind is Kind.FATAL:
            logger.error("job failed fatally: %s", outcome.error, extra=fields)
            self._hooks.dead_lettered(delivery, f"fatal error: {outcome.error}", outcome.error)
            self._settle(delivery.dead_letter, (f"fatal error: {outcome.error}",), fields)
        elif kind is Kind.DEFERRED:
            # Nothing failed: the attempt stays, the policy is not consulted, and the job
            # comes back at its queue's top priority.
            logger.info("job deferred for %gs: %s", outcome.delay, outcome.error, extra=fields)
            self._hooks.deferred(delivery, outcome.error, outcome.delay)
            self._settle(
                delivery.defer,
                (env.deferred(route.queue.top_priority), outcome.delay),
                fields,
            )
        else:
            decision = route.policy.decide(env.attempt)
            if isinstance(decision, GiveUp):
                logger.error(
                    "job failed; giving up after %d attempts: %s",
                    env.attempt,
                    outcome.error,
                    extra=fields,
                )
                reason = (
                    f"max attempts ({route.policy.max_attempts}) exhausted after attempt "
                    f"{env.attempt}: {outcome.error}"
                )
                self._hooks.dead_lettered(delivery, reason, outcome.error)
                self._settle(delivery.dead_letter, (reason,), fields)
            else:
                logger.warning(
                    "job failed; retrying in %.3gs: %s",
                    decision.delay,
                    outcome.error,
                    extra=fields,
                )
                self._hooks.failed(delivery, outcome.error, decision.delay)
                self._settle(delivery.retry, (env.next_attempt(), decision.delay), fields)

    def _settle(
        self, operation: Callable[..., None], args: tuple[Any, ...], fields: dict[str, Any]
    ) -> None:
        """Run a settle; log and count (never raise) a failure: the broker keeps the job."""
        try:
            operation(*args)
        except Exception:
            self._handle._count_settle_failure()
            logger.error(
                "failed to settle delivery (%s)",
                getattr(operation, "__name__", "settle"),
                extra=fields,
                exc_info=True,
            )
