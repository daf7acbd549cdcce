"""Every state a worker records, on every backend (memory and SQLite on the manual clock,
RabbitMQ in real time): the recorder sees hooks, never the backend."""

from __future__ import annotations

import uuid

from queuey_core import Deferred
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.results import JobRecord
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from tests.harness import WorkerEnv
from tests.support import Greet
from tests.support import Orphan
from tests.support import start


def record_in(h: WorkerEnv, store: JobStore, job_id: uuid.UUID, state: JobState) -> JobRecord:
    def there() -> bool:
        found = store.get(job_id)
        return found is not None and found.state is state

    h.wait_for(there)
    record = store.get(job_id)
    assert record is not None
    return record


def test_every_outcome_is_recorded_on_every_backend(h: WorkerEnv) -> None:
    store = open_job_store(f"memory://{uuid.uuid4().hex}")

    def handle(job: Greet, ctx: JobContext) -> object:
        if job.name == "flaky" and ctx.attempt == 1:
            raise Retryable("flaky failure")
        if job.name == "doomed":
            raise Fatal("cannot ever work")
        if job.name == "snooze" and ctx.deferrals == 0:
            raise Deferred(h.d(2), "rate limited")
        return {"hello": job.name}

    worker = Worker(
        h.backend, h.queues, [Handler(Greet, handle)], clock=h.clock, hooks=[JobRecorder(store)]
    )
    running = start(worker, h)
    producer = h.producer()
    try:
        ok = producer.enqueue(Greet(name="ada"))
        flaky = producer.enqueue(Greet(name="flaky"))
        doomed = producer.enqueue(Greet(name="doomed"))
        snooze = producer.enqueue(Greet(name="snooze"))
        orphan = producer.enqueue(Orphan(id=1))
        assert record_in(h, store, ok, JobState.SUCCEEDED).result == {"hello": "ada"}
        retried = record_in(h, store, flaky, JobState.SUCCEEDED)
        assert [a.outcome for a in retried.attempts] == [JobState.RETRYING, JobState.SUCCEEDED]
        assert record_in(h, store, doomed, JobState.DEAD_LETTERED).error.startswith("fatal")
        deferred = record_in(h, store, snooze, JobState.SUCCEEDED)
        assert [a.outcome for a in deferred.attempts] == [JobState.DEFERRED, JobState.SUCCEEDED]
        assert record_in(h, store, orphan, JobState.DEAD_LETTERED).attempts == ()
    finally:
        running.stop()
        store.close()
