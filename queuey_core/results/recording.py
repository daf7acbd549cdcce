"""Recording a worker's jobs in the job store, off the job threads.

Owns: :class:`JobRecorder`, a :class:`~queuey_core.worker.WorkerHooks` that notes each
job's start and hands each end to one writer thread through a bounded queue; the writer
makes :class:`~queuey_core.results.JobEvent` s of them (:mod:`.starts`) and writes
batches, itself or through a process of its own (:mod:`.writer_process`, ``[results]
writer``). Must never: block a job
thread, change or delay an outcome, or raise into the worker. A full queue or a store
that fails loses those events: they are logged and counted (:attr:`JobRecorder.unrecorded`,
the ``queuey_results_unrecorded_total`` metric), and the jobs are settled as they would
have been.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from queuey_core.results.encoding import DEFAULT_MAX_RESULT_SIZE
from queuey_core.results.records import JobEvent, JobState
from queuey_core.results.starts import Event, Raw, Start, Starts

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

from queuey_core.results.store import JobStore
from queuey_core.results.writer_process import WriterProcess
from queuey_core.worker.hooks import JobInfo, WorkerHooks
from queuey_core.worker.running import RunningWorker

logger = logging.getLogger(__name__)

_new = tuple.__new__

#: Seconds the writer lets events gather after a write, unless a batch is full. A busy
#: worker's batches carry about 250 events at 25 ms against 110 at 10 ms, and SQLite's
#: cost per job falls with the batch (a commit writes the index pages its rows land on):
#: recording's cost to a worker of no-op jobs went from 0.70 to about 0.8 of its rate.
#: A writer with nothing to do writes the next event at once; under load a record waits
#: for LINGER, its write and a waiter's next look (MAX_POLL of results.waiting, 10 ms):
#: inside the 50 ms that wait() is allowed.
LINGER = 0.025

_STATES = {
    "started": JobState.RUNNING,
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.RETRYING,
    "deferred": JobState.DEFERRED,
    "dead_lettered": JobState.DEAD_LETTERED,
    "cancelled": JobState.CANCELLED,
}

#: Seconds between two log lines about events that could not be recorded.
_LOG_EVERY = 30.0


class JobRecorder(WorkerHooks):
    """Records every job a worker runs in ``store``: give it to ``Worker(hooks=[...])``.

    A worker hands it each event through :meth:`job_event` (``takes_envelopes``), so
    no :class:`JobInfo` is built for it; the ``on_job_*`` methods do the same for
    callers that have a JobInfo.

    A job thread only appends its event to a deque (no lock; the writer is woken only
    when it sleeps); one writer thread takes up to ``batch`` events at a time and writes
    them in one transaction.

    Args:
        store: where records go: a store, or what opens one (called by the writer, again
            after each failure, so a store that is down when the worker starts is
            reached once it is up), or a :class:`WriterProcess` that writes them from a
            process of its own (``[results] writer``).
        max_result_size: results larger than this many bytes of JSON are not kept (the
            record says so in its ``error``, and the job still succeeds).
        capacity: ends of jobs (each with its start, if that was not written yet) and
            queued jobs waiting for the writer at most; more are counted and dropped.
        batch: events written in one transaction at most.
    """

    def __init__(
        self,
        store: JobStore | Callable[[], JobStore] | WriterProcess,
        *,
        max_result_size: int = DEFAULT_MAX_RESULT_SIZE,
        capacity: int = 10_000,
        batch: int = 500,
    ) -> None:
        self._process = store if isinstance(store, WriterProcess) else None
        self._store: JobStore | None = store if isinstance(store, JobStore) else None
        self._open = None if isinstance(store, (JobStore, WriterProcess)) else store
        # (JobInfo or envelope, state, at ms, error, result, ran, start): made JobEvents
        # by the writer, so a job thread builds no object of its own per event; the
        # result is the handler's object, encoded by the writer too.
        self._events: collections.deque[Raw] = collections.deque()
        self._starts = Starts(max_result_size)
        self._running = self._starts.running  # the job threads' side of it
        self._lost_starts: list[Start] = []  # of ends dropped (see _drop)
        self._capacity = capacity
        self._batch = batch
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._lock = threading.Lock()  # the writer's pops, flush's look, and drops
        self._taken = 0  # events the writer took off the deque
        self._settled = 0  # of those, written or counted lost
        self._begun = 0  # the writer's passes begun, and ended (see flush)
        self._passes = 0
        self._dropped = 0
        self._failed = 0
        self._written = 0
        self._batches = 0
        self._last_log = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._asleep = False
        self._wake = threading.Event()
        self._linger = threading.Event()  # set only to stop lingering at once
        self._progress = threading.Condition()

    @property
    def unrecorded(self) -> int:
        """Events lost so far: the queue was full, or the store refused their batch."""
        return self._failed + self._dropped

    @property
    def writer_process(self) -> WriterProcess | None:
        """The process that writes the records, or None when the writer thread does."""
        return self._process

    @property
    def written(self) -> int:
        """Events the store took so far."""
        return self._written

    @property
    def batches(self) -> int:
        """Batches handed to the store so far (written or not): ``written / batches``
        is how many events a commit carried."""
        return self._batches

    takes_envelopes = True

    # -- hooks -------------------------------------------------------------------------

    def on_worker_starting(self, worker: RunningWorker) -> None:
        """Start the writer."""
        self.start()

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        """Write what is left (for a few seconds at most), then stop the writer."""
        self.stop(timeout=5.0)

    def on_job_started(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.RUNNING)

    def on_job_succeeded(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`: the result is encoded by the writer."""
        self._put(job, JobState.SUCCEEDED, "", job.result)

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.RETRYING, job.error)

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.DEFERRED, job.reason)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.DEAD_LETTERED, job.reason, None, job.duration is not None)

    def on_job_cancelled(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.CANCELLED, job.reason, None, job.duration is not None)

    # -- the writer ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (idempotent)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(
                    target=self._write_loop, name="queuey-results-writer", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until every event handed over so far is written (or lost), and every job
        running now is written as running; False if that took longer than ``timeout``
        seconds."""
        with self._lock:
            target = self._taken + len(self._events)
            passes = self._begun + 1  # a pass that begins after now: it sees _running
        deadline = time.monotonic() + timeout
        self._wake.set()
        self._linger.set()
        try:
            with self._progress:
                while self._settled < target or self._passes < passes:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._thread is None or not self._thread.is_alive():
                        return False
                    self._progress.wait(min(left, 0.05))
            return True
        finally:
            if not self._stopping:
                self._linger.clear()

    def stop(self, *, timeout: float) -> None:
        """Write what is queued (up to ``timeout`` seconds), then end the writer."""
        thread = self._thread
        if thread is None:
            return
        self.flush(timeout)
        self._stopping = True
        self._linger.set()
        self._wake.set()
        thread.join(timeout)
        if self._process is not None:
            self._process.close(timeout)

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        """What a worker calls instead of the ``on_job_*`` methods (``takes_envelopes``).

        A start is only noted, and an end kept as a tuple with the envelope and the
        handler's result: the writer makes events of them and encodes the result
        (:mod:`.starts`). A worker hands the same envelope object to a job's start and
        end."""
        if event == "started":
            self._running[id(envelope)] = (envelope, int(time.time() * 1000))
            if self._asleep:
                self._wake.set()
            return
        state = _STATES.get(event)
        if state is None:
            return  # timed out: its outcome's event follows
        self._put(envelope, state, text, result, ran, self._running.pop(id(envelope), None))

    def record_queued(self, jobs: Any) -> None:
        """Record jobs just enqueued as queued, in the writer's next batch (what a
        :class:`~queuey_core.Producer` with a job store calls): each job has
        ``job_id``, ``job_type``, ``queue``, ``enqueued_at`` and ``attempt``."""
        for job in jobs:
            self._put(job, JobState.QUEUED)

    def _put(
        self,
        job: Any,
        state: JobState,
        error: str = "",
        result: object = None,
        ran: bool = True,
        start: Start | None = None,
    ) -> None:
        """``job``: a JobInfo or an envelope (both have the fields a JobEvent takes);
        ``start``: its start, taken out of the running jobs."""
        if len(self._events) >= self._capacity:
            self._drop(start)
            return
        self._events.append((job, state, int(time.time() * 1000), error, result, ran, start))
        if self._asleep:
            self._wake.set()

    def _drop(self, start: Start | None = None) -> None:
        """Count an event dropped. The start of a dropped end goes to the writer, which
        counts it lost too unless it wrote it."""
        with self._lock:
            self._dropped += 1
            if start is not None:
                self._lost_starts.append(start)
        self._log_lost(1, "the job store's queue is full (the store is slow or down)")

    def _write_loop(self) -> None:
        events = self._events
        if self._process is not None:
            self._process.start()
        while True:
            with self._lock:
                self._begun += 1
                raw = [events.popleft() for _ in range(min(self._batch, len(events)))]
                self._taken += len(raw)
                lost, self._lost_starts = self._lost_starts, []
                self._dropped += self._starts.lost(lost)
            batch = self._starts.prepare(raw)
            if batch:
                self._batches += 1
                try:
                    self._write(batch)
                except Exception as exc:
                    self._failed += len(batch)
                    self._log_lost(len(batch), f"the job store refused a batch: {exc}")
                else:
                    self._written += len(batch)
            with self._progress:
                self._settled += len(raw)
                self._passes += 1
                self._progress.notify_all()
            if not batch:
                if self._stopping:
                    return
                self._asleep = True
                if not events and not self._starts.unshown():  # again, now a job would wake us
                    self._wake.wait(1.0)
                self._asleep = False
                self._wake.clear()
                continue
            if len(events) < self._batch and not self._stopping:
                # Let a batch gather: a write a job costs the job threads the GIL and
                # a wake-up each; LINGER is far inside what wait() is allowed.
                self._linger.wait(LINGER)

    def _write(self, taken: list[Event]) -> None:
        if self._process is not None:
            self._process.write(self._host, self._pid, taken)
            return
        host, pid = self._host, self._pid
        # tuple.__new__: a NamedTuple's own __new__ is a Python function of 12
        # arguments, a tenth of what recording a job costs the writer.
        batch: list[JobEvent] = [
            _new(
                JobEvent,
                (
                    j.job_id,
                    j.job_type,
                    j.queue,
                    state,
                    at,
                    j.enqueued_at,
                    j.attempt,
                    host,
                    pid,
                    error,
                    result,
                    ran,
                ),
            )
            for j, state, at, error, result, ran in taken
        ]
        self._opened().write(batch)

    def _log_lost(self, count: int, why: str) -> None:
        now = time.monotonic()
        if now - self._last_log < _LOG_EVERY:
            return
        self._last_log = now
        logger.warning(
            "%d job event(s) not recorded: %s (%d so far; jobs are settled as usual)",
            count,
            why,
            self.unrecorded,
        )

    def _opened(self) -> JobStore:
        if self._store is None:
            assert self._open is not None
            self._store = self._open()
        return self._store

    def close(self) -> None:
        """Stop the writer and close a store this recorder opened."""
        self.stop(timeout=5.0)
        if self._open is not None and self._store is not None:
            self._store.close()
            self._store = None

    def collector(self) -> Collector:
        """The recorder's Prometheus metrics (``queuey_results_*``), for a registry."""
        from queuey_core.results.metrics import RecorderCollector  # noqa: PLC0415

        return RecorderCollector(self)
