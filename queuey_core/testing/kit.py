"""The testing kit: a producer, a real worker and a manual clock, stepped by the test.

:class:`QueueyKit` runs a real :class:`~queuey_core.Worker` (its dispatcher, hooks, job
timeout, retry policy, async event loop, cancels, limits, unique keys and workflows) on
the in-memory backend or a SQLite file of its own, on a :class:`~queuey_core.ManualClock`.
The only thing that differs from production is *when* a job runs: the backend's
deliveries wait at a gate (:mod:`.gate`) until the test runs one (:meth:`QueueyKit.run`)
or all of them (:meth:`QueueyKit.drain`), and time moves only when the test moves it.

Owns: stepping the worker and waiting (in real time, bounded) for what it does. Must
never: run a handler itself, or decide an outcome: both are the worker's.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from queuey_core.backends.capabilities import SupportsCancellation, require
from queuey_core.errors import KitError
from queuey_core.handlers import JobHandler, discover
from queuey_core.jobs import Job
from queuey_core.queues import QueueConfig, QueueSet
from queuey_core.settings import Settings
from queuey_core.testing.build import BackendName, KitParts
from queuey_core.testing.gate import Key, key_of
from queuey_core.testing.gate_handles import Entry
from queuey_core.testing.limits import KitClock
from queuey_core.testing.outcomes import (
    SIGNALS,
    Enqueued,
    JobOutcome,
    OutcomeRecorder,
    Running,
    catching,
    held_outcome,
)
from queuey_core.testing.pauses import KitPauses
from queuey_core.testing.setup import Consuming, handlers_from, queue_set, read_settings
from queuey_core.testing.workflows import Startable
from queuey_core.worker import WorkerHooks
from queuey_core.workflows import Workflows, WorkflowView

J = TypeVar("J", bound=Job)

#: Real seconds the kit waits for the worker (a job to finish, a message to arrive)
#: before it fails the test: generous, as a loaded CI machine needs.
DEFAULT_WAIT = 60.0
#: A run's ``elapse`` moves the clock in this many steps while the job runs (of at least
#: :data:`ELAPSE_STEP` seconds each): a timeout fires within a step of its time.
ELAPSE_STEPS = 100
ELAPSE_STEP = 0.1
#: Seconds a job may still be held and run anyway (the kit moves the clock on): the
#: SQLite file rounds a delay to whole milliseconds, so ``advance(delay)`` can fall
#: a millisecond short of it.
MS_ROUNDING = 0.0015
#: Jobs :meth:`QueueyKit.drain` runs before it decides the queues never empty.
DEFAULT_MAX_JOBS = 1000


class QueueyKit(KitPauses):
    """Jobs enqueued, run and inspected inside one test.

    Args:
        handlers: handlers (or modules of them) to run; by default every handler
            registered under the ``queuey.handlers`` entry points.
        queues: the queue set; by default the queues of ``config`` (or of
            ``./queuey.toml`` or ``$QUEUEY_CONFIG`` when there is one), else a queue with
            default settings for each queue the handlers name.
        config: a queuey.toml to take the queues, ``[limits.*]`` and ``[unique.*]`` from.
        backend: ``"memory"`` (default) or ``"sqlite"``: a file of the kit's own, in
            ``path`` (a directory) or a temporary one.
        job_timeout: the worker's job timeout, on the kit's clock (a queue's own wins).
        hooks: more worker hooks (your metrics or middleware), told of every job.
        raise_errors: raise, in the test, an exception a handler raised that is not one
            of queuey's signals (:class:`~queuey_core.Retryable`,
            :class:`~queuey_core.Fatal`, :class:`~queuey_core.Deferred`, ``JobCancelled``),
            with the handler's own traceback, once the worker has settled the job. On by
            default: in a test, a ``KeyError`` is a bug to see, not a retry to schedule.
        wait: real seconds to wait for the worker before failing with :class:`KitError`.
    """

    def __init__(
        self,
        handlers: Iterable[object] | None = None,
        *,
        queues: QueueSet | Iterable[QueueConfig] | None = None,
        config: str | Path | None = None,
        backend: BackendName = "memory",
        path: str | Path | None = None,
        job_timeout: float | None = None,
        hooks: Iterable[WorkerHooks] = (),
        raise_errors: bool = True,
        wait: float = DEFAULT_WAIT,
    ) -> None:
        found: list[JobHandler] = (
            [d.handler for d in discover()] if handlers is None else handlers_from(handlers)
        )
        settings = read_settings(config)
        self.queues = queue_set(queues, settings, found)
        self.clock = KitClock()
        self.raise_errors = raise_errors
        self._wait = wait
        self._recorder = OutcomeRecorder()
        self._consuming = threading.Event()
        self.outcomes: list[JobOutcome] = []
        """Every outcome :meth:`run` and :meth:`drain` returned, in order."""
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="queuey-kit-worker", daemon=True)
        consuming = Consuming(self._consuming)
        self._parts = parts = KitParts(
            backend,
            path,
            settings=settings or Settings(),
            queues=self.queues,
            handlers=found,
            run=[catching(h, self._recorder) for h in found],
            clock=self.clock,
            hooks=[self._recorder, consuming, *hooks],
            job_timeout=job_timeout,
        )
        self.backend = parts.backend
        self.producer = parts.producer
        self.worker = parts.worker
        self.limits = parts.limits
        """The limits' gate (a :class:`~queuey_core.flow.limit_gate.LimitGate`) when the
        config or the job types declare limits, else None: its ``key_counts()`` say what
        runs, is reserved and is parked per limit and key."""
        self._flows = parts.flows
        consuming.gate = parts.backend.gate
        try:
            self._thread.start()
            self._until(self._consuming.is_set, "the worker to start consuming")
        except BaseException:
            self.close()
            raise

    # -- enqueueing and looking -----------------------------------------------------

    def enqueue(
        self,
        job: Job,
        *,
        delay: float | None = None,
        priority: int | None = None,
        job_id: uuid.UUID | str | None = None,
    ) -> uuid.UUID:
        """Enqueue ``job`` with the kit's producer (see :meth:`Producer.enqueue`)."""
        return self.producer.enqueue(job, delay=delay, priority=priority, job_id=job_id)

    def enqueued(self, job_type: type[J]) -> list[Enqueued[J]]:
        """Jobs of ``job_type`` waiting to run (ready, or held by a delay), soonest due
        first; each is typed, with its envelope's details."""
        now = self.backend.gate.timing.now()
        found: list[Enqueued[J]] = []
        for entry in self.backend.gate.waiting():
            env = entry.envelope
            if env.job_type != job_type.NAME:
                continue
            found.append(
                Enqueued(
                    job=env.decode_job(job_type),
                    job_id=env.job_id,
                    queue=env.queue,
                    priority=env.priority,
                    attempt=env.attempt,
                    deferrals=env.deferrals,
                    delay=max(0.0, entry.due - now),
                    envelope=env,
                )
            )
        return found

    def advance(self, seconds: float) -> None:
        """Move the kit's clock forward: delays, retries and deferrals due by then
        become ready to run (nothing runs until :meth:`run` or :meth:`drain`)."""
        self.clock.advance(seconds)

    def cancel(self, job_id: uuid.UUID) -> None:
        """Cancel a job, as ``queuey cancel`` does: unrun, it is acked without running;
        running, its context's cancellation flag is set."""
        require(self.backend, SupportsCancellation, "the kit's cancel").cancel_jobs([job_id])

    # -- running ---------------------------------------------------------------------

    def run(self, job: Job | Enqueued[Any] | uuid.UUID, *, elapse: float = 0.0) -> JobOutcome:
        """Run one job through the worker, and return how it ended.

        ``job`` is a job to enqueue now and run, or one already waiting (an
        :class:`Enqueued`, or a job id). ``elapse``: seconds of clock time to let pass
        while the job runs (in :data:`ELAPSE_STEPS` steps), to reach a job timeout.

        Raises:
            KitError: the job is not waiting, is held by a delay the clock has not
                passed, or the worker did not finish it in ``wait`` real seconds.
            Exception: what the handler raised, with ``raise_errors``.
        """
        return self._run(self._ready(job), elapse)

    @contextlib.contextmanager
    def running(self, job: Job | Enqueued[Any] | uuid.UUID) -> Iterator[Running]:
        """Start one job and hold its handler at its start while the ``with`` block runs
        (what the test runs meanwhile runs beside it: a second job of a concurrency
        limit's key, a duplicate of a job that is running); the handler goes on when the
        block ends, and the :class:`Running` it gives has the outcome then.

        Raises:
            KitError: as :meth:`run`, or the job did not start (a limit held it: the
                message says how).
        """
        entry = self._ready(job)
        key = key_of(entry.envelope)
        hold = self._recorder.hold(key)
        try:
            self.backend.gate.release(entry)
            self._until(lambda: hold.started.is_set() or entry.settled, f"job {key[0]} to start")
        except BaseException:  # never a handler held for ever
            hold.go.set()
            raise
        if not hold.started.is_set():
            self._recorder.take_hold(key)
            outcome = self._finish(entry, 0.0)
            raise KitError(f"job {key[0]} did not start: {outcome.reason or outcome.status}")
        held = Running(key[0])
        try:
            yield held
        finally:
            hold.go.set()
            held.outcome = self._finish(entry, 0.0)

    def start_workflow(self, workflow: Startable) -> uuid.UUID:
        """Start a workflow (a :class:`~queuey_core.workflows.Workflow`, or a shape:
        ``chain(...)``, ``group(...)``, a ``Graph``) as ``Workflows.start`` does: its first
        members are enqueued; :meth:`drain` runs them and what their ends make ready."""
        return self._flows.start(workflow)

    def workflow(self, workflow_id: uuid.UUID | str) -> WorkflowView:
        """A workflow's state (``.state``: running, succeeded, failed, cancelled; its
        ``.error``) and each member's (``.nodes``: job type, state, result, error).

        Raises:
            KitError: no workflow of that id was started in this kit.
        """
        return self._flows.view(workflow_id)

    @property
    def workflows(self) -> Workflows:
        """The kit's :class:`~queuey_core.workflows.Workflows` (``cancel``, ``get``), its
        store in the kit; give it to code under test that starts workflows."""
        return self._flows.workflows

    def _ready(self, job: Job | Enqueued[Any] | uuid.UUID) -> Entry:
        """The entry of ``job`` (enqueued now if a job), waiting and due, handed out
        by the backend."""
        if isinstance(job, Job):
            key: Key = (self.enqueue(job), 1, 0)
        elif isinstance(job, Enqueued):
            key = key_of(job.envelope)
        else:
            key = self._key_of_id(job)
        gate = self.backend.gate
        entry = gate.entry(key)
        if entry is None or entry.released:
            raise KitError(f"job {key[0]} is not waiting to run (it ran, or was never enqueued)")
        queue = entry.envelope.queue
        if not gate.consumed(queue):
            raise KitError(f"job {key[0]} waits in {queue}, paused: kit.resume({queue!r}) first")
        timing = gate.timing
        held = entry.due - timing.now()
        if held > MS_ROUNDING:
            raise KitError(
                f"job {key[0]} is held for {held:g}s more (a delay, a retry's backoff or a "
                f"deferral): advance the clock first (kit.advance({held:g}))"
            )
        # Within the SQLite file's rounding of a delay to whole milliseconds: move on.
        self.clock.advance(timing.step_to(entry.due))
        self._until(lambda: gate.deliverable(entry), f"job {key[0]} to reach the worker")
        return entry

    def drain(
        self, *, advance_time: bool = False, max_jobs: int = DEFAULT_MAX_JOBS
    ) -> list[JobOutcome]:
        """Run jobs until none is ready, jobs enqueued by jobs included; returns their
        outcomes in order (highest priority first, then oldest).

        With ``advance_time``, the clock then jumps to the next held job (a delay, a
        retry's backoff, a deferral) and draining goes on, until nothing is left at all.

        Raises:
            KitError: more than ``max_jobs`` ran (a job that re-enqueues itself for
                ever?), or the worker did not finish one in ``wait`` real seconds.
            Exception: what a handler raised, with ``raise_errors`` (draining stops).
        """
        ran: list[JobOutcome] = []
        gate = self.backend.gate
        while True:
            self._until(lambda: gate.due_missing() == 0, "due jobs to reach the worker")
            entry = gate.next_ready()
            if entry is None:
                due = gate.next_due()
                if not advance_time or due is None:
                    return ran
                self.clock.advance(gate.timing.step_to(due))
                continue
            if len(ran) >= max_jobs:
                raise KitError(
                    f"drain ran {max_jobs} jobs and jobs are still waiting: does a job "
                    "enqueue itself for ever? (max_jobs= raises the limit)"
                )
            ran.append(self._run(entry, 0.0))

    def close(self) -> None:
        """Stop the worker (waiting for a running job) and close the backend."""
        if self._thread.is_alive():  # (the worker exists: the thread started after it)
            self.worker.handle.shutdown()
            self._thread.join(self._wait)
        self._parts.close()

    def __enter__(self) -> QueueyKit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # surfaced by the next wait of the test
            self._error = exc

    def _key_of_id(self, job_id: uuid.UUID) -> Key:
        for entry in self.backend.gate.waiting():
            if entry.envelope.job_id == job_id:
                return key_of(entry.envelope)
        raise KitError(f"job {job_id} is not waiting to run (it ran, or was never enqueued)")

    def _run(self, entry: Entry, elapse: float) -> JobOutcome:
        __tracebackhide__ = True  # pytest: a handler's error shows from the test to it
        self.backend.gate.release(entry)
        return self._finish(entry, elapse)

    def _finish(self, entry: Entry, elapse: float) -> JobOutcome:
        """Wait for the worker to settle ``entry`` (letting ``elapse`` clock seconds
        pass meanwhile), and for what follows a limited job's settle; its outcome."""
        __tracebackhide__ = True
        key = key_of(entry.envelope)
        gate = self.backend.gate
        left = elapse
        step = max(ELAPSE_STEP, elapse / ELAPSE_STEPS)
        deadline = time.monotonic() + self._wait
        while not entry.settled:
            self._check_worker()
            if time.monotonic() > deadline:
                raise KitError(
                    f"job {key[0]} ({entry.envelope.job_type}) still running after "
                    f"{self._wait:g}s of real time: does its handler wait on real time, "
                    "or for a timeout the clock never reaches (run(..., elapse=...))?"
                )
            if left > 0:
                self.clock.advance(min(step, left))
                left -= step
                gate.wait(0.001)
            else:
                gate.wait(0.05)
        limits = self.limits
        held = limits.take_held(key) if limits is not None else None
        outcome = held_outcome(entry.envelope, held) if held else self._recorder.outcome(key)
        if outcome is None:  # settled with no job event: a bug of the kit's
            raise KitError(f"job {key[0]} was settled but the worker told no outcome")
        if limits is not None and not outcome.timed_out:
            # A park's let-go publish, a run's give-back: after the settle, before the
            # next look. (A timed-out thread that never returns keeps its slot, as ever.)
            job_id = str(key[0])
            self._until(lambda: not limits.settling(job_id), f"job {key[0]}'s limits")
        self.outcomes.append(outcome)
        error = outcome.error
        if self.raise_errors and isinstance(error, Exception) and not isinstance(error, SIGNALS):
            raise error
        return outcome

    def _until(self, cond: Any, what: str) -> None:
        deadline = time.monotonic() + self._wait
        while not cond():
            self._check_worker()
            if time.monotonic() > deadline:
                raise KitError(f"gave up waiting {self._wait:g}s of real time for {what}")
            self.backend.gate.wait(0.01)

    def _check_worker(self) -> None:
        if self._error is not None:
            raise KitError(f"the kit's worker stopped: {self._error}") from self._error
        if not self._thread.is_alive() and not self.worker.handle.is_shutdown():
            raise KitError("the kit's worker stopped")
