"""The limits' metrics of a worker: each limit's jobs admitted, waited, parked and let go,
and the store's errors, read from its gate at each scrape (memory backend, manual clock)."""

from __future__ import annotations

import threading

import pytest

from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.errors import LimitStateError
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.observability import WorkerMetrics
from tests.support import Greet
from tests.support import Nudge
from tests.support import start
from tests.support import wait_for

LIMITS: dict[str, dict[str, object]] = {
    "mutex": {"concurrency": 1, "jobs": [Greet.NAME]},
    "api": {"rate": "1 per 10s", "jobs": [Nudge.NAME]},
    "idle": {"concurrency": 5, "jobs": [Nudge.NAME]},
}


def greet_nobody(job: Greet, ctx: JobContext) -> None:
    """A handler that does nothing."""


def limit_jobs(metrics: WorkerMetrics, limit: str, event: str) -> float | None:
    return metrics.registry.get_sample_value(
        "queuey_limit_jobs_total", {"limit": limit, "event": event}
    )


def test_each_limit_counts_its_jobs_admitted_waited_parked_and_let_go(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    book = LimitBook(spec_from_table(name, table) for name, table in LIMITS.items())
    gate = LimitGate(book, limit_state_for("memory:", book), clock=clock)
    metrics = WorkerMetrics(process_metrics=False)
    hold = threading.Event()
    greeted: list[str] = []
    nudged: list[int] = []

    def greet(job: Greet, ctx: JobContext) -> None:
        if job.name == "first":
            hold.wait(20)
        greeted.append(job.name)

    worker = Worker(
        backend,
        queues,
        [Handler(Greet, greet), Handler(Nudge, lambda job, _: nudged.append(job.id))],
        concurrency=4,
        clock=clock,
        limits=gate,
        hooks=[metrics],
    )
    running = start(worker, clock)
    try:
        producer.enqueue(Greet(name="first"))
        wait_for(lambda: limit_jobs(metrics, "mutex", "admitted") == 1)
        for name in ("second", "third"):
            producer.enqueue(Greet(name=name))
        producer.enqueue(Nudge(id=1))
        producer.enqueue(Nudge(id=2))
        wait_for(lambda: limit_jobs(metrics, "mutex", "parked") == 2)
        wait_for(lambda: limit_jobs(metrics, "api", "waited") == 1)
        hold.set()
        wait_for(lambda: len(greeted) == 3 and len(nudged) == 2, clock)
    finally:
        hold.set()
        running.stop()
        gate.close()
    expected = {
        ("mutex", "admitted"): 3,  # the first, then each parked one when it came back
        ("mutex", "parked"): 2,
        ("mutex", "let_go"): 2,
        ("mutex", "waited"): 0,
        ("api", "admitted"): 2,
        ("api", "waited"): 1,  # the second nudge, booked 10 s on
        ("api", "parked"): 0,
        ("idle", "admitted"): 2,  # binds the nudges too; never full, so never parked
        ("idle", "parked"): 0,
    }
    for (limit, event), count in expected.items():
        assert limit_jobs(metrics, limit, event) == count, (limit, event)
    assert metrics.registry.get_sample_value("queuey_limit_store_errors_total") == 0


def test_a_store_that_fails_is_counted_and_a_worker_without_limits_has_no_series(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    book = LimitBook([spec_from_table("mutex", LIMITS["mutex"])])
    gate = LimitGate(book, limit_state_for("memory:", book), clock=clock)
    gate.state.close()  # every call to the store now fails
    job = Greet(name="x")
    with pytest.raises(LimitStateError):
        gate.ask(Envelope.for_job(job, enqueued_at=clock.wall_ms()), book.specs, job)
    gate.release("no-such-job")
    counts = gate.counted()
    assert counts.store_errors == 2, "the failed ask and the failed give-back"
    assert counts.by_limit == {}, "nothing was decided for any limit"

    metrics = WorkerMetrics(process_metrics=False)
    worker = Worker(backend, queues, [Handler(Greet, greet_nobody)], clock=clock, hooks=[metrics])
    running = start(worker, clock)
    running.stop()
    assert metrics.registry.get_sample_value("queuey_limit_store_errors_total") is None, (
        "a worker without limits shows no limit series"
    )
