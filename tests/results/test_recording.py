"""A worker records every job's history in the store, off the job threads: results,
attempts, errors; and a store that is slow, full or gone never changes an outcome."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from queuey_core import Deferred
from queuey_core import Fatal
from queuey_core import JobContext
from queuey_core import Retryable
from queuey_core.results import JobEvent
from queuey_core.results import JobRecord
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from queuey_core.results.encoding import encode_result
from tests.harness import Memory
from tests.results.support import recording_worker
from tests.results.support import settled_record
from tests.support import Greet
from tests.support import Orphan
from tests.support import start
from tests.support import wait_for


class Summary(BaseModel):
    words: int


def handler(job: Greet, ctx: JobContext) -> object:
    if job.name == "flaky" and ctx.attempt == 1:
        raise Retryable("flaky failure")
    if job.name == "doomed":
        raise Fatal("cannot ever work")
    if job.name == "snooze" and ctx.deferrals == 0:
        raise Deferred(30, "rate limited")
    if job.name == "model":
        return Summary(words=3)
    if job.name == "huge":
        return "x" * 1000
    if job.name == "set":
        return {1, 2}
    return {"hello": job.name}


def test_every_outcome_is_recorded_with_its_attempts(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    recorder = JobRecorder(store)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    ada = producer.enqueue(Greet(name="ada"))
    flaky = producer.enqueue(Greet(name="flaky"))
    doomed = producer.enqueue(Greet(name="doomed"))
    snooze = producer.enqueue(Greet(name="snooze"))
    orphan = producer.enqueue(Orphan(id=1))

    done = settled_record(store, ada, clock, JobState.SUCCEEDED)
    assert done.result == {"hello": "ada"}
    assert [(a.number, a.host, a.pid) for a in done.attempts] == [
        (1, socket.gethostname(), os.getpid())
    ]
    assert done.attempts[0].ended_at is not None
    assert done.attempts[0].ended_at >= done.attempts[0].started_at

    retried = settled_record(store, flaky, clock, JobState.SUCCEEDED)
    assert [(a.number, a.outcome, a.error) for a in retried.attempts] == [
        (1, JobState.RETRYING, "flaky failure"),
        (2, JobState.SUCCEEDED, ""),
    ]
    dead = settled_record(store, doomed, clock, JobState.DEAD_LETTERED)
    assert dead.error == "fatal error: cannot ever work"
    assert dead.result is None
    deferred = settled_record(store, snooze, clock, JobState.SUCCEEDED)
    assert [a.outcome for a in deferred.attempts] == [JobState.DEFERRED, JobState.SUCCEEDED]
    assert deferred.attempts[0].error == "rate limited"
    unrun = settled_record(store, orphan, clock, JobState.DEAD_LETTERED)
    assert unrun.attempts == (), "a job with no handler never ran"
    assert "no handler" in unrun.error
    running.stop()
    assert recorder.unrecorded == 0


def test_results_are_json_a_model_or_refused_with_a_reason(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    recorder = JobRecorder(store, max_result_size=100)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    model = producer.enqueue(Greet(name="model"))
    huge = producer.enqueue(Greet(name="huge"))
    odd = producer.enqueue(Greet(name="set"))

    assert settled_record(store, model, clock, JobState.SUCCEEDED).result == {"words": 3}
    too_big = settled_record(store, huge, clock, JobState.SUCCEEDED)
    assert too_big.result is None
    assert too_big.error == (
        "result not kept: 1002 bytes is over the limit of 100 bytes ([results] max_result_size)"
    )
    not_json = settled_record(store, odd, clock, JobState.SUCCEEDED)
    assert not_json.result is None
    assert not_json.error.startswith("result not kept: not JSON (TypeError")
    running.stop()
    assert len(backend.acked(queues[Greet.QUEUE].name)) == 3, "every job still succeeded"


def test_a_job_still_running_is_recorded_as_running_and_then_as_one_attempt(
    mem: Memory, store: JobStore
) -> None:
    backend, producer, queues, clock = mem
    release = threading.Event()

    def slow(job: Greet, ctx: JobContext) -> object:
        release.wait(30)
        return {"done": job.name}

    recorder = JobRecorder(store)
    running = start(recording_worker(backend, queues, clock, slow, recorder), clock)
    job = producer.enqueue(Greet(name="long"))
    seen = settled_record(store, job, None, JobState.RUNNING)
    [attempt] = seen.attempts
    assert attempt.ended_at is None
    release.set()
    done = settled_record(store, job, None, JobState.SUCCEEDED)
    assert done.result == {"done": "long"}
    assert [(a.started_at, a.outcome) for a in done.attempts] == [
        (attempt.started_at, JobState.SUCCEEDED)
    ], "the end closed the attempt its start opened"
    running.stop()
    assert recorder.unrecorded == 0


def test_flush_writes_the_jobs_running_now(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    release = threading.Event()
    started = threading.Event()

    def slow(job: Greet, ctx: JobContext) -> None:
        started.set()
        release.wait(30)

    recorder = JobRecorder(store)
    running = start(recording_worker(backend, queues, clock, slow, recorder), clock)
    try:
        job = producer.enqueue(Greet(name="long"))
        assert started.wait(10)
        assert recorder.flush(10)
        record = store.get(job)
        assert record is not None
        assert record.state is JobState.RUNNING
    finally:
        release.set()
        running.stop()


class Exploding(dict[str, int]):
    """A result whose encoding raises what no JSON encoder expects."""

    def items(self) -> Any:
        raise RuntimeError("changed while it was read")


def test_a_result_that_breaks_its_encoding_is_refused_and_the_writer_goes_on(
    mem: Memory, store: JobStore
) -> None:
    backend, producer, queues, clock = mem

    def odd(job: Greet, ctx: JobContext) -> object:
        return Exploding(a=1) if job.name == "odd" else {"hello": job.name}

    recorder = JobRecorder(store)
    running = start(recording_worker(backend, queues, clock, odd, recorder), clock)
    bad = producer.enqueue(Greet(name="odd"))
    good = producer.enqueue(Greet(name="ada"))
    refused = settled_record(store, bad, clock, JobState.SUCCEEDED)
    assert refused.result is None
    assert refused.error == "result not kept: RuntimeError: changed while it was read"
    assert settled_record(store, good, clock, JobState.SUCCEEDED).result == {"hello": "ada"}
    running.stop()
    assert len(backend.acked(queues[Greet.QUEUE].name)) == 2


class _Gate:
    """A real store whose writes wait until the test opens the gate (a slow store)."""

    def __init__(self, inner: JobStore) -> None:
        self.inner = inner
        self.gate = threading.Event()

    def get(self, job_id: uuid.UUID | str) -> JobRecord | None:
        return self.inner.get(job_id)

    def search(self, **filters: Any) -> list[JobRecord]:
        return self.inner.search(**filters)

    def write(self, events: Sequence[JobEvent]) -> None:
        self.gate.wait(30)
        self.inner.write(events)

    def close(self) -> None:
        self.inner.close()


def test_a_slow_store_never_holds_a_job_back(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    slow = _Gate(store)
    recorder = JobRecorder(slow)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    ids = [producer.enqueue(Greet(name=f"n{i}")) for i in range(20)]
    alpha = queues[Greet.QUEUE].name
    wait_for(lambda: len(backend.acked(alpha)) == 20, clock)
    assert store.get(ids[-1]) is None, "nothing could be written yet"
    slow.gate.set()
    for job_id in ids:
        settled_record(store, job_id, clock, JobState.SUCCEEDED)
    running.stop()
    assert recorder.unrecorded == 0


def test_a_full_queue_drops_and_counts_instead_of_waiting(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    slow = _Gate(store)
    recorder = JobRecorder(slow, capacity=4, batch=1)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    for i in range(10):
        producer.enqueue(Greet(name=f"n{i}"))
    alpha = queues[Greet.QUEUE].name
    wait_for(lambda: len(backend.acked(alpha)) == 10, clock)
    slow.gate.set()
    running.stop()
    assert recorder.written + recorder.unrecorded == 20, "two events a job, each counted"
    # The queue holds jobs' ends, each with its start: at most the queue's 4 and one
    # batch's 1 were kept, two events each.
    assert recorder.unrecorded >= 20 - 2 * (4 + 1), "at most the queue and one batch were kept"


def test_a_store_gone_mid_run_loses_records_not_jobs(mem: Memory, tmp_path: object) -> None:
    backend, producer, queues, clock = mem
    store = open_job_store(f"sqlite:///{tmp_path}/jobs.db")
    recorder = JobRecorder(store)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    first = producer.enqueue(Greet(name="before"))
    settled_record(store, first, clock, JobState.SUCCEEDED)
    store.close()  # the store goes away in the middle of the run
    for i in range(5):
        producer.enqueue(Greet(name=f"after{i}"))
    alpha = queues[Greet.QUEUE].name
    wait_for(lambda: len(backend.acked(alpha)) == 6, clock)
    wait_for(lambda: recorder.unrecorded == 10)
    running.stop()
    assert recorder.written == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, 2.5, "é", None, True]}, '{"a":[1,2.5,"é",null,true]}'),
        ({1: "x"}, '{"1":"x"}'),
        ("plain", '"plain"'),
        (7, "7"),
    ],
)
def test_a_result_is_kept_as_compact_json(value: object, expected: str) -> None:
    assert encode_result(value, 1000) == (expected, "")


def test_a_result_that_is_not_json_or_too_large_is_refused_with_why() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    for value in ({"x": float("nan")}, [{1, 2}], cycle):
        text, why = encode_result(value, 1000)
        assert text is None
        assert why.startswith("result not kept: not JSON ("), why
    text, why = encode_result({"k": "é" * 30}, 40)
    assert text is None
    assert "68 bytes is over the limit of 40 bytes" in why, "bytes of UTF-8, not characters"
