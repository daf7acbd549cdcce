"""The worker's part in workflows: recording each member's start and end in its store.

Owns: :class:`WorkflowHook` (give it to ``Worker(hooks=[...])``; ``queuey worker`` adds
one when a job store is configured), the count of workflows started, finished and
failed, and :func:`started_before`, what a member's handler is told of earlier starts.

The hook is a guard (:mod:`queuey_core.worker.end_guard`): a member's start is recorded
before its handler runs, and its end *before* its settle is sent. A worker that dies in
between leaves the message on the broker, and its redelivery's end changes nothing but
re-publishes what the first one left in the outbox. A store out of reach holds the
member: it is deferred for :data:`HOLD_FOR` (attempt unchanged) instead of run, acked or
dead-lettered, so that no end is ever lost; when it comes back and the store answers,
its start and end are recorded as usual. Must never: raise into the worker, nor cost a
job outside a workflow more than one attribute read.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from queuey_core.clock import Clock, SystemClock, Timer
from queuey_core.context import JobContext
from queuey_core.errors import JobStoreError
from queuey_core.results.encoding import encode_result
from queuey_core.worker.end_guard import Hold
from queuey_core.worker.hooks import WorkerHooks
from queuey_core.worker.running import RunningWorker
from queuey_core.workflows import tables
from queuey_core.workflows.engine import Workflows

logger = logging.getLogger(__name__)

#: Seconds between sweeps of the outbox (the first is at the worker's start), on a
#: ``queuey-workflow-sweep`` thread each.
SWEEP_EVERY = 10.0
#: Seconds between expiries of finished workflows, run with a sweep.
EXPIRE_EVERY = 60.0
#: Waits (seconds) before a member's start or end is tried again on a store error, before
#: the member is held: a blip costs a moment, not a deferral. Short: it holds a job slot.
RETRY_WAITS = (0.05,)
#: Seconds a member waits, deferred, when its start or end could not be recorded.
HOLD_FOR = 5.0
#: The largest result a member passes on (bytes of JSON).
MAX_RESULT = 16 * 1024 * 1024

_OUTCOMES = {
    "succeeded": tables.SUCCEEDED,
    "dead_lettered": tables.FAILED,
    "cancelled": tables.CANCELLED,
}

# job id -> whether the member had started before its current run (read by the handler).
_started_before: dict[uuid.UUID, bool] = {}


def started_before(ctx: JobContext) -> bool:
    """Whether the workflow member ``ctx`` runs was started before, on any worker (a
    redelivery after a worker died, a republish from the outbox, a retry): a callback
    checks it before doing what must happen once. False outside a workflow, or in a
    worker without a :class:`WorkflowHook`."""
    return _started_before.get(ctx.job_id, False)


class WorkflowHook(WorkerHooks):
    """Records the starts and ends of workflow members, and publishes what they make
    ready; sweeps the outbox every :data:`SWEEP_EVERY` seconds while the worker consumes.

    ``hold_for``: seconds a member is deferred when the store cannot record it.
    """

    takes_envelopes = True
    guards_settles = True

    def __init__(
        self, workflows: Workflows, *, clock: Clock | None = None, hold_for: float = HOLD_FOR
    ) -> None:
        self._workflows = workflows
        self._store = workflows.store
        self._clock: Clock = clock or SystemClock()
        self._hold_for = hold_for
        self._active = False
        self._timer: Timer | None = None
        self._sweeping = threading.Lock()
        self._lock = threading.Lock()
        # Members whose end a guard call recorded: their end's event is not recorded again.
        self._guarded: set[uuid.UUID] = set()
        self._next_expiry = 0.0
        self.started = 0
        """Workflows whose first member started on this worker."""
        self.finished = 0
        """Workflows whose last member succeeded on this worker."""
        self._failed = 0
        self.held = 0
        """Member starts and ends the store could not record: each member was deferred."""

    @property
    def failed(self) -> int:
        """Workflows failed on this worker: by a member's end (dead-lettered, cancelled)
        or by a member its publish refused for good (a duplicate, an unroutable job)."""
        return self._failed + self._workflows.failed_at_publish

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        self._active = True
        self._schedule(0.0)

    def on_worker_draining(self, worker: RunningWorker) -> None:
        self._active = False
        timer = self._timer
        if timer is not None:
            timer.cancel()

    def _schedule(self, delay: float) -> None:
        if self._active:
            self._timer = self._clock.call_later(delay, self._fire)

    def _fire(self) -> None:
        # On the clock's thread: the sweep's I/O goes to a thread of its own, so that it
        # never holds up a job's timeout.
        threading.Thread(
            target=self._sweep_and_again, name="queuey-workflow-sweep", daemon=True
        ).start()

    def _sweep_and_again(self) -> None:
        try:
            self.sweep()
        finally:
            self._schedule(SWEEP_EVERY)

    def sweep(self) -> int:
        """Re-publish what the outbox holds for longer than a publish takes; how many.
        Every :data:`EXPIRE_EVERY` seconds, expire finished workflows too."""
        if not self._sweeping.acquire(blocking=False):
            return 0
        try:
            sent = self._workflows.sweep()
            self._expire()
            return sent
        except JobStoreError as exc:
            logger.warning("workflow outbox not swept: %s", exc)
            return 0
        finally:
            self._sweeping.release()

    def _expire(self) -> None:
        """Delete finished workflows past their retention, every :data:`EXPIRE_EVERY`."""
        now = self._clock.monotonic()
        if now < self._next_expiry:
            return
        self._next_expiry = now + EXPIRE_EVERY
        gone = self._workflows.expire()
        if gone:
            logger.info("%d finished workflows expired", gone)

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        """A job's event (the :class:`~queuey_core.worker.hooks.EnvelopeSink` protocol):
        what its handler was told of earlier starts is forgotten once it ends a run, and
        a final end no guard call recorded (a settle that could not even be built, and
        is dead-lettered instead) is recorded here, as well as the store lets it."""
        if envelope.workflow is None or event == "started":
            return
        job_id = envelope.job_id
        _started_before.pop(job_id, None)
        with self._lock:
            guarded = job_id in self._guarded
            self._guarded.discard(job_id)
        if guarded or event not in _OUTCOMES:
            return  # recorded already; or a retry or a deferral: the member goes on
        try:
            self._try(lambda: self._record_end(event, envelope, text, result))
        except JobStoreError as exc:
            logger.error(
                "workflow %s: the end of member %s was not recorded: %s",
                envelope.workflow,
                job_id,
                exc,
                extra={"job_id": str(job_id), "job_type": envelope.job_type},
            )

    def hold_start(self, envelope: Any) -> Hold | None:
        """Count a member's start before its handler runs; a Hold when the store cannot
        (the :class:`~queuey_core.worker.end_guard.SettleGuard` protocol)."""
        if envelope.workflow is None:
            return None
        job_id = envelope.job_id
        try:
            found = self._try(lambda: self._store.started(str(job_id), self._clock.wall_ms()))
        except JobStoreError as exc:
            return self._hold(envelope, "start", exc)
        if found is not None:
            _started_before[job_id] = found[0] > 1
            self.started += found[1]
        return None

    def hold_end(self, event: str, envelope: Any, text: str, result: object) -> Hold | None:
        """Record a member's final end and publish what it made ready; a Hold when the
        store cannot record it (the member is deferred and ends again later)."""
        if envelope.workflow is None:
            return None
        try:
            self._try(lambda: self._record_end(event, envelope, text, result))
        except JobStoreError as exc:
            return self._hold(envelope, "end", exc)
        with self._lock:  # its event, which follows, is not recorded again
            self._guarded.add(envelope.job_id)
        return None

    def _record_end(self, event: str, envelope: Any, text: str, result: object) -> None:
        """Record the final ``event`` of a member and publish what it made ready."""
        outcome = _OUTCOMES[event]
        kept = None
        if outcome == tables.SUCCEEDED and result is not None:
            kept, why = encode_result(result, MAX_RESULT)
            if kept is None:
                logger.warning("workflow member's result not passed on: %s", why)
        ending = self._store.ended(
            str(envelope.job_id),
            outcome=outcome,
            result=kept,
            error=text,
            now=self._clock.wall_ms(),
        )
        if ending.workflow == tables.SUCCEEDED:
            self.finished += 1
        elif ending.workflow == tables.FAILED:
            self._failed += 1
        if ending.ready:
            self._workflows.publish(ending.ready)

    def _hold(self, envelope: Any, what: str, exc: JobStoreError) -> Hold:
        self.held += 1
        logger.warning(
            "workflow %s: the %s of member %s not recorded (%s); deferred %gs",
            envelope.workflow,
            what,
            envelope.job_id,
            exc,
            self._hold_for,
            extra={"job_id": str(envelope.job_id), "job_type": envelope.job_type},
        )
        return Hold(self._hold_for, f"workflow store out of reach: the {what} waits")

    def _try(self, call: Any) -> Any:
        """``call()``, tried again after each of :data:`RETRY_WAITS` on a JobStoreError;
        the last one's error raised."""
        for wait in RETRY_WAITS:
            try:
                return call()
            except JobStoreError:
                time.sleep(wait)
        return call()

    def collector(self) -> Any:
        """The Prometheus collector of these counts (needs prometheus-client)."""
        from queuey_core.workflows.metrics import WorkflowCollector  # noqa: PLC0415

        return WorkflowCollector(self)
