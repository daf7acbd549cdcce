"""``async def`` handlers: their results are recorded, and a cancel reaches a coroutine
that awaits its context (``wait_async``), which then stops with JobCancelled."""

from __future__ import annotations

import threading

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import cancel_jobs
from tests.harness import Memory
from tests.results.support import settled_record
from tests.support import Greet
from tests.support import start


def test_an_async_result_is_recorded_and_a_cancel_stops_it(mem: Memory, store: JobStore) -> None:
    backend, producer, queues, clock = mem
    started = threading.Event()

    async def greet(job: Greet, ctx: JobContext) -> object:
        if job.name == "long":
            started.set()
            await ctx.wait_async(600)
            ctx.raise_if_cancelled()
        return {"hello": job.name}

    worker = Worker(
        backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[JobRecorder(store)]
    )
    running = start(worker, clock)
    try:
        ok = producer.enqueue(Greet(name="ada"))
        assert settled_record(store, ok, clock, JobState.SUCCEEDED).result == {"hello": "ada"}
        long = producer.enqueue(Greet(name="long"))
        assert started.wait(20)
        cancel_jobs(backend, [long])
        record = settled_record(store, long, clock, JobState.CANCELLED)
    finally:
        running.stop()
    assert [a.outcome for a in record.attempts] == [JobState.CANCELLED]
