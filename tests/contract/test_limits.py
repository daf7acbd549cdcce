"""Rate and concurrency limits on every backend, each with its limits' state where a
user's would be: memory in process, the embedded file in itself, RabbitMQ in a SQLite
and in a PostgreSQL store (docs/flow-control.md)."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import JobHandler
from queuey_core import Worker
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import Admission
from queuey_core.flow.limit_state import Verdict
from queuey_core.trace_context import TraceContext
from queuey_core.worker.hooks import WorkerHooks
from tests.contract.conftest import Stored
from tests.support import ALPHA
from tests.support import Greet
from tests.support import start


class Export(Job):
    NAME: ClassVar[str] = "test.export"
    QUEUE: ClassVar[str] = ALPHA
    tenant: str
    n: int


class Ledger:
    """Who ran, in order, with how many of their key running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[tuple[str, int, int, int]] = []  # tenant, n, attempt, deferrals
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.wall: list[int] = []

    def start(self, tenant: str, n: int, ctx: JobContext, wall_ms: int) -> None:
        with self.lock:
            self.starts.append((tenant, n, ctx.attempt, ctx.deferrals))
            self.wall.append(wall_ms)
            self.running[tenant] += 1
            self.most[tenant] = max(self.most[tenant], self.running[tenant])

    def end(self, tenant: str) -> None:
        with self.lock:
            self.running[tenant] -= 1


@pytest.fixture
def gate_of(stored: Stored) -> Iterator[list[LimitGate]]:
    """Gates made by the test, closed after it."""
    gates: list[LimitGate] = []
    yield gates
    for gate in gates:
        gate.close()


def _gate(s: Stored, gates: list[LimitGate], **tables: dict[str, object]) -> LimitGate:
    book = LimitBook(spec_from_table(name, table) for name, table in tables.items())
    gate = LimitGate(book, limit_state_for(s.url, book), clock=s.h.clock)
    gates.append(gate)
    return gate


def test_a_concurrency_limit_per_key_holds_and_blocks_no_other_key(
    stored: Stored, gate_of: list[LimitGate]
) -> None:
    h = stored.h
    gate = _gate(
        stored, gate_of, tenant={"concurrency": 1, "key": "tenant", "jobs": ["test.export"]}
    )
    ledger = Ledger()

    def export(job: Export, ctx: JobContext) -> None:
        ledger.start(job.tenant, job.n, ctx, h.clock.wall_ms())
        h.sleep(1)
        ledger.end(job.tenant)

    greeted: list[str] = []
    producer = h.producer()
    for n in range(4):
        producer.enqueue(Export(tenant="a", n=n))
    producer.enqueue(Greet(name="unlimited"))
    for n in range(2):
        producer.enqueue(Export(tenant="b", n=n))
    handlers: list[JobHandler] = [
        Handler(Export, export),
        Handler(Greet, lambda job, _: greeted.append(job.name)),
    ]
    worker = Worker(h.backend, h.queues, handlers, concurrency=4, clock=h.clock, limits=gate)
    running = start(worker, h)
    try:
        h.wait_for(lambda: len(ledger.starts) == 6 and not any(ledger.running.values()))
    finally:
        running.stop()
    assert ledger.most == {"a": 1, "b": 1}, "never two of one tenant at once"
    assert sorted((t, n) for t, n, _, _ in ledger.starts) == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 0),
        ("b", 1),
    ], "every job ran, once"
    assert {attempt for _, _, attempt, _ in ledger.starts} == {1}, "waiting spent no attempt"
    order = [t for t, _, _, _ in ledger.starts]
    assert order.index("b") < 3, f"tenant b ran while tenant a's jobs waited: {order}"
    assert greeted == ["unlimited"], "a job type without limits is not held up"
    assert gate.counts.parked >= 3, "tenant a's jobs waited parked, not spinning"


def test_parked_jobs_run_in_priority_order_within_their_key(
    stored: Stored, gate_of: list[LimitGate]
) -> None:
    h = stored.h
    gate = _gate(stored, gate_of, mutex={"concurrency": 1, "jobs": ["test.export"]})
    ledger = Ledger()
    hold = threading.Event()

    def export(job: Export, ctx: JobContext) -> None:
        ledger.start(job.tenant, job.n, ctx, h.clock.wall_ms())
        if job.n == 0:
            hold.wait(30)
        ledger.end(job.tenant)

    worker = Worker(
        h.backend, h.queues, [Handler(Export, export)], concurrency=4, clock=h.clock, limits=gate
    )
    running = start(worker, h)
    try:
        producer = h.producer()
        producer.enqueue(Export(tenant="x", n=0))
        h.wait_for(lambda: len(ledger.starts) == 1)
        for n, priority in [(1, 1), (2, 5), (3, 3), (4, 5)]:
            producer.enqueue(Export(tenant="x", n=n), priority=priority)
            h.elapse(0.002)  # "the order they came": enqueued in distinct milliseconds
        h.wait_for(lambda: gate.counts.parked == 4)
        hold.set()
        h.wait_for(lambda: len(ledger.starts) == 5)
    finally:
        hold.set()
        running.stop()
    assert [n for _, n, _, _ in ledger.starts] == [0, 2, 4, 3, 1], (
        "let go by priority, then in the order they came"
    )
    assert ledger.most["x"] == 1


def test_a_rate_limit_spaces_starts_and_each_waiting_job_comes_back_once(
    stored: Stored, gate_of: list[LimitGate]
) -> None:
    h = stored.h
    period = h.d(5)
    gate = _gate(stored, gate_of, api={"rate": f"1 per {period}s", "jobs": ["test.export"]})
    ledger = Ledger()

    def export(job: Export, ctx: JobContext) -> None:
        ledger.start(job.tenant, job.n, ctx, h.clock.wall_ms())
        ledger.end(job.tenant)

    # The rate holds at the instants the state admits (the clock it is asked with); a
    # handler starts a scheduling delay after its admission, which a loaded machine
    # stretches for one job and not another, so the spacing is read from the admissions.
    admitted: list[int] = []
    acquire = gate.state.acquire

    def recording(job_id: str, claims: Any, **kw: Any) -> Admission:
        answer = acquire(job_id, claims, **kw)
        if answer.verdict is Verdict.ADMITTED:
            admitted.append(kw["now_ms"])
        return answer

    gate.state.acquire = recording  # type: ignore[method-assign]
    producer = h.producer()
    for n in range(4):
        producer.enqueue(Export(tenant="t", n=n))
    worker = Worker(
        h.backend, h.queues, [Handler(Export, export)], concurrency=4, clock=h.clock, limits=gate
    )
    running = start(worker, h)
    try:
        h.wait_for(lambda: len(ledger.starts) == 4)
    finally:
        running.stop()
    assert len(admitted) == 4, admitted
    gaps = [b - a for a, b in itertools.pairwise(admitted)]
    assert all(gap >= period * 1000 for gap in gaps), (
        f"4 admissions at 1 per {period}s were {gaps} ms apart"
    )
    wall = sorted(ledger.wall)
    assert all(w >= a for w, a in zip(wall, admitted, strict=True)), "none started before its turn"
    assert {attempt for _, _, attempt, _ in ledger.starts} == {1}, "waiting spent no attempt"
    deferrals = sorted(d for _, _, _, d in ledger.starts)
    assert deferrals[0] == 0, "the first started at once"
    assert all(1 <= d <= 2 for d in deferrals[1:]), (
        f"each waiting job came back at its own time (once more if the one before it "
        f"started late), never spinning: {deferrals}"
    )


class _Traces(WorkerHooks):
    """An envelope sink: the trace context each job started with."""

    takes_envelopes = True

    def __init__(self) -> None:
        self.started: dict[str, TraceContext | None] = {}

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        if event == "started":
            self.started[str(envelope.job_id)] = envelope.trace


def test_a_parked_job_let_go_keeps_its_trace_context(
    stored: Stored, gate_of: list[LimitGate]
) -> None:
    h = stored.h
    gate = _gate(stored, gate_of, mutex={"concurrency": 1, "jobs": ["test.export"]})
    traces = _Traces()
    hold = threading.Event()
    first = Envelope.for_job(Export(tenant="x", n=0), enqueued_at=h.clock.wall_ms())
    parked = Envelope.for_job(Export(tenant="x", n=1), enqueued_at=h.clock.wall_ms())
    trace = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "v=abc")

    def export(job: Export, ctx: JobContext) -> None:
        if job.n == 0:
            hold.wait(30)

    worker = Worker(
        h.backend,
        h.queues,
        [Handler(Export, export)],
        concurrency=2,
        clock=h.clock,
        limits=gate,
        hooks=[traces],
    )
    running = start(worker, h)
    try:
        h.backend.publish(first)
        h.wait_for(lambda: str(first.job_id) in traces.started)
        h.backend.publish(parked.with_trace(trace))
        h.wait_for(lambda: gate.counts.parked == 1)
        hold.set()
        h.wait_for(lambda: str(parked.job_id) in traces.started)
    finally:
        hold.set()
        running.stop()
    assert gate.counts.let_go == 1, "the second job waited parked, then was let go"
    assert traces.started[str(parked.job_id)] == trace, (
        "published again from its row, the job still belongs to the trace that enqueued it"
    )
    assert traces.started[str(first.job_id)] is None, "an untraced job stays untraced"
