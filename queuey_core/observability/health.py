"""Health: is the worker alive (``/healthz``) and ready for jobs (``/readyz``)?

Owns: the worker's lifecycle state as its hooks report it, and the two checks. Alive:
the run loop's thread and every connection's I/O thread run, and no connection has given
up recovering; a stuck job thread is reported but is not, by itself, a reason to restart
the process. Ready: alive, consuming, every connection open, and RabbitMQ delivering
from every queue (not while starting, reconnecting, draining or stopped, nor while the
broker leaves a consume unanswered). Must never: block on the broker (a check reads
state that the worker's threads keep up to date) or import pika.
"""

from __future__ import annotations

import enum
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from queuey_core.backends.capabilities import ConnectionReporting, LinkStatusLike
from queuey_core.worker.hooks import WorkerHooks
from queuey_core.worker.running import RunningWorker


class WorkerState(enum.StrEnum):
    """Where a worker is in its run."""

    STARTING = "starting"
    CONSUMING = "consuming"
    DRAINING = "draining"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Check:
    """The answer of a health check: ok or not, why not, and what was looked at."""

    ok: bool
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def body(self) -> bytes:
        """The check as a JSON document, for the HTTP response."""
        data = {"ok": self.ok, "reason": self.reason or None, **self.details}
        return (json.dumps(data, sort_keys=True) + "\n").encode()


class WorkerStatus(WorkerHooks):
    """Follows one worker's lifecycle through its hooks and answers the health checks.

    Give it to ``Worker(..., hooks=[...])`` (:class:`WorkerMetrics` holds one and passes
    the events on). Until the worker's ``run()`` begins, it is alive and not ready.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = WorkerState.STARTING
        self._worker: RunningWorker | None = None
        self._run_thread: threading.Thread | None = None

    @property
    def state(self) -> WorkerState:
        """Where the worker is in its run."""
        with self._lock:
            return self._state

    @property
    def worker(self) -> RunningWorker | None:
        """The worker, once its ``run()`` began."""
        with self._lock:
            return self._worker

    def connections(self) -> dict[str, LinkStatusLike]:
        """The worker's broker connections by role; empty if its backend does not say."""
        worker = self.worker
        backend = worker.backend if worker is not None else None
        if not isinstance(backend, ConnectionReporting):
            return {}
        return dict(backend.connection_status())

    # -- hooks -------------------------------------------------------------------------

    def on_worker_starting(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`: remembers the worker and its run loop's thread."""
        with self._lock:
            self._worker = worker
            self._run_thread = threading.current_thread()
            self._state = WorkerState.STARTING

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self._set(WorkerState.CONSUMING)

    def on_worker_draining(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self._set(WorkerState.DRAINING)

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        """See :class:`WorkerHooks`."""
        self._set(WorkerState.STOPPED)

    def _set(self, state: WorkerState) -> None:
        with self._lock:
            self._state = state

    # -- checks ------------------------------------------------------------------------

    def liveness(self) -> Check:
        """Alive: running, its threads are there, and no connection gave up recovering."""
        details = self._details()
        reason = self._dead_reason(details)
        return Check(not reason, reason, details)

    def readiness(self) -> Check:
        """Ready: alive, consuming, every connection open, and the broker delivering from
        every queue subscribed to."""
        details = self._details()
        reason = self._dead_reason(details)
        if not reason and details["worker"] != WorkerState.CONSUMING:
            reason = f"the worker is {details['worker']}"
        if not reason:
            for role, link in details["connections"].items():
                if link["state"] != "open":
                    reason = f"the {role} connection is {link['state']}"
                    break
                if link["unanswered"]:
                    queues = ", ".join(link["unanswered"])
                    reason = f"RabbitMQ is not delivering from {queues} (consume unanswered)"
                    break
        return Check(not reason, reason, details)

    def _dead_reason(self, details: dict[str, Any]) -> str:
        if details["worker"] == WorkerState.STOPPED:
            return "the worker has stopped"
        if details["run_loop_alive"] is False:
            return "the worker's run loop thread has ended"
        for role, link in details["connections"].items():
            if link["state"] == "dead":
                return f"the {role} connection is dead: recovery gave up"
            if link["state"] != "closed" and not link["thread_alive"]:
                return f"the {role} connection's I/O thread has ended"
        return ""

    def _details(self) -> dict[str, Any]:
        with self._lock:
            state, worker, thread = self._state, self._worker, self._run_thread
        details: dict[str, Any] = {
            "worker": state,
            "run_loop_alive": thread.is_alive() if thread is not None else None,
            "connections": {
                role: {
                    "state": link.state,
                    "reconnects": link.reconnects,
                    "thread_alive": link.thread_alive,
                    # Only RabbitMQ's consumer link reports these; other backends have none.
                    "unanswered": list(getattr(link, "unanswered", ())),
                }
                for role, link in sorted(self.connections().items())
            },
        }
        if worker is not None:
            handle = worker.handle
            details.update(
                concurrency=worker.concurrency,
                in_flight=handle.in_flight(),
                stuck_job_threads=handle.stuck_jobs(),
                settle_failures=handle.settle_failures(),
            )
        return details
