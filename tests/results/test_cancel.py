"""Cancels stick: a queued or delayed job never runs, a running one is told through
``ctx.cancelled`` and stops with JobCancelled, a worker that starts after the cancel
still sees it, and each outcome is recorded and counted. In memory, on the manual clock."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from queuey_core import JobContext
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.base import Sink
from queuey_core.backends.capabilities import CancelListener
from queuey_core.backends.memory_cancels import _Watch
from queuey_core.backends.memory_queue import MemorySubscription
from queuey_core.clock import ManualClock
from queuey_core.errors import JobCancelled
from queuey_core.errors import MissingCapabilityError
from queuey_core.observability import WorkerMetrics
from queuey_core.results import CancelVerdict
from queuey_core.results import JobEvent
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import cancel_jobs
from tests.harness import Memory
from tests.results.support import recording_worker
from tests.results.support import settled_record
from tests.support import Greet
from tests.support import start
from tests.support import wait_for


def cancelled_count(metrics: WorkerMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "queuey_jobs_total", {"job_type": Greet.NAME, "outcome": "cancelled"}
    )
    return value or 0.0


def test_a_job_cancelled_before_any_worker_started_never_runs(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    ran: list[str] = []
    job = producer.enqueue(Greet(name="never"))
    later = producer.enqueue(Greet(name="later"), delay=3600)
    assert cancel_jobs(backend, [job, later]) == {
        job: CancelVerdict.UNCHECKED,
        later: CancelVerdict.UNCHECKED,
    }
    metrics = WorkerMetrics(process_metrics=False)
    worker = recording_worker(
        backend, queues, clock, lambda j, _: ran.append(j.name), JobRecorder(store), hooks=[metrics]
    )
    running = start(worker, clock)
    record = settled_record(store, job, clock, JobState.CANCELLED)
    assert record.attempts == ()
    assert record.error == "cancelled before it ran"
    clock.advance(3600)
    settled_record(store, later, clock, JobState.CANCELLED)
    running.stop()
    assert ran == [], "a cancelled job's handler never runs"
    assert cancelled_count(metrics) == 2
    assert backend.pending(queues[Greet.QUEUE].name) == 0, "acked, not left on the queue"


def test_a_running_job_is_told_and_its_cancel_is_recorded(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    started = threading.Event()
    seen: list[bool] = []

    def patient(job: Greet, ctx: JobContext) -> None:
        started.set()
        while not ctx.wait(0.01):
            pass
        seen.append(ctx.cancelled)
        ctx.raise_if_cancelled()

    running = start(recording_worker(backend, queues, clock, patient, JobRecorder(store)), clock)
    job = producer.enqueue(Greet(name="long"))
    assert started.wait(10)
    settled_record(store, job, None, JobState.RUNNING)
    assert cancel_jobs(backend, [job], store=store) == {job: CancelVerdict.CANCELLED}
    record = settled_record(store, job, None, JobState.CANCELLED)
    running.stop()
    assert seen == [True]
    assert [(a.outcome, a.error) for a in record.attempts] == [
        (JobState.CANCELLED, "cancelled while it ran")
    ]
    assert backend.dead_letters(queues[Greet.QUEUE].name) == [], "never dead-lettered"


def test_a_failure_after_a_cancel_is_the_cancel_not_a_retry(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    started = threading.Event()
    calls: list[int] = []

    def sloppy(job: Greet, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        started.set()
        ctx.wait(30)
        raise RuntimeError("stopped half-way")

    running = start(recording_worker(backend, queues, clock, sloppy, JobRecorder(store)), clock)
    job = producer.enqueue(Greet(name="x"))
    assert started.wait(10)
    cancel_jobs(backend, [job])
    settled_record(store, job, clock, JobState.CANCELLED)
    clock.advance(600)
    running.stop()
    assert calls == [1], "never retried"


def test_a_handler_that_finishes_anyway_succeeds(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    started, go = threading.Event(), threading.Event()

    def stubborn(job: Greet, ctx: JobContext) -> str:
        started.set()
        go.wait(10)
        return "done"

    running = start(recording_worker(backend, queues, clock, stubborn, JobRecorder(store)), clock)
    job = producer.enqueue(Greet(name="x"))
    assert started.wait(10)
    cancel_jobs(backend, [job])
    go.set()
    assert settled_record(store, job, clock, JobState.SUCCEEDED).result == "done"
    running.stop()


def test_job_cancelled_on_a_timeout_is_a_failure_not_a_cancel(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem

    def raises(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise JobCancelled("nobody cancelled me")

    running = start(recording_worker(backend, queues, clock, raises, JobRecorder(store)), clock)
    job = producer.enqueue(Greet(name="x"))
    record = settled_record(store, job, clock, JobState.SUCCEEDED)
    running.stop()
    assert [a.outcome for a in record.attempts] == [JobState.RETRYING, JobState.SUCCEEDED]


def test_a_cancel_racing_the_start_either_stops_it_or_keeps_it_from_running(
    mem: Memory, store: JobStore
) -> None:
    backend, producer, queues, clock = mem
    ran: list[uuid.UUID] = []

    def cooperative(job: Greet, ctx: JobContext) -> None:
        ran.append(ctx.job_id)
        for _ in range(100):
            ctx.raise_if_cancelled()
            ctx.wait(0.001)

    running = start(
        recording_worker(backend, queues, clock, cooperative, JobRecorder(store)), clock
    )
    ids = []
    for i in range(30):
        job = producer.enqueue(Greet(name=f"r{i}"))
        ids.append(job)
        threading.Thread(target=cancel_jobs, args=(backend, [job])).start()
    records = [settled_record(store, job, clock, JobState.CANCELLED) for job in ids]
    running.stop()
    for record in records:
        if record.job_id in ran:
            assert [a.outcome for a in record.attempts] == [JobState.CANCELLED]
        else:
            assert record.attempts == ()


def test_cancel_says_what_the_store_knows(mem: Memory, store: JobStore) -> None:
    backend, _, _, _ = mem
    done, waiting, nobody = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    t = int(time.time() * 1000)
    store.write(
        [
            JobEvent(done, Greet.NAME, "q", JobState.SUCCEEDED, at=t, enqueued_at=t, ran=False),
            JobEvent(waiting, Greet.NAME, "q", JobState.QUEUED, at=t, enqueued_at=t),
        ]
    )
    verdicts = cancel_jobs(backend, [done, waiting, nobody], store=store)
    assert verdicts == {
        done: CancelVerdict.FINISHED,
        waiting: CancelVerdict.CANCELLED,
        nobody: CancelVerdict.UNKNOWN,
    }
    waited = store.get(waiting)
    assert waited is not None
    assert waited.state is JobState.CANCELLED, "a waiting job is marked at once"
    seen: list[uuid.UUID] = []
    backend.watch_cancels(seen.extend).close()
    assert sorted(seen) == sorted([waiting, nobody]), "a finished job is not cancelled"


def test_a_backend_without_cancels_says_so(queues: QueueSet) -> None:
    with pytest.raises(MissingCapabilityError, match="cannot cancel jobs"):
        cancel_jobs(object(), [uuid.uuid4()])


def test_cancels_reach_a_second_backend_only_through_its_own_log() -> None:
    # Two memory backends are two brokers: a cancel on one is not seen by the other.
    a, b = MemoryBackend(), MemoryBackend()
    job = uuid.uuid4()
    a.cancel_jobs([job])
    seen: list[uuid.UUID] = []
    b.watch_cancels(seen.extend).close()
    assert seen == []


class CancelsReadLate(MemoryBackend):
    """Reads its cancels only once a consumer has started: a broker's read of its cancels
    (a stream's round trip) can end after the consumer's start."""

    def __init__(self, *, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.consuming = threading.Event()

    def consume(self, queue: QueueConfig, sink: Sink) -> MemorySubscription:
        sub = super().consume(queue, sink)
        self.consuming.set()
        return sub

    def watch_cancels(self, listener: CancelListener) -> _Watch:
        # A worker that read its cancels before it consumed would wait here in vain.
        assert self.consuming.wait(10), "the consumers start while the cancels are read"
        return super().watch_cancels(listener)


def test_the_consumers_start_while_the_cancels_are_read_and_no_job_runs_before(
    queues: QueueSet, store: JobStore
) -> None:
    clock = ManualClock()
    backend = CancelsReadLate(clock=clock)
    producer = Producer(backend, queues)
    ran: list[str] = []
    cancelled = producer.enqueue(Greet(name="cancelled"))
    producer.enqueue(Greet(name="kept"))
    cancel_jobs(backend, [cancelled])
    worker = recording_worker(
        backend, queues, clock, lambda j, _: ran.append(j.name), JobRecorder(store)
    )
    running = start(worker, clock)
    record = settled_record(store, cancelled, clock, JobState.CANCELLED)
    assert record.error == "cancelled before it ran"
    wait_for(lambda: ran == ["kept"], clock)
    running.stop()
    assert ran == ["kept"], "delivered before the read ended, the cancelled job still never ran"
