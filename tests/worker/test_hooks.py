"""Lifecycle hooks: every outcome reaches them, with its info; a broken hook changes nothing.

In memory on the manual clock: durations, ages and backoffs are the clock's, so they are
exact, and no test sleeps through a delay or a timeout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import JobInfo
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core import WorkerHooks
from queuey_core.worker.running import RunningWorker
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import Orphan
from tests.support import Ping
from tests.support import act_out
from tests.support import noop
from tests.support import start
from tests.support import stuck_on_first_attempt
from tests.support import two_slot_worker
from tests.support import wait_for

Event = tuple[str, JobInfo]


class Record(WorkerHooks):
    """Remembers every event, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self.worker_events: list[tuple[str, RunningWorker]] = []

    def _job(self, name: str, job: JobInfo) -> None:
        with self.lock:
            self.events.append((name, job))

    def _worker(self, name: str, worker: RunningWorker) -> None:
        with self.lock:
            self.worker_events.append((name, worker))

    def of(self, job_id: object) -> list[Event]:
        with self.lock:
            return [(name, info) for name, info in self.events if info.job_id == job_id]

    def names(self, job_id: object) -> list[str]:
        return [name for name, _ in self.of(job_id)]

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _ in self.events if n == name)

    def on_worker_starting(self, worker: RunningWorker) -> None:
        self._worker("starting", worker)

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        self._worker("consuming", worker)

    def on_worker_draining(self, worker: RunningWorker) -> None:
        self._worker("draining", worker)

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        self._worker("stopped", worker)

    def on_job_started(self, job: JobInfo) -> None:
        self._job("started", job)

    def on_job_succeeded(self, job: JobInfo) -> None:
        self._job("succeeded", job)

    def on_job_failed(self, job: JobInfo) -> None:
        self._job("failed", job)

    def on_job_deferred(self, job: JobInfo) -> None:
        self._job("deferred", job)

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        self._job("dead_lettered", job)

    def on_job_timed_out(self, job: JobInfo) -> None:
        self._job("timed_out", job)


class Broken(WorkerHooks):
    """Raises from every hook."""

    def __init__(self) -> None:
        self.calls = 0

    def _boom(self) -> None:
        self.calls += 1
        raise RuntimeError("hook exploded")

    def on_worker_starting(self, worker: RunningWorker) -> None:
        self._boom()

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        self._boom()

    def on_worker_draining(self, worker: RunningWorker) -> None:
        self._boom()

    def on_worker_stopped(self, worker: RunningWorker) -> None:
        self._boom()

    def on_job_started(self, job: JobInfo) -> None:
        self._boom()

    def on_job_succeeded(self, job: JobInfo) -> None:
        self._boom()

    def on_job_failed(self, job: JobInfo) -> None:
        self._boom()

    def on_job_deferred(self, job: JobInfo) -> None:
        self._boom()

    def on_job_dead_lettered(self, job: JobInfo) -> None:
        self._boom()

    def on_job_timed_out(self, job: JobInfo) -> None:
        self._boom()


def run_until(
    worker: Worker, clock: ManualClock, done: Callable[[], bool], *, step: float = 0.1
) -> None:
    running = start(worker, clock)
    wait_for(done, clock, step=step)
    running.stop()


def test_every_outcome_reaches_the_hooks_with_its_info(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    ran: dict[str, tuple[float, float]] = {}

    def greet(job: Greet, ctx: JobContext) -> None:
        before = clock.monotonic()
        clock.sleep(2)  # the handler's duration, on the manual clock
        ran[job.name] = (before, clock.monotonic())
        act_out(job.name, ctx)

    record = Record()
    worker = Worker(
        backend, queues, [noop(Ping), Handler(Greet, greet)], clock=clock, hooks=[record]
    )
    ok = producer.enqueue(Greet(name="ok"))
    flaky = producer.enqueue(Greet(name="flaky"))
    doomed = producer.enqueue(Greet(name="doomed"))
    snooze = producer.enqueue(Greet(name="snooze"))
    orphan = producer.enqueue(Orphan(id=1))
    bad = Envelope.for_job(Greet(name="x"), enqueued_at=clock.wall_ms())
    bad = bad.model_copy(update={"payload": {"not_a_name": 1}})
    backend.publish(bad)

    run_until(worker, clock, lambda: record.count("succeeded") == 3 and len(record.events) == 14)

    assert record.names(ok) == ["started", "succeeded"]
    assert record.names(flaky) == ["started", "failed", "started", "succeeded"]
    assert record.names(doomed) == ["started", "dead_lettered"]
    assert record.names(snooze) == ["started", "deferred", "started", "succeeded"]
    assert record.names(orphan) == ["dead_lettered"], "no handler: it never started"
    assert record.names(bad.job_id) == ["dead_lettered"], "bad payload: it never started"

    started, succeeded = (info for _, info in record.of(ok))
    assert (started.job_type, started.queue, started.attempt) == (Greet.NAME, ALPHA, 1)
    assert started.duration is None, "nothing has run yet when a job starts"
    assert started.enqueued_at == clock.wall_ms() - int(clock.monotonic() * 1000)
    assert succeeded.duration is not None
    # The clock runs on while the worker settles (the test drives it in steps of real
    # time, more of them on a loaded machine), so the duration is bounded by what the
    # handler saw of it, and by the job's age when it ended (ages are whole ms).
    before, after = ran["ok"]
    assert after - before >= 2
    assert after - before <= succeeded.duration <= succeeded.age + 0.001, (
        f"the handler ran {after - before:.3f}s, duration {succeeded.duration}, age {succeeded.age}"
    )
    assert succeeded.age >= started.age + 2

    failed = record.of(flaky)[1][1]
    assert failed.error == "flaky failure"
    assert failed.delay is not None
    assert failed.delay == 1, "the retry's backoff"
    retried = record.of(flaky)[2][1]
    assert retried.attempt == 2
    assert retried.age >= failed.age + failed.delay, "a retry's age counts its backoff"

    dead = record.of(doomed)[1][1]
    assert dead.reason == "fatal error: cannot ever work"
    assert dead.error == "cannot ever work"
    assert dead.duration is not None

    deferred = record.of(snooze)[1][1]
    assert (deferred.reason, deferred.delay, deferred.attempt) == ("rate limited", 30, 1)
    assert record.of(snooze)[2][1].deferrals == 1

    no_handler = record.of(orphan)[0][1]
    assert no_handler.job_type == Orphan.NAME
    assert no_handler.reason == f"no handler for job type {Orphan.NAME!r}"
    assert no_handler.duration is None
    assert record.of(bad.job_id)[0][1].reason.startswith("decode error")


def test_a_timed_out_job_is_reported_then_retried(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    record = Record()
    handlers = [Handler(Greet, stuck_on_first_attempt(clock))]
    worker = Worker(backend, queues, handlers, job_timeout=5, clock=clock, hooks=[record])
    job_id = producer.enqueue(Greet(name="slow"))
    run_until(worker, clock, lambda: record.count("succeeded") == 1)

    assert record.names(job_id) == ["started", "timed_out", "failed", "started", "succeeded"]
    timed_out = record.of(job_id)[1][1]
    assert timed_out.error == "job timed out after 5s"
    assert timed_out.duration is not None
    assert timed_out.duration >= 5
    assert record.of(job_id)[2][1].error == "job timed out after 5s"


def test_a_stuck_job_is_reported_once_and_its_thread_returning_adds_nothing(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    release = threading.Event()

    def greet(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            release.wait()  # inside C: the JobTimeout cannot land

    record = Record()
    worker = two_slot_worker(backend, queues, clock, greet, timeout_grace=2, hooks=[record])
    job_id = producer.enqueue(Greet(name="stuck"))
    running = start(worker, clock)
    wait_for(lambda: record.count("succeeded") == 1, clock)
    assert record.names(job_id) == ["started", "timed_out", "failed", "started", "succeeded"]
    release.set()
    wait_for(lambda: running.handle.stuck_jobs() == 0, clock)
    running.stop()
    assert len(record.of(job_id)) == 5, "the stuck thread's return is not an event"


def test_a_hook_that_raises_is_logged_and_changes_nothing(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    backend, producer, queues, clock = mem

    def greet(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retryable("once")

    broken = Broken()
    record = Record()
    worker = Worker(backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[broken, record])
    job_id = producer.enqueue(Greet(name="ada"))
    with caplog.at_level(logging.ERROR, logger="queuey_core.worker.hooks"):
        run_until(worker, clock, lambda: len(backend.acked(ALPHA)) == 2)

    assert record.names(job_id) == ["started", "failed", "started", "succeeded"], (
        "a later hook still hears everything"
    )
    assert [e.attempt for e in backend.acked(ALPHA)] == [1, 2], "the outcome is the handler's"
    assert backend.dead_letters(ALPHA) == []
    assert broken.calls == 8, "4 job events and 4 worker events, each one tried"
    failures = [r for r in caplog.records if r.name == "queuey_core.worker.hooks"]
    assert len(failures) == 8
    failed = [r for r in failures if "Broken.on_job_failed failed" in r.getMessage()]
    assert len(failed) == 1
    assert getattr(failed[0], "job_id", None) == str(job_id), "job events carry its fields"
    assert worker.handle.settle_failures() == 0


def test_worker_events_come_in_order_with_the_worker(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    record = Record()
    worker = Worker(backend, queues, [noop(Greet)], clock=clock, hooks=[record])
    running = start(worker, clock)
    wait_for(lambda: len(record.worker_events) == 2, clock)
    assert [name for name, _ in record.worker_events] == ["starting", "consuming"]
    running.stop()
    assert [name for name, _ in record.worker_events] == [
        "starting",
        "consuming",
        "draining",
        "stopped",
    ]
    assert all(w is worker for _, w in record.worker_events)


def test_a_worker_without_hooks_runs_as_before(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    worker = Worker(backend, queues, [noop(Greet)], clock=clock)
    producer.enqueue(Greet(name="ada"))
    run_until(worker, clock, lambda: len(backend.acked(ALPHA)) == 1)
    assert worker.job_types == frozenset({Greet.NAME})
    assert worker.backend is backend
    assert BETA not in worker.job_types


class OnlySucceeded(WorkerHooks):
    """Overrides one job event; the others stay the base class's no-ops."""

    def __init__(self) -> None:
        self.succeeded: list[JobInfo] = []

    def on_job_succeeded(self, job: JobInfo) -> None:
        self.succeeded.append(job)


def test_a_hook_gets_the_events_it_overrides_and_one_set_on_the_instance_too(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    spans: list[float] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        before = clock.monotonic()
        clock.sleep(2)
        spans.append(clock.monotonic() - before)

    only = OnlySucceeded()
    patched = WorkerHooks()
    started: list[JobInfo] = []
    patched.on_job_started = started.append  # type: ignore[method-assign, assignment]
    worker = Worker(backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[only, patched])
    job_id = producer.enqueue(Greet(name="ok"))

    run_until(worker, clock, lambda: len(only.succeeded) == 1)

    (info,) = only.succeeded
    assert info.job_id == job_id
    assert info.duration is not None
    # As above: the handler's own span and the job's age bound it, whatever the load.
    assert spans[0] >= 2
    assert spans[0] <= info.duration <= info.age + 0.001, "timed from its start"
    assert [s.job_id for s in started] == [job_id], "a method set on the instance is called"
    assert started[0].duration is None
