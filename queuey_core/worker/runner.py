"""The Worker: consumes queues and runs each delivery on one of its job threads.

``concurrency`` job threads each take a delivery only when free (the thread is the
permit, taken before the pull), so no delivery waits in the worker for capacity.
Shutdown is graceful and ordered: the consumers stop, every delivery already pulled from
the broker is processed, then the running jobs are awaited.

Owns: the run loop, the job threads and the consumers' lifetimes. What happens to one
delivery is :mod:`.dispatch`'s business. Must never: drop a delivery that reached the
sink (each one is dispatched, or given back to the broker when its consumer closes), or
run more than ``concurrency`` jobs at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from queuey_core.backends.base import Backend, ConsumerEnded, Delivery
from queuey_core.backends.capabilities import ControlServer, HoldsUniqueKeys, SupportsControl
from queuey_core.clock import Clock, SystemClock
from queuey_core.control.responder import ControlResponder, JobCounts
from queuey_core.errors import ConfigError, DuplicateHandlerError, QueueyError
from queuey_core.flow.pause_consumers import Consumers
from queuey_core.handlers import JobHandler, is_async
from queuey_core.jobs import job_identity
from queuey_core.queues import QueueConfig, QueueSet
from queuey_core.tracing import worker_tracing
from queuey_core.worker.cancels import Cancels, CancelsStart
from queuey_core.worker.dispatch import Dispatcher, Route
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.hooks import HookRunner, WorkerHooks

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from queuey_core.flow.limit_gate import LimitGate
    from queuey_core.flow.unique_keys import UniqueKeys
    from queuey_core.worker.asyncio_runner import AsyncRunner

logger = logging.getLogger(__name__)

_STOP = object()

#: Job threads a queue with an async cap of its own adds to the default concurrency: they
#: only hand its async jobs over, and its prefetch (a thousand) would be a thread each.
ASYNC_QUEUE_THREADS = 4


def _threads_for(queue: QueueConfig) -> int:
    if queue.async_concurrency is None:
        return queue.prefetch
    return min(queue.prefetch, ASYNC_QUEUE_THREADS)


class Worker:
    """Consumes queues and runs the registered handlers on a thread pool.

    Args:
        backend: where deliveries come from; declared on construction.
        queues: the application's queue set.
        handlers: one per job type (two for the same ``Job.NAME`` is an error).
        consume: names of the queues to consume (default: all); duplicates collapse.
        concurrency: job threads, so plain jobs running at once (default: the sum of
            the consumed queues' prefetch, a queue with an ``async_concurrency`` of its
            own counting for at most :data:`ASYNC_QUEUE_THREADS`; 0 counts as 1).
        job_timeout: seconds a job may run before it is interrupted and retried; a
            queue's own ``job_timeout`` wins for its jobs.
        timeout_grace: seconds a timed-out thread gets to return before it is reported
            as stuck and its delivery settled without it.
        close_backend_on_shutdown: close the backend when ``run()`` returns (off by
            default: the backend is usually shared with a Producer).
        clock: time source for timeouts (a manual clock in tests).
        hooks: told of every job's start and outcome and of the worker's lifecycle, in
            order (see :class:`WorkerHooks`); one that raises is logged and ignored.
        control: answer the backend's control channel while running, when it has one
            (``queuey workers``; see :mod:`queuey_core.control`).
        on_shutdown_request: what a shutdown asked over the control channel does
            (default: :meth:`WorkerHandle.shutdown`); called on the backend's thread, so
            it must only ask, never wait.
        tracer_provider: where each attempt's CONSUMER span goes (default:
            OpenTelemetry's global provider, when the ``otel`` extra is installed and
            one is set before the worker is made); see ``docs/tracing.md``.
        control_secret: answer only control requests signed with this secret
            (``[control] secret``; see :mod:`queuey_core.control.signing`).
        async_concurrency: ``async def`` jobs running at once on the worker's event loop,
            for the queues without an ``async_concurrency`` of their own (default:
            ``concurrency``); see :mod:`queuey_core.worker.asyncio_runner`.
        loop_block_warning: seconds the event loop may stay blocked by one coroutine
            before it is reported (None: not watched).
        unique_keys: where jobs' unique keys are let go of as their periods end
            (default: the backend's own, on a backend that keeps them; on RabbitMQ, the
            job store's: :func:`~queuey_core.flow.unique_store.open_unique_keys`).
        limits: the rate and concurrency limits its jobs start under, and their state
            (:mod:`queuey_core.flow`; :func:`~queuey_core.flow.limit_setup.limit_gate_for`
            makes one from the settings). The worker runs its heartbeat while it runs;
            the caller closes it.
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
        hooks: Iterable[WorkerHooks] = (),
        control: bool = True,
        on_shutdown_request: Callable[[], None] | None = None,
        tracer_provider: TracerProvider | None = None,
        control_secret: str | bytes | None = None,
        async_concurrency: int | None = None,
        loop_block_warning: float | None = 1.0,
        unique_keys: UniqueKeys | None = None,
        limits: LimitGate | None = None,
    ) -> None:
        if job_timeout is not None and job_timeout <= 0:
            raise ValueError("job_timeout must be positive")
        self._backend = backend
        self._routes: dict[str, Route] = {}
        for h in handlers:
            name, queue_name = job_identity(h.job_type)
            if name in self._routes:
                raise DuplicateHandlerError(name)
            config = queues[queue_name]
            policy = h.job_type.RETRY or config.retry
            bound = limits.limits_of(name, queue_name) if limits is not None else None
            self._routes[name] = Route(h, h.job_type, config, policy, is_async(h), bound)
        self._gate = limits
        if limits is not None:
            limits.bind(backend.publish)
        self._queues = queues.select(consume)
        self._concurrency = max(
            1, concurrency if concurrency is not None else sum(map(_threads_for, self._queues))
        )
        self._job_timeout = job_timeout
        self._timeout_grace = timeout_grace
        self._close_backend = close_backend_on_shutdown
        self._clock: Clock = clock or SystemClock()
        self._handle = WorkerHandle()
        # Counting for the control channel costs a call per job event: only when a
        # control channel will be served.
        self._counts: JobCounts | None = None
        if control and isinstance(backend, SupportsControl):
            self._counts = JobCounts()
        self._on_shutdown_request = on_shutdown_request or self._handle.shutdown
        self._control_secret = control_secret
        # Looked for once: without a provider, no span, nothing per job.
        tracing = worker_tracing(tracer_provider)
        runner = HookRunner if tracing is None else tracing.hook_runner
        hooks = tuple(hooks) + _unique_release(backend, unique_keys, self._routes.values())
        self._hooks = runner(hooks, self._clock, counts=self._counts)
        self._aio: AsyncRunner | None = None
        if any(route.is_async for route in self._routes.values()):
            # Imported here: a worker without async handlers never imports asyncio.
            from queuey_core.worker.asyncio_runner import AsyncRunner  # noqa: PLC0415

            self._aio = AsyncRunner(
                handle=self._handle,
                clock=self._clock,
                grace=timeout_grace,
                caps={q.name: q.async_concurrency for q in self._queues if q.async_concurrency},
                shared_cap=max(1, async_concurrency or self._concurrency),
                block_warning=loop_block_warning,
            )
        self._cancels = Cancels()
        self._dispatcher = Dispatcher(
            self._routes,
            handle=self._handle,
            clock=self._clock,
            job_timeout=job_timeout,
            timeout_grace=timeout_grace,
            hooks=self._hooks,
            aio=self._aio,
            cancels=self._cancels,
            gate=limits,
        )
        self._dispatch: Callable[[Delivery], None] = self._dispatcher.dispatch
        if tracing is not None:
            self._dispatch = tracing.around(self._dispatch)
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
    def limits(self) -> LimitGate | None:
        """The gate of the limits its jobs start under, if any."""
        return self._gate

    @property
    def handle(self) -> WorkerHandle:
        """A handle to stop this worker from another thread and read its counters."""
        return self._handle

    @property
    def backend(self) -> Backend:
        """Where this worker's deliveries come from."""
        return self._backend

    @property
    def job_types(self) -> frozenset[str]:
        """The job types this worker has a handler for."""
        return frozenset(self._routes)

    def cancel_async_jobs(self, wait: float = 1.0) -> int:
        """Cancel every running ``async def`` job, as a second signal does: each gets
        ``CancelledError`` (its ``finally`` blocks run) and its delivery is not settled
        (it goes back to the broker with the connection). Waits up to ``wait`` seconds;
        returns how many had not ended by then."""
        return 0 if self._aio is None else self._aio.cancel_all(wait)

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
        self._hooks.worker_starting(self)
        cancels = CancelsStart(self._backend, self._cancels)
        control: ControlServer | None = None
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
                handle.record_in_flight(1)
            events.put(item)

        handle.add_waker(stopping.set)
        if handle.is_shutdown():
            stopping.set()
        # Paused queues are not consumed until resumed (queuey_core.flow.pause).
        consumers = Consumers(self._backend, self._queues, sink, in_flight=handle.in_flight)
        threads: list[threading.Thread] = []
        try:
            try:
                consumers.start(stopping)  # logs which consumer failed to start
            except QueueyError as exc:
                errors.append(exc)
                stopping.set()
            if not stopping.is_set():
                # After the consumers: a control channel that connects in the background
                # must not delay the first delivery. Then the cancels, before any job runs
                # (deliveries wait in `events` meanwhile).
                control = self._serve_control(consumers)
                if self._gate is not None:
                    self._gate.start()
                cancels.wait()
                if self._aio is not None:
                    self._aio.start()
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
                self._hooks.worker_consuming(self)
                stopping.wait()

            # Stop the consumers first, then drain: a delivery that reached `events` has
            # left the broker's hands and must still be settled.
            logger.debug("worker draining")
            self._hooks.worker_draining(self)
            consumers.stop()
            for _ in threads:
                events.put(_STOP)
            for thread in threads:
                thread.join()
            if self._aio is not None:  # every async job was handed over: wait for them
                self._aio.drain()
        finally:
            handle.remove_waker(stopping.set)
            consumers.close()  # anything never processed goes back to the broker
            if control is not None:
                control.close()
            if self._gate is not None:  # after the drain: every slot was given back
                self._gate.stop()
            cancels.close()

        error = errors[0] if errors else None
        if self._close_backend:
            try:
                self._backend.close()
            except QueueyError as exc:
                logger.warning("backend close failed", exc_info=True)
                error = error or exc
        logger.info("worker stopped", extra={"settle_failures": handle.settle_failures()})
        self._hooks.worker_stopped(self)
        if error is not None:
            raise error

    def _serve_control(self, consumers: Consumers) -> ControlServer | None:
        """Start answering the control channel; a worker runs on without it if it cannot."""
        if self._counts is None or not isinstance(self._backend, SupportsControl):
            return None
        responder = ControlResponder(
            self,
            self._counts,
            clock=self._clock,
            on_shutdown=self._on_shutdown_request,
            secret=self._control_secret,
            on_pauses=consumers.look_now,
            paused=lambda: consumers.paused,
        )
        try:
            return self._backend.serve_control(responder)
        except QueueyError:
            logger.warning(
                "no control channel: `queuey workers` will not see this worker", exc_info=True
            )
            return None

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
            except BaseException:  # never expected: dispatch() settles every outcome itself
                logger.critical("worker bug while processing a delivery", exc_info=True)
            finally:
                self._handle.record_in_flight(-1)


def _unique_release(
    backend: Backend, keys: UniqueKeys | None, routes: Iterable[Route]
) -> tuple[WorkerHooks, ...]:
    """The hook that lets go of unique keys, where they are kept (``keys``, else the
    backend's own); none without. A handler of a unique job type and nowhere to keep
    its keys is a ConfigError: refused at start, never run unguarded."""
    if keys is None and isinstance(backend, HoldsUniqueKeys):
        keys = backend.unique_keys()
    if keys is None:
        if any(route.job_type.UNIQUE is not None for route in routes):
            from queuey_core.flow.unique_claims import NO_KEY_STORE  # noqa: PLC0415

            raise ConfigError(NO_KEY_STORE)
        return ()
    from queuey_core.flow.unique_release import UniqueRelease  # noqa: PLC0415

    return (UniqueRelease(keys),)
