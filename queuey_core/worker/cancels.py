"""What a worker knows of cancels: the ids cancelled, and the running jobs to tell.

Owns: :class:`Cancels` (the flags themselves are :mod:`queuey_core.cancel_flag`'s), fed
by the backend's
:meth:`~queuey_core.backends.capabilities.SupportsCancellation.watch_cancels`, asked by
the dispatcher before every run (a cancelled job is acked unrun) and while a job runs
(its ``ctx.cancelled`` is set). Must never: block the backend's thread (a set update
and an Event.set are all it does), or turn a timeout or a forced stop into a cancel: only
an id cancelled here makes an outcome "cancelled".
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence

from queuey_core.backends.capabilities import CancelWatch, SupportsCancellation

# Re-exported: the flag lives beneath both the worker and the asyncio side.
from queuey_core.cancel_flag import CancelEvent as CancelEvent  # noqa: PLC0414
from queuey_core.context import JobContext
from queuey_core.errors import QueueyError
from queuey_core.worker.outcome import Kind, Outcome

logger = logging.getLogger(__name__)

#: The reason a job cancelled before it ran is settled with.
NOT_RUN = "cancelled before it ran"


class Cancels:
    """The cancelled job ids a worker has seen, and the cancel flags of running jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Keyed by the ids' 128-bit ints: a UUID's hash is a Python call, an int's is not
        # (the dispatcher asks three times a job).
        self._ids: set[int] = set()
        self._running: dict[int, list[threading.Event]] = {}

    def add(self, job_ids: Sequence[uuid.UUID]) -> None:
        """Cancels came in: remember them, and set the flag of those running now."""
        with self._lock:
            self._ids.update(job_id.int for job_id in job_ids)
            flags = [flag for job_id in job_ids for flag in self._running.get(job_id.int, ())]
        for flag in flags:
            flag.set()

    def __contains__(self, job_id: uuid.UUID) -> bool:
        return job_id.int in self._ids  # a set lookup: atomic under the GIL

    def track(self, job_id: uuid.UUID, flag: threading.Event) -> None:
        """``job_id`` starts running with ``flag``; set it now if already cancelled (the
        cancel raced the start)."""
        key = job_id.int
        with self._lock:
            self._running.setdefault(key, []).append(flag)
            cancelled = key in self._ids
        if cancelled:
            flag.set()

    def untrack(self, job_id: uuid.UUID, flag: threading.Event) -> None:
        """The job's handler returned."""
        key = job_id.int
        with self._lock:
            flags = self._running.get(key)
            if flags is not None:
                if flag in flags:
                    flags.remove(flag)
                if not flags:
                    del self._running[key]

    def ended(self, ctx: JobContext, outcome: Outcome) -> Outcome:
        """A run of ``ctx``'s job ended with ``outcome``: its flag is untracked, and the
        outcome read against the cancels (:meth:`outcome`)."""
        self.untrack(ctx.job_id, ctx.cancel_event)
        return outcome if outcome.kind is Kind.SUCCESS else self.outcome(ctx.job_id, outcome)

    def outcome(self, job_id: uuid.UUID, outcome: Outcome) -> Outcome:
        """What ``outcome`` becomes: any failure of a cancelled job is its cancel (it is
        not retried), and a :class:`~queuey_core.errors.JobCancelled` of a job nobody
        cancelled (raised on a timeout or a forced stop) is a failure like any other."""
        if outcome.kind is Kind.SUCCESS:
            return outcome
        if job_id.int in self._ids:
            if outcome.kind is Kind.CANCELLED:
                return outcome
            return Outcome(
                Kind.CANCELLED, f"cancelled ({outcome.error})" if outcome.error else "cancelled"
            )
        if outcome.kind is Kind.CANCELLED:
            return Outcome(Kind.RETRYABLE, "JobCancelled raised but the job was not cancelled")
        return outcome


def watch_cancels(backend: object, cancels: Cancels) -> CancelWatch | None:
    """Start feeding ``cancels`` from ``backend`` (every cancel in its retention window is
    read before this returns); None when the backend has no cancels or cannot be read
    now: the worker runs on without them, and says so."""
    if not isinstance(backend, SupportsCancellation):
        return None
    try:
        return backend.watch_cancels(cancels.add)
    except QueueyError:
        logger.warning(
            "cancels cannot be read: `queuey cancel` will not reach this worker", exc_info=True
        )
        return None


class CancelsStart:
    """:func:`watch_cancels` on a thread of its own, so that the worker's consumers start
    while the backend reads its cancels.

    On RabbitMQ that read is a marker's round trip through a stream, the longest step of
    a worker's start (15-20 ms): side by side, the first job starts that much sooner. The
    worker calls :meth:`wait` before its job threads start, so no job runs before every
    cancel made before the start is known, as when the read came first.
    """

    def __init__(self, backend: object, cancels: Cancels) -> None:
        self._watch: CancelWatch | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if isinstance(backend, SupportsCancellation):  # else there is nothing to wait for
            self._thread = threading.Thread(
                target=self._run, args=(backend, cancels), name="queuey-cancels-start", daemon=True
            )
            self._thread.start()

    def _run(self, backend: object, cancels: Cancels) -> None:
        try:
            self._watch = watch_cancels(backend, cancels)
        except BaseException as exc:  # raised by wait(), on the worker's own thread
            self._error = exc

    def wait(self) -> CancelWatch | None:
        """The watch, once the cancels are read (None as :func:`watch_cancels` says);
        what the read raised, raised here."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._watch

    def close(self) -> None:
        """Stop the watch, once its start has ended (whether or not :meth:`wait` was
        called: a worker that stops during its start still closes it)."""
        if self._thread is not None:
            self._thread.join()
        if self._watch is not None:
            self._watch.close()
