"""Priorities and delays as a Producer and a Worker see them, on every backend: the
higher priority runs first, a delayed job never runs before its delay and runs after."""

from __future__ import annotations

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Worker
from tests.harness import WorkerEnv
from tests.support import Greet
from tests.support import start


def test_jobs_waiting_run_highest_priority_first_and_in_order_within_one(h: WorkerEnv) -> None:
    ran: list[str] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        ran.append(job.name)

    producer = h.producer()
    for name, priority in [("low-1", 0), ("high-1", 9), ("mid", 5), ("low-2", 0), ("high-2", 9)]:
        producer.enqueue(Greet(name=name), priority=priority)
    worker = Worker(h.backend, h.queues, [Handler(Greet, greet)], concurrency=1, clock=h.clock)
    running = start(worker, h)
    try:
        h.wait_for(lambda: len(ran) == 5)
    finally:
        running.stop()
    assert ran == ["high-1", "high-2", "mid", "low-1", "low-2"]


def test_a_delayed_job_runs_after_its_delay_and_not_before(h: WorkerEnv) -> None:
    ran: list[str] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        ran.append(job.name)

    worker = Worker(h.backend, h.queues, [Handler(Greet, greet)], clock=h.clock)
    running = start(worker, h)
    try:
        producer = h.producer()
        producer.enqueue(Greet(name="later"), delay=h.d(20))
        producer.enqueue(Greet(name="now"))
        h.wait_for(lambda: ran == ["now"])
        h.elapse(5)
        assert ran == ["now"], "a quarter of its delay in, the delayed job has not run"
        h.wait_for(lambda: ran == ["now", "later"])
    finally:
        running.stop()
