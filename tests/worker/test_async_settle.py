"""Where an async job is settled: on the loop when its ack waits for nothing, on a
settle thread otherwise; and what a job in flight holds.

In memory on a ManualClock, as the other async handler tests.
"""

from __future__ import annotations

import threading

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import JobInfo
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core import WorkerHooks
from tests.harness import Memory
from tests.support import ALPHA
from tests.support import Greet
from tests.support import start
from tests.support import wait_for


class Where(WorkerHooks):
    """The thread each job event was told on, as (event, attempt, thread name)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int, str]] = []

    def _add(self, event: str, job: JobInfo) -> None:
        with self.lock:
            self.seen.append((event, job.attempt, threading.current_thread().name))

    def on_job_succeeded(self, job: JobInfo) -> None:
        self._add("succeeded", job)

    def on_job_failed(self, job: JobInfo) -> None:
        self._add("failed", job)


def test_a_success_in_memory_is_settled_on_the_loop_a_failure_on_a_settle_thread(
    mem: Memory,
) -> None:
    backend, producer, queues, clock = mem

    async def body(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retryable("first attempt fails")

    where = Where()
    worker = Worker(backend, queues, [Handler(Greet, body)], clock=clock, hooks=[where])
    running = start(worker, clock)
    producer.enqueue(Greet(name="ada"))
    # The retry settles the first delivery (acked, a new one published), then the success.
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    running.stop()

    assert len(where.seen) == 2, where.seen
    (failed, attempt_1, failed_on), (succeeded, attempt_2, succeeded_on) = where.seen
    assert (failed, attempt_1) == ("failed", 1)
    assert failed_on.startswith("queuey-async-settle-"), "a retry may wait: a settle thread"
    assert (succeeded, attempt_2) == ("succeeded", 2)
    assert succeeded_on == "queuey-asyncio", (
        "a memory delivery settles in process: its success is settled on the loop"
    )
    assert worker.handle.in_flight() == 0, "every delivery counted out once settled"


def test_many_async_jobs_in_memory_all_settle_and_leave_no_run_behind(mem: Memory) -> None:
    backend, producer, queues, clock = mem

    async def body(job: Greet, ctx: JobContext) -> None:
        return None

    worker = Worker(
        backend, queues, [Handler(Greet, body)], clock=clock, concurrency=2, async_concurrency=7
    )
    running = start(worker, clock)
    producer.enqueue_many([Greet(name=f"n{i}") for i in range(300)])
    wait_for(lambda: len(backend.acked(ALPHA)) == 300, clock)
    aio = worker._aio  # the runner: what it still tracks once every job is settled
    assert aio is not None
    wait_for(lambda: aio.running() == 0, clock)
    assert not aio._runs, "every run forgotten once its coroutine ended"
    running.stop()
    assert worker.handle.in_flight() == 0
