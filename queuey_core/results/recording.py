"""Recording a worker's jobs in the job store, off the job threads.

Owns: :class:`JobRecorder`, a :class:`~queuey_core.worker.WorkerHooks` that turns each
job event into a :class:`~queuey_core.results.JobEvent` and hands it to one writer
thread through a bounded queue; the writer writes batches. Must never: block a job
thread, change or delay an outcome, or raise into the worker. A full queue or a store
that fails loses those events: they are logged and counted (:attr:`JobRecorder.unrecorded`,
the ``queuey_results_unrecorded_total`` metric), and the jobs are settled as they would
have been.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel

from queuey_core.results.records import JobEvent, JobState

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

from queuey_core.results.store import JobStore
from queuey_core.worker.hooks import JobInfo, RunningWorker, WorkerHooks

logger = logging.getLogger(__name__)

#: Default largest result kept, in bytes of JSON (``[results] max_result_size``).
DEFAULT_MAX_RESULT_SIZE = 64 * 1024

#: Seconds between two log lines about events that could not be recorded.
_LOG_EVERY = 30.0

_STOP = object()


def encode_result(value: object, limit: int) -> tuple[str | None, str]:
    """``value`` as JSON text, or None and why it is not kept (too large, not JSON)."""
    try:
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        else:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        return None, f"result not kept: not JSON ({type(exc).__name__}: {exc})"
    size = len(text.encode("utf-8"))
    if size > limit:
        return None, (
            f"result not kept: {size} bytes is over the limit of {limit} bytes "
            "([results] max_result_size)"
        )
    return text, ""


class JobRecorder(WorkerHooks):
    """Records every job a worker runs in ``store``: give it to ``Worker(hooks=[...])``.

    Args:
        store: where records go: a store, or what opens one (called by the writer, again
            after each failure, so a store that is down when the worker starts is
            reached once it is up).
        max_result_size: results larger than this many bytes of JSON are not kept (the
            record says so in its ``error``, and the job still succeeds).
        capacity: events waiting for the writer at most; more are counted and dropped.
        batch: events written in one transaction at most.
    """

    def __init__(
        self,
        store: JobStore | Callable[[], JobStore],
        *,
        max_result_size: int = DEFAULT_MAX_RESULT_SIZE,
        capacity: int = 10_000,
        batch: int = 500,
    ) -> None:
        self._store: JobStore | None = store if isinstance(store, JobStore) else None
        self._open = None if isinstance(store, JobStore) else store
        self._limit = max_result_size
        self._queue: queue.Queue[object] = queue.Queue(capacity)
        self._batch = batch
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._unrecorded = 0
        self._written = 0
        self._last_log = 0.0
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending = 0

    @property
    def unrecorded(self) -> int:
        """Events lost so far: the queue was full, or the store refused their batch."""
        return self._unrecorded

    @property
    def written(self) -> int:
        """Events the store took so far."""
        return self._written

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
        """See :class:`WorkerHooks`: the result is encoded here, on the job's thread."""
        if job.result is None:
            self._put(job, JobState.SUCCEEDED)
            return
        text, why = encode_result(job.result, self._limit)
        if why:
            logger.error("%s", why, extra={"job_id": str(job.job_id), "job_type": job.job_type})
        self._put(job, JobState.SUCCEEDED, error=why, result=text)

    def on_job_failed(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.RETRYING, error=job.error)

    def on_job_deferred(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.DEFERRED, error=job.reason)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.DEAD_LETTERED, error=job.reason, ran=job.duration is not None)

    def on_job_cancelled(self, job: JobInfo) -> None:
        """See :class:`WorkerHooks`."""
        self._put(job, JobState.CANCELLED, error=job.reason, ran=job.duration is not None)

    # -- the writer ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (idempotent)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._write_loop, name="queuey-results-writer", daemon=True
                )
                self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait until every event handed over so far is written (or lost); False if that
        took longer than ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def stop(self, *, timeout: float) -> None:
        """Write what is queued (up to ``timeout`` seconds), then end the writer."""
        thread = self._thread
        if thread is None:
            return
        self.flush(timeout)
        try:
            self._queue.put(_STOP, timeout=1.0)
        except queue.Full:
            return
        thread.join(timeout)

    def _put(
        self,
        job: JobInfo,
        state: JobState,
        *,
        error: str = "",
        result: str | None = None,
        ran: bool = True,
    ) -> None:
        event = JobEvent(
            job.job_id,
            job.job_type,
            job.queue,
            state,
            at=int(time.time() * 1000),
            enqueued_at=job.enqueued_at,
            attempt=job.attempt,
            host=self._host,
            pid=self._pid,
            error=error,
            result=result,
            ran=ran,
        )
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self._lost(1, "the job store's queue is full (the store is slow or down)")

    def _write_loop(self) -> None:
        while True:
            events = list(self._take())
            stop = bool(events) and events[-1] is _STOP
            batch: list[JobEvent] = [e for e in events if isinstance(e, JobEvent)]
            if batch:
                try:
                    self._opened().write(batch)
                except Exception as exc:
                    self._lost(len(batch), f"the job store refused a batch: {exc}")
                else:
                    with self._idle:
                        self._written += len(batch)
                        self._settled(len(batch))
            if stop:
                return

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

    def _take(self) -> Iterator[object]:
        """The next events: waits for one, then takes what is there, up to a batch."""
        first = self._queue.get()
        yield first
        if first is _STOP:
            return
        for _ in range(self._batch - 1):
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            yield item
            if item is _STOP:
                return

    def _lost(self, count: int, why: str) -> None:
        with self._idle:
            self._unrecorded += count
            self._settled(count)
            now = time.monotonic()
            quiet = now - self._last_log < _LOG_EVERY
            if not quiet:
                self._last_log = now
        if not quiet:
            logger.warning(
                "%d job event(s) not recorded: %s (%d so far; jobs are settled as usual)",
                count,
                why,
                self._unrecorded,
            )

    def _settled(self, count: int) -> None:
        self._pending -= count
        if self._pending <= 0:
            self._pending = 0
            self._idle.notify_all()
