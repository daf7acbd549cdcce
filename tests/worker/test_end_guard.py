"""Guards (queuey_core/worker/end_guard.py): a hook that could not record a job's start
or final end holds it, and the job is deferred instead of run, acked or dead-lettered.

In memory on the manual clock: the holds' delays pass as the clock is advanced.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core import WorkerHooks
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import LimitState
from queuey_core.flow.limit_stores import in_process
from queuey_core.worker.end_guard import Hold
from tests.harness import Memory
from tests.harness import MemoryEnv
from tests.support import ALPHA
from tests.support import Greet
from tests.support import Orphan
from tests.support import start
from tests.support import wait_for
from tests.worker.test_hooks import Record


class Charge(Job):
    NAME: ClassVar[str] = "test.guarded.charge"
    QUEUE: ClassVar[str] = ALPHA
    account: str
    n: int


class Guard(WorkerHooks):
    """Holds each job's first ``holds`` starts and ends of the named kind, then records."""

    guards_settles = True

    def __init__(self, *, starts: int = 0, ends: int = 0) -> None:
        self._lock = threading.Lock()
        self._starts, self._ends = starts, ends
        self.asked: list[tuple[str, int]] = []
        self.recorded: list[str] = []

    def hold_start(self, envelope: Envelope) -> Hold | None:
        with self._lock:
            self.asked.append(("start", envelope.deferrals))
            if self._starts > 0:
                self._starts -= 1
                return Hold(2.0, "store down: the start waits")
            return None

    def hold_end(self, event: str, envelope: Envelope, text: str, result: object) -> Hold | None:
        with self._lock:
            self.asked.append((event, envelope.deferrals))
            if self._ends > 0:
                self._ends -= 1
                return Hold(2.0, "store down: the end waits")
            self.recorded.append(f"{event}: {text}" if text else event)
            return None


def test_a_held_end_defers_the_job_and_its_next_run_ends_it_once(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    runs: list[tuple[int, int]] = []

    def greet(job: Greet, ctx: JobContext) -> str:
        runs.append((ctx.attempt, ctx.deferrals))
        return "hi"

    guard, record = Guard(ends=1), Record()
    worker = Worker(backend, queues, [Handler(Greet, greet)], clock=clock, hooks=[guard, record])
    job_id = producer.enqueue(Greet(name="ada"))
    running = start(worker, clock)
    wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    running.stop()
    assert runs == [(1, 0), (1, 1)], "run again after the hold, no attempt spent"
    assert record.names(job_id) == ["started", "deferred", "started", "succeeded"], (
        "the other hooks hear a deferral, not the end the guard held"
    )
    assert guard.recorded == ["succeeded"], "the end is recorded once"


def test_a_held_start_does_not_run_the_handler(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    runs: list[int] = []
    guard = Guard(starts=2)
    handler = Handler(Greet, lambda job, ctx: runs.append(ctx.deferrals))
    worker = Worker(backend, queues, [handler], clock=clock, hooks=[guard])
    producer.enqueue(Greet(name="ada"))
    running = start(worker, clock)
    wait_for(lambda: runs != [], clock)
    running.stop()
    assert runs == [2], "not run while its start was held"
    assert [a for a in guard.asked if a[0] == "start"] == [("start", 0), ("start", 1), ("start", 2)]


def test_a_held_end_of_a_job_that_never_ran_defers_its_dead_letter(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    guard = Guard(ends=1)
    handler = Handler(Greet, lambda job, ctx: None)
    worker = Worker(backend, queues, [handler], clock=clock, hooks=[guard])
    producer.enqueue(Orphan(id=1))
    running = start(worker, clock)
    wait_for(lambda: len(backend.dead_letters(ALPHA)) == 1, clock)
    running.stop()
    assert guard.recorded == ["dead_lettered: no handler for job type 'test.orphan'"]
    assert backend.dead_letters(ALPHA)[0].envelope.deferrals == 1, "dead-lettered after the hold"


def test_a_held_start_of_an_async_limited_job_gives_its_slot_back() -> None:
    h = MemoryEnv()
    book = LimitBook(
        [spec_from_table("one", {"concurrency": 1, "key": "account", "jobs": [Charge.NAME]})]
    )
    gate = LimitGate(book, LimitState(in_process(), book), clock=h.clock)
    ran: list[int] = []

    async def charge(job: Charge, ctx: JobContext) -> None:
        ran.append(job.n)

    guard = Guard(starts=1)
    handler = Handler(Charge, charge)
    worker = Worker(h.backend, h.queues, [handler], clock=h.clock, hooks=[guard], limits=gate)
    running = start(worker, h)
    try:
        h.producer().enqueue(Charge(account="acme", n=1))
        h.wait_for(lambda: guard.asked != [])
        h.producer().enqueue(Charge(account="acme", n=2))
        h.wait_for(lambda: sorted(ran) == [1, 2])
        assert ran == [2, 1], "the second ran while the first was held: the slot was free"
    finally:
        running.stop()
        gate.close()
