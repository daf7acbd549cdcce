"""The worker's part in workflows: reporting each member's start and end to its store.

Owns: :class:`WorkflowHook` (give it to ``Worker(hooks=[...])``; ``queuey worker`` adds
one when a job store is configured), the count of workflows started, finished and
failed, and :func:`started_before`, what a member's handler is told of earlier starts.

A member's end is recorded *before* its settle is sent (hooks run first): a worker that
dies in between leaves the message on the broker, and its redelivery's end changes
nothing but re-publishes what the first one left in the outbox. Must never: raise into
the worker (a store that stays down is logged; the sweep of the outbox catches up on
what was made ready), nor cost a job outside a workflow more than one attribute read.
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
from queuey_core.worker.hooks import WorkerHooks
from queuey_core.worker.running import RunningWorker
from queuey_core.workflows import tables
from queuey_core.workflows.engine import Workflows

logger = logging.getLogger(__name__)

#: Seconds between sweeps of the outbox (the first is at the worker's start), on a
#: ``queuey-workflow-sweep`` thread each.
SWEEP_EVERY = 10.0
#: Tries of a member's end before it is given up (a store down for longer): the waits
#: between them, in seconds.
RETRY_WAITS = (0.05, 0.25, 1.0, 3.0)
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
    ready; sweeps the outbox every :data:`SWEEP_EVERY` seconds while the worker consumes."""

    takes_envelopes = True

    def __init__(self, workflows: Workflows, *, clock: Clock | None = None) -> None:
        self._workflows = workflows
        self._store = workflows.store
        self._clock: Clock = clock or SystemClock()
        self._active = False
        self._timer: Timer | None = None
        self._sweeping = threading.Lock()
        self.started = 0
        """Workflows whose first member started on this worker."""
        self.finished = 0
        """Workflows whose last member succeeded on this worker."""
        self.failed = 0
        """Workflows failed by a member that ended on this worker."""
        self.unrecorded = 0
        """Member ends given up on after :data:`RETRY_WAITS` (the store stayed down)."""

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
        """Re-publish what the outbox holds for longer than a publish takes; how many."""
        if not self._sweeping.acquire(blocking=False):
            return 0
        try:
            return self._workflows.sweep()
        except JobStoreError as exc:
            logger.warning("workflow outbox not swept: %s", exc)
            return 0
        finally:
            self._sweeping.release()

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        """A job's event (the :class:`~queuey_core.worker.hooks.EnvelopeSink` protocol)."""
        workflow = envelope.workflow
        if workflow is None:
            return
        job_id = envelope.job_id
        if event == "started":
            found = self._try(lambda: self._store.started(str(job_id), self._clock.wall_ms()))
            if found is not None:
                _started_before[job_id] = found[0] > 1
                self.started += found[1]
            return
        _started_before.pop(job_id, None)
        outcome = _OUTCOMES.get(event)
        if outcome is None:
            return  # a retry or a deferral: the member has not ended
        kept = None
        if outcome == tables.SUCCEEDED and result is not None:
            kept, why = encode_result(result, MAX_RESULT)
            if kept is None:
                logger.warning("workflow member's result not passed on: %s", why)
        ending = self._try(
            lambda: self._store.ended(
                str(job_id), outcome=outcome, result=kept, error=text, now=self._clock.wall_ms()
            )
        )
        if ending is None:
            self.unrecorded += 1
            logger.error(
                "workflow %s: the end of member %s was not recorded (store down)",
                workflow,
                job_id,
                extra={"job_id": str(job_id), "job_type": envelope.job_type},
            )
            return
        if ending.workflow == tables.SUCCEEDED:
            self.finished += 1
        elif ending.workflow == tables.FAILED:
            self.failed += 1
        if ending.ready:
            self._workflows.publish(ending.ready)

    def _try(self, call: Any) -> Any:
        """``call()``, tried again after each of :data:`RETRY_WAITS` on a JobStoreError;
        None when every try failed."""
        for wait in (*RETRY_WAITS, None):
            try:
                return call()
            except JobStoreError as exc:
                if wait is None:
                    logger.error("workflow store: %s", exc)
                    return None
                time.sleep(wait)
        return None  # pragma: no cover - the loop returns

    def collector(self) -> Any:
        """The Prometheus collector of these counts (needs prometheus-client)."""
        from queuey_core.workflows.metrics import WorkflowCollector  # noqa: PLC0415

        return WorkflowCollector(self)
