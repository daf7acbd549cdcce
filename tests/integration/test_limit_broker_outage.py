"""A broker outage with limits in force, on a node of our own (tests/integration/own_node.py):
a rate and a concurrency limit per key, their state in a SQLite store, the broker stopped
and started again while limited jobs run, park and wait, one of them running through the
whole outage. The books: no job lost, none admitted outside its rate, never two of a key
running at once (not even the broker's copy of the job that ran through the outage),
every slot given back (docs/flow-control.md, "Where the state lives").
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.clock import SystemClock
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import Admission
from queuey_core.flow.limit_state import Verdict
from tests.integration import own_node as own_node_module
from tests.integration.flow_ledger import busiest_window
from tests.integration.own_node import OwnNode
from tests.support import start
from tests.support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QNAME = "flow.outage"
QUEUES = QueueSet([QueueConfig(QNAME, prefetch=4)])
RATE, BURST = 5, 1
JOBS, ACCOUNTS = 24, 3
#: The account of the one job that runs through the whole outage.
LONG = "long"

own_node = own_node_module.own_node


class Charge(Job):
    NAME: ClassVar[str] = "it.flow.outage.charge"
    QUEUE: ClassVar[str] = QNAME
    account: str
    n: int


@pytest.fixture
def node(own_node: OwnNode) -> Iterator[OwnNode]:
    """The node, running, without an alarm or queues, before and after the test."""
    own_node.reset()
    yield own_node
    own_node.reset()


class Books:
    """Every run (its account, job id, attempt), the most of an account at once, and
    when the limits' state admitted each job (the instants the rate governs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[tuple[str, str, int]] = []
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.admitted: list[int] = []

    def start(self, job: Charge, ctx: JobContext) -> None:
        with self.lock:
            self.runs.append((job.account, str(ctx.job_id), ctx.attempt))
            self.running[job.account] += 1
            self.most[job.account] = max(self.most[job.account], self.running[job.account])

    def end(self, job: Charge) -> None:
        with self.lock:
            self.running[job.account] -= 1

    def ran(self) -> set[str]:
        with self.lock:
            return {job_id for _, job_id, _ in self.runs}


def test_a_broker_restarted_under_limited_jobs_loses_none_and_gives_every_slot_back(
    node: OwnNode, tmp_path: Path
) -> None:
    book = LimitBook(
        [
            spec_from_table("api", {"rate": f"{RATE}/s", "burst": BURST, "jobs": [Charge.NAME]}),
            spec_from_table(
                "per_account", {"concurrency": 1, "key": "account", "jobs": [Charge.NAME]}
            ),
        ]
    )
    gate = LimitGate(
        book, limit_state_for(f"sqlite:///{tmp_path}/state.db", book), clock=SystemClock()
    )
    books = Books()
    acquire = gate.state.acquire

    def recording(job_id: str, claims: Any, **kw: Any) -> Admission:
        answer = acquire(job_id, claims, **kw)
        if answer.verdict is Verdict.ADMITTED:
            with books.lock:
                books.admitted.append(kw["now_ms"])
        return answer

    gate.state.acquire = recording  # type: ignore[method-assign]

    def charge(job: Charge, ctx: JobContext) -> None:
        books.start(job, ctx)
        if job.account == LONG and not (ctx.redelivered or ctx.deferrals):
            # Runs through the outage, until the broker's copy of it (delivered again
            # once the worker reconnected) has been told to wait.
            deadline = time.monotonic() + 40
            # (Or until a copy ran beside it: the books then show two at once.)
            while not _copy_waited(gate) and books.most[LONG] == 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.3)
        books.end(job)

    backend = RabbitMQBackend(node.url, heartbeat=5, publish_timeout=20, recovery_timeout=60)
    producer_backend = RabbitMQBackend(node.url, publish_timeout=20)
    worker = Worker(backend, QUEUES, [Handler(Charge, charge)], concurrency=4, limits=gate)
    running = start(worker, None)
    try:
        producer = Producer(producer_backend, QUEUES)
        jobs = [Charge(account=LONG, n=-1)]
        jobs += [Charge(account=f"a{n % ACCOUNTS}", n=n) for n in range(JOBS - 1)]
        ids = {str(job_id) for job_id in producer.enqueue_many(jobs)}
        producer_backend.close()
        wait_for(lambda: len(books.ran()) >= 4 and books.most[LONG] == 1, timeout=30)
        node.stop_app()  # mid-run: jobs running, parked, booked for their rate
        time.sleep(2)
        node.start_app()
        wait_for(lambda: books.ran() >= ids, timeout=75)
        # The copy of the long job waits out a slot lease (15 s) and runs again.
        wait_for(lambda: _long_runs(books) == 2, timeout=45)
        wait_for(lambda: not any(books.running.values()), timeout=10)
        # Slots are given back after each settle; the heartbeat tidies what is left.
        wait_for(lambda: _in_use(gate) == [], timeout=20)
    finally:
        running.stop()
        gate.close()
    assert books.ran() == ids, "no job lost"
    assert max(books.most.values()) == 1, f"never two of an account at once: {books.most}"
    assert _copy_waited(gate), "the copy of the job running through the outage waited"
    assert _long_runs(books) == 2, "the copy ran after that run (its ack was lost)"
    assert {attempt for _, _, attempt in books.runs} == {1}, "waiting spent no attempt"
    busiest = busiest_window([ms / 1000 for ms in books.admitted])
    assert busiest <= RATE + BURST, f"{busiest} admissions in one second at {RATE}/s"
    assert len(books.admitted) == len(books.runs), "every run was admitted first"
    print(  # shown with -s: what the outage cost
        f"runs {len(books.runs)} of {JOBS} jobs (reruns of jobs whose ack was lost: "
        f"{len(books.runs) - JOBS}); admissions {len(books.admitted)}; "
        f"gate {gate.counted()}"
    )


def _long_runs(books: Books) -> int:
    with books.lock:
        return sum(account == LONG for account, _, _ in books.runs)


def _copy_waited(gate: LimitGate) -> bool:
    """Whether a copy of a running job was told to wait under the per-account limit."""
    return gate.counted().by_limit.get("per_account", {}).get("waited", 0) > 0


def _in_use(gate: LimitGate) -> list[tuple[str, str, int, int, int]]:
    """Limits and keys with a job running, a slot reserved or a job parked."""
    return [
        (c.limit, c.key, c.running, c.reserved, c.parked)
        for c in gate.key_counts()
        if c.running or c.reserved or c.parked
    ]
