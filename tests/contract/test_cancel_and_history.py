"""Results, history and cancellation on every backend, each with the job store a user
would give it: memory with ``memory://``, the embedded file with its own file, RabbitMQ
with a SQLite and with a PostgreSQL store (docs/results.md)."""

from __future__ import annotations

import threading
import uuid

import pytest

from queuey_core import Backend
from queuey_core import Deferred
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.backends.capabilities import SupportsCancellation
from queuey_core.backends.capabilities import require
from queuey_core.results import JobRecord
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from tests.contract.conftest import Stored
from tests.support import Greet
from tests.support import Orphan
from tests.support import start


def record_in(s: Stored, job_id: uuid.UUID, state: JobState) -> JobRecord:
    """The store's record of ``job_id`` once it is in ``state`` (time passing meanwhile)."""

    def there() -> bool:
        found = s.store.get(job_id)
        return found is not None and found.state is state

    s.h.wait_for(there)
    record = s.store.get(job_id)
    assert record is not None
    return record


def test_every_outcome_is_recorded_with_its_result_and_attempts(stored: Stored) -> None:
    h = stored.h

    def handle(job: Greet, ctx: JobContext) -> object:
        if job.name == "flaky" and ctx.attempt == 1:
            raise Retryable("flaky failure")
        if job.name == "doomed":
            raise Fatal("cannot ever work")
        if job.name == "snooze" and ctx.deferrals == 0:
            raise Deferred(h.d(2), "rate limited")
        return {"hello": job.name}

    recorder = JobRecorder(stored.store)
    worker = Worker(h.backend, h.queues, [Handler(Greet, handle)], clock=h.clock, hooks=[recorder])
    running = start(worker, h)
    producer = h.producer()
    try:
        ok = producer.enqueue(Greet(name="ada"))
        flaky = producer.enqueue(Greet(name="flaky"))
        doomed = producer.enqueue(Greet(name="doomed"))
        snooze = producer.enqueue(Greet(name="snooze"))
        orphan = producer.enqueue(Orphan(id=1))
        assert record_in(stored, ok, JobState.SUCCEEDED).result == {"hello": "ada"}
        retried = record_in(stored, flaky, JobState.SUCCEEDED)
        assert [a.outcome for a in retried.attempts] == [JobState.RETRYING, JobState.SUCCEEDED]
        assert record_in(stored, doomed, JobState.DEAD_LETTERED).error.startswith("fatal")
        deferred = record_in(stored, snooze, JobState.SUCCEEDED)
        assert [a.outcome for a in deferred.attempts] == [JobState.DEFERRED, JobState.SUCCEEDED]
        assert record_in(stored, orphan, JobState.DEAD_LETTERED).attempts == ()
    finally:
        running.stop()


def canceller(stored: Stored) -> Backend:
    """Where a cancel comes from: another backend on the same queues (another process, as
    far as the broker knows) where there can be one, else the worker's own."""
    if stored.kind.supports("across_processes"):
        return stored.h.another_backend()
    return stored.h.backend


@pytest.mark.requires("cancellation")
def test_a_cancel_before_any_worker_and_one_while_the_job_runs_both_stop_it(
    stored: Stored,
) -> None:
    h = stored.h
    other = canceller(stored)
    cancels = require(other, SupportsCancellation, "the contract suite")
    producer = h.producer(other)
    early = producer.enqueue(Greet(name="early"))
    kept = producer.enqueue(Greet(name="kept"))
    cancels.cancel_jobs([early])  # before any worker exists

    ran: list[str] = []
    started = threading.Event()

    def patient(job: Greet, ctx: JobContext) -> None:
        ran.append(job.name)
        if job.name == "late":
            started.set()
            ctx.wait(600)  # woken by the cancel, never by the time
            ctx.raise_if_cancelled()

    recorder = JobRecorder(stored.store)
    worker = Worker(h.backend, h.queues, [Handler(Greet, patient)], clock=h.clock, hooks=[recorder])
    running = start(worker, h)
    try:
        record_in(stored, kept, JobState.SUCCEEDED)
        assert record_in(stored, early, JobState.CANCELLED).attempts == (), "it never ran"
        late = producer.enqueue(Greet(name="late"))
        h.wait_for(started.is_set)
        cancels.cancel_jobs([late])
        record = record_in(stored, late, JobState.CANCELLED)
    finally:
        running.stop()
        if other is not h.backend:
            other.close()
    assert [a.outcome for a in record.attempts] == [JobState.CANCELLED]
    assert ran == ["kept", "late"]
