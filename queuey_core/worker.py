"""The worker: consumes queues and runs each delivery's handler on a thread pool.

Per delivery (the seed's algorithm, ``seed/queuey_core/worker.rs``):

1. no handler for ``envelope.job_type`` -> dead letter ("no handler ...");
2. the payload does not validate against the handler's job model -> dead letter
   ("decode error ..."), and the handler never runs;
3. the handler runs, under the job timeout if one applies;
4. it returns -> ack;
5. it raises :class:`Fatal` -> dead letter ("fatal error ...");
6. it raises :class:`Deferred` -> ``defer(envelope.deferred(top priority), delay)``:
   nothing failed, so the attempt is unchanged and the retry policy is not consulted;
7. it raises :class:`Retryable`, any other exception, or times out -> the policy
   (job override, else queue default) decides: retry with ``envelope.next_attempt()``
   after the backoff, or dead letter ("max attempts (N) exhausted ...").

``concurrency`` job threads each take a delivery only when free (the thread is the
permit, taken before the pull), so no delivery waits in the worker for capacity.
Shutdown is graceful and ordered: the consumers stop, every delivery already pulled from
the broker is processed, then the running jobs are awaited. A settle that fails is
logged and counted, never raised: the broker still owns that message and will
redeliver it.

Python cannot kill a thread. A job that outlives its timeout gets its cancellation
flag set and :class:`JobTimeout` raised asynchronously in its thread; its slot comes
back only when the thread has really returned. A thread still running
``timeout_grace`` seconds later is reported (log + :meth:`WorkerHandle.stuck_jobs`)
and its delivery settled as timed out, so the broker is not kept waiting.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.backends.base import Backend, ConsumerEnded, Delivery, Subscription
from queuey_core.clock import Clock, SystemClock
from queuey_core.context import JobContext
from queuey_core.errors import (
    DecodeError,
    Deferred,
    DuplicateHandlerError,
    Fatal,
    JobTimeout,
    QueueyError,
    Retryable,
)
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job, job_identity
from queuey_core.queues import QueueConfig, QueueSet
from queuey_core.retry import GiveUp, RetryPolicy

logger = logging.getLogger(__name__)

_STOP = object()


class _Kind(enum.Enum):
    SUCCESS = "success"
    FATAL = "fatal"
    DEFERRED = "deferred"
    RETRYABLE = "retryable"


@dataclass(frozen=True, slots=True)
class _Outcome:
    kind: _Kind
    error: str = ""
    delay: float = 0.0


_SUCCESS = _Outcome(_Kind.SUCCESS)


@dataclass(frozen=True, slots=True)
class _Route:
    """Everything the worker needs to run one job type."""

    handler: JobHandler
    job_type: type[Job]
    queue: QueueConfig
    policy: RetryPolicy


class WorkerHandle:
    """Remote control for a running :class:`Worker`: shutdown, and its counters.

    Safe to use from any thread; :meth:`shutdown` may be called before ``run()`` starts
    or more than once.
    """

    def __init__(self) -> None:
        self._shutdown = threading.Event()
        self._lock = threading.Lock()
        self._settle_failures = 0
        self._stuck = 0
        self._in_flight = 0
        self._wakers: list[Callable[[], None]] = []

    def shutdown(self) -> None:
        """Ask the worker to stop; ``run()`` finishes what it already pulled, then returns."""
        self._shutdown.set()
        with self._lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def is_shutdown(self) -> bool:
        """Whether :meth:`shutdown` has been called."""
        return self._shutdown.is_set()

    def settle_failures(self) -> int:
        """How many acks, retries, deferrals or dead letters the broker did not take.

        Each is also logged at ERROR. The job ran; only telling the broker failed, so
        the message will be redelivered: a growing count means duplicate work ahead
        and usually a sick connection. Alert on it.
        """
        with self._lock:
            return self._settle_failures

    def in_flight(self) -> int:
        """Deliveries the worker holds: pulled from the broker and not settled yet."""
        with self._lock:
            return self._in_flight

    def stuck_jobs(self) -> int:
        """Job threads still running although their job timed out (and was settled)."""
        with self._lock:
            return self._stuck

    def _count_settle_failure(self) -> None:
        with self._lock:
            self._settle_failures += 1

    def _add_in_flight(self, n: int) -> None:
        with self._lock:
            self._in_flight += n

    def _add_stuck(self, n: int) -> None:
        with self._lock:
            self._stuck += n

    def _add_waker(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.append(wake)

    def _remove_waker(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.remove(wake)

    def __repr__(self) -> str:
        return (
            f"WorkerHandle(shutdown={self.is_shutdown()}, "
            f"settle_failures={self.settle_failures()}, stuck_jobs={self.stuck_jobs()}, "
            f"in_flight={self.in_flight()})"
        )


class _RunState(enum.Enum):
    RUNNING = 1
    TIMED_OUT = 2
    ABANDONED = 3
    DONE = 4


class _TimedRun:
    """The race between a job's thread finishing and its timeout firing, refereed."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.state = _RunState.RUNNING

    def time_out(self) -> bool:
        """Timer side: mark timed out and interrupt the thread, unless it already ended."""
        with self.lock:
            if self.state is not _RunState.RUNNING:
                return False
            self.state = _RunState.TIMED_OUT
            self.ctx.cancel_event.set()
            _set_async_exc(self.thread_id, JobTimeout)
            return True

    def abandon(self) -> bool:
        """Watchdog side: take over settling a thread that ignored its timeout."""
        with self.lock:
            if self.state is not _RunState.TIMED_OUT:
                return False
            self.state = _RunState.ABANDONED
            return True

    def finish(self) -> _RunState:
        """Thread side: the handler is over. Returns the state it ended from.

        After this returns no JobTimeout can land in the thread any more: a pending one
        is cleared under the same lock the timer raises it under.
        """
        with self.lock:
            previous = self.state
            self.state = _RunState.DONE
            if previous is not _RunState.RUNNING:
                _set_async_exc(self.thread_id, None)
            return previous


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    # The only way CPython offers to interrupt another thread (Dramatiq's time limit
    # does the same). It lands at the next bytecode boundary, not inside a C call.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


class Worker:
    """Consumes queues and runs the registered handlers on a thread pool.

    Args:
        backend: where deliveries come from; declared on construction.
        queues: the application's queue set.
        handlers: one per job type (two for the same ``Job.NAME`` is an error).
        consume: names of the queues to consume (default: all); duplicates collapse.
        concurrency: jobs running at once (default: the sum of the consumed queues'
            prefetch; 0 counts as 1).
        job_timeout: seconds a job may run before it is interrupted and retried; a
            queue's own ``job_timeout`` wins for its jobs.
        timeout_grace: seconds a timed-out thread gets to return before it is reported
            as stuck and its delivery settled without it.
        close_backend_on_shutdown: close the backend when ``run()`` returns (off by
            default: the backend is usually shared with a Producer).
        clock: time source for timeouts (a manual clock in tests).
    """

    def __init__(
        self,
        backend: Backend,
        queues: QueueSet,
        handlers: Iterable[JobHandler],
        *,
        consume: Iterable[str] | None = None,
        concurrency: int | None = None,
        job_timeout: float | None = None,
        timeout_grace: float = 10.0,
        close_backend_on_shutdown: bool = False,
        clock: Clock | None = None,
    ) -> None:
        if job_timeout is not None and job_timeout <= 0:
            raise ValueError("job_timeout must be positive")
        self._backend = backend
        self._routes: dict[str, _Route] = {}
        for h in handlers:
            name, queue_name = job_identity(h.job_type)
            if name in self._routes:
                raise DuplicateHandlerError(name)
            config = queues[queue_name]
            policy = h.job_type.RETRY or config.retry
            self._routes[name] = _Route(h, h.job_type, config, policy)
        self._queues = queues.select(consume)
        self._concurrency = max(
            1, concurrency if concurrency is not None else sum(q.prefetch for q in self._queues)
        )
        self._job_timeout = job_timeout
        self._timeout_grace = timeout_grace
        self._close_backend = close_backend_on_shutdown
        self._clock: Clock = clock or SystemClock()
        self._handle = WorkerHandle()
        backend.declare(self._queues)

    @property
    def queues(self) -> Sequence[QueueConfig]:
        """The queues this worker consumes."""
        return tuple(self._queues)

    @property
    def concurrency(self) -> int:
        """The most jobs this worker runs at the same time."""
        return self._concurrency

    @property
    def handle(self) -> WorkerHandle:
        """A handle to stop this worker from another thread and read its counters."""
        return self._handle

    def __repr__(self) -> str:
        return (
            f"Worker(queues={[q.name for q in self._queues]}, "
            f"handlers={sorted(self._routes)}, concurrency={self._concurrency}, "
            f"job_timeout={self._job_timeout}, "
            f"close_backend_on_shutdown={self._close_backend})"
        )

    def run(self) -> None:
        """Consume and run jobs until :meth:`WorkerHandle.shutdown`, then stop gracefully.

        ``concurrency`` job threads each take a delivery only when they are free (the
        thread is the permit, taken before the pull). Shutdown stops the consumers, then
        queues one stop marker per thread *behind* every delivery already pulled, so all
        of them are processed before the threads end, and waits for the threads.

        Raises:
            ConsumerStoppedError: a consumer ended on its own (the backend went away).
            BackendError: a consumer could not be started.
        """
        handle = self._handle
        logger.info(
            "worker starting",
            extra={
                "queues": [q.name for q in self._queues],
                "concurrency": self._concurrency,
                "handlers": len(self._routes),
            },
        )
        events: queue.SimpleQueue[object] = queue.SimpleQueue()
        stopping = threading.Event()
        errors: list[QueueyError] = []

        def sink(item: Delivery | ConsumerEnded) -> None:
            if not isinstance(item, ConsumerEnded):
                handle._add_in_flight(1)
            events.put(item)

        handle._add_waker(stopping.set)
        if handle.is_shutdown():
            stopping.set()
        subscriptions: list[Subscription] = []
        threads: list[threading.Thread] = []
        try:
            for config in self._queues:
                if stopping.is_set():
                    break
                try:
                    subscriptions.append(self._backend.consume(config, sink))
                except QueueyError as exc:
                    logger.error(
                        "failed to start consumer", extra={"queue": config.name}, exc_info=True
                    )
                    errors.append(exc)
                    stopping.set()
            if not stopping.is_set():
                threads = [
                    threading.Thread(
                        target=self._job_loop,
                        args=(events, stopping, errors),
                        name=f"queuey-job-{i}",
                        daemon=True,
                    )
                    for i in range(self._concurrency)
                ]
                for thread in threads:
                    thread.start()
                stopping.wait()

            # Stop the consumers first, then drain: a delivery that reached `events` has
            # left the broker's hands and must still be settled.
            logger.debug("worker draining")
            for sub in subscriptions:
                try:
                    sub.cancel()
                except QueueyError:
                    logger.warning("failed to cancel consumer", extra={"queue": sub.queue})
            for _ in threads:
                events.put(_STOP)
            for thread in threads:
                thread.join()
        finally:
            handle._remove_waker(stopping.set)
            for sub in subscriptions:
                try:
                    sub.close()  # anything never processed goes back to the broker
                except QueueyError:
                    logger.warning("failed to close consumer", extra={"queue": sub.queue})

        error = errors[0] if errors else None
        if self._close_backend:
            try:
                self._backend.close()
            except QueueyError as exc:
                logger.warning("backend close failed", exc_info=True)
                error = error or exc
        logger.info("worker stopped", extra={"settle_failures": handle.settle_failures()})
        if error is not None:
            raise error

    def _job_loop(
        self,
        events: queue.SimpleQueue[object],
        stopping: threading.Event,
        errors: list[QueueyError],
    ) -> None:
        """One job thread: take a delivery when free, run it, settle it; until told to stop."""
        while True:
            item = events.get()
            if item is _STOP:
                return
            if isinstance(item, ConsumerEnded):
                if not self._handle.is_shutdown():
                    logger.error("consumer ended unexpectedly", extra={"queue": item.queue})
                    errors.append(item.error)
                    stopping.set()
                continue
            try:
                self._dispatch(item)  # type: ignore[arg-type]
            except BaseException:  # never expected: _dispatch settles every outcome itself
                logger.critical("worker bug while processing a delivery", exc_info=True)
            finally:
                self._handle._add_in_flight(-1)

    # -- one delivery ------------------------------------------------------------------

    def _dispatch(self, delivery: Delivery) -> None:
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
            self._settle(
                delivery.dead_letter, (f"no handler for job type {env.job_type!r}",), fields
            )
            return
        try:
            job = env.decode_job(route.job_type)
        except DecodeError as exc:
            logger.error("payload does not fit the job model: %s", exc, extra=fields)
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
        if timeout is None:
            outcome = _call(route.handler, job, ctx)
        else:
            timed = self._call_with_timeout(route, job, ctx, timeout, delivery, fields)
            if timed is None:
                return
            outcome = timed
        self._settle_outcome(delivery, route, outcome, fields)

    def _call_with_timeout(
        self,
        route: _Route,
        job: Job,
        ctx: JobContext,
        timeout: float,
        delivery: Delivery,
        fields: dict[str, Any],
    ) -> _Outcome | None:
        """Run the handler under ``timeout``; None if a watchdog already settled it."""
        run = _TimedRun(ctx)
        timed_out = _Outcome(_Kind.RETRYABLE, f"job timed out after {timeout:g}s")

        def on_timeout() -> None:
            if run.time_out():
                logger.warning("job timed out after %gs; interrupting it", timeout, extra=fields)
                self._clock.call_later(self._timeout_grace, on_stuck)

        def on_stuck() -> None:
            if run.abandon():
                self._handle._add_stuck(1)
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

        timer = self._clock.call_later(timeout, on_timeout)
        outcome: _Outcome = timed_out
        try:
            outcome = _call(route.handler, job, ctx)
        except JobTimeout:
            pass
        finally:
            timer.cancel()
        while True:
            # A JobTimeout raised just as the handler returned may still land here;
            # finish() clears any that is pending, so loop until it has run.
            try:
                ended_from = run.finish()
                break
            except JobTimeout:
                continue
        if ended_from is _RunState.ABANDONED:
            self._handle._add_stuck(-1)
            logger.warning("stuck job thread returned at last", extra=fields)
            return None
        if ended_from is _RunState.TIMED_OUT:
            return timed_out
        return outcome

    def _settle_outcome(
        self, delivery: Delivery, route: _Route, outcome: _Outcome, fields: dict[str, Any]
    ) -> None:
        env = delivery.envelope
        kind = outcome.kind
        if kind is _Kind.SUCCESS:
            logger.info("job succeeded", extra=fields)
            self._settle(delivery.ack, (), fields)
        elif kind is _Kind.FATAL:
            logger.error("job failed fatally: %s", outcome.error, extra=fields)
            self._settle(delivery.dead_letter, (f"fatal error: {outcome.error}",), fields)
        elif kind is _Kind.DEFERRED:
            # Nothing failed: the attempt stays, the policy is not consulted, and the job
            # comes back at its queue's top priority.
            logger.info("job deferred for %gs: %s", outcome.delay, outcome.error, extra=fields)
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
                self._settle(delivery.dead_letter, (reason,), fields)
            else:
                logger.warning(
                    "job failed; retrying in %.3gs: %s",
                    decision.delay,
                    outcome.error,
                    extra=fields,
                )
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


def _call(handler: JobHandler, job: Job, ctx: JobContext) -> _Outcome:
    """Run a handler and classify how it ended. JobTimeout passes through."""
    try:
        handler(job, ctx)
    except Deferred as d:
        return _Outcome(_Kind.DEFERRED, d.reason, d.delay)
    except Fatal as exc:
        return _Outcome(_Kind.FATAL, _describe(exc))
    except JobTimeout:
        raise
    except BaseException as exc:  # Retryable, any other exception: a transient failure
        return _Outcome(_Kind.RETRYABLE, _describe(exc))
    return _SUCCESS


def _describe(exc: BaseException) -> str:
    """The error text for logs and dead letters; the type too when it is not ours."""
    text = str(exc)
    if isinstance(exc, (Fatal, Retryable)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
