"""The limits' store out of reach: limited jobs wait (fail closed), none runs outside its
limit, none is lost, none spends an attempt; jobs without limits are not held up."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import ClassVar

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import JobHandler
from queuey_core import Worker
from queuey_core.errors import LimitStateError
from queuey_core.flow.limit_gate import STORE_DOWN_DELAY
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import Execute
from queuey_core.flow.limit_state import LimitState
from queuey_core.flow.limit_stores import SqlConnector
from queuey_core.flow.limit_stores import in_process
from tests.harness import MemoryEnv
from tests.support import ALPHA
from tests.support import Greet
from tests.support import start


class Charge(Job):
    NAME: ClassVar[str] = "test.charge"
    QUEUE: ClassVar[str] = ALPHA
    account: str


class Unplugged:
    """An in-process store that can be taken out of reach, as a network cut would."""

    def __init__(self) -> None:
        self.inner: SqlConnector = in_process()
        self.prefix = self.inner.prefix
        self.placeholder = self.inner.placeholder
        self.down = threading.Event()
        self.refused = 0

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Execute]:
        if self.down.is_set():
            self.refused += 1
            raise LimitStateError("limits' state: connection refused")
        with self.inner.transaction() as execute:
            yield execute

    def close(self) -> None:
        self.inner.close()


def test_limited_jobs_wait_while_the_store_is_out_of_reach_and_none_is_lost() -> None:
    h = MemoryEnv()
    book = LimitBook(
        [spec_from_table("mutex", {"concurrency": 1, "key": "account", "jobs": [Charge.NAME]})]
    )
    store = Unplugged()
    gate = LimitGate(book, LimitState(store, book), clock=h.clock)
    lock = threading.Lock()
    running: dict[str, int] = {}
    most = 0
    ran: list[tuple[str, int]] = []
    greeted: list[str] = []

    def charge(job: Charge, ctx: JobContext) -> None:
        nonlocal most
        with lock:
            running[job.account] = running.get(job.account, 0) + 1
            most = max(most, running[job.account])
            ran.append((job.account, ctx.attempt))
        h.sleep(0.5)
        with lock:
            running[job.account] -= 1

    handlers: list[JobHandler] = [
        Handler(Charge, charge),
        Handler(Greet, lambda job, _: greeted.append(job.name)),
    ]
    worker = Worker(h.backend, h.queues, handlers, concurrency=4, clock=h.clock, limits=gate)
    running_worker = start(worker, h)
    try:
        store.down.set()
        producer = h.producer()
        for _ in range(3):
            producer.enqueue(Charge(account="acme"))
        producer.enqueue(Greet(name="unlimited"))
        h.wait_for(lambda: store.refused >= 3 and greeted == ["unlimited"])
        assert ran == [], "no limited job ran while its limit could not be checked"
        h.elapse(STORE_DOWN_DELAY * 2)  # they come back, and wait again
        assert ran == []
        store.down.clear()
        h.wait_for(lambda: len(ran) == 3 and not any(running.values()))
    finally:
        store.down.clear()
        running_worker.stop()
        gate.close()
    assert most == 1, "the store back, the limit holds"
    assert [attempt for _, attempt in ran] == [1, 1, 1], "waiting spent no attempt"
    assert h.backend.dead_letters(ALPHA) == [], "nothing dead-lettered"
