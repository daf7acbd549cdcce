"""Unique jobs on every backend, each keeping its keys where a user would: the memory
backend in its process, the embedded file in itself, RabbitMQ in a SQLite and in a
PostgreSQL job store (docs/flow-control.md, "Unique jobs")."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import ClassVar
from typing import cast

import pytest

from queuey_core import DuplicateJobError
from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import Worker
from queuey_core.backends.capabilities import HoldsUniqueKeys
from queuey_core.flow.unique import QUEUED_OR_RUNNING
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_keys import UniqueKeys
from queuey_core.flow.unique_store import open_unique_keys
from queuey_core.jobs import Job
from tests.contract.conftest import Stored
from tests.support import ALPHA
from tests.support import Greet
from tests.support import start


class Invoice(Job):
    NAME: ClassVar[str] = "test.contract.invoice"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(key=("invoice_id",))
    invoice_id: int


class Export(Job):
    NAME: ClassVar[str] = "test.contract.export"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(period=QUEUED_OR_RUNNING)
    tenant: str


@pytest.fixture
def keys(stored: Stored) -> Iterator[UniqueKeys | None]:
    """Where the test's producers and workers keep keys: the backend's own where it keeps
    them (None: the default), else the job store's table."""
    if isinstance(stored.h.backend, HoldsUniqueKeys):
        yield None
        return
    table = open_unique_keys(stored.url)
    try:
        yield table
    finally:
        table.close()


def producer(stored: Stored, keys: UniqueKeys | None) -> Producer:
    return Producer(stored.h.backend, stored.h.queues, clock=stored.h.clock, unique_keys=keys)


def test_a_held_key_refuses_a_second_enqueue_until_the_job_starts(
    stored: Stored, keys: UniqueKeys | None
) -> None:
    h = stored.h
    ran: list[uuid.UUID] = []
    p = producer(stored, keys)
    first = p.enqueue(Invoice(invoice_id=1))
    with pytest.raises(DuplicateJobError) as caught:
        p.enqueue(Invoice(invoice_id=1))
    assert caught.value.existing == first

    def record(job: Invoice, ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    worker = Worker(
        h.backend, h.queues, [Handler(Invoice, record)], clock=h.clock, unique_keys=keys
    )
    running = start(worker, h)
    try:
        h.wait_for(lambda: ran == [first])
        second = p.enqueue(Invoice(invoice_id=1))  # started: the key was let go
        h.wait_for(lambda: ran == [first, second])
    finally:
        running.stop()


def test_a_queued_or_running_key_is_held_until_the_final_outcome(
    stored: Stored, keys: UniqueKeys | None
) -> None:
    h = stored.h
    p = producer(stored, keys)
    refused: list[uuid.UUID] = []
    done = threading.Event()

    def doomed(job: Export, ctx: JobContext) -> None:
        with pytest.raises(DuplicateJobError) as caught:
            p.enqueue(Export(tenant="t"))
        refused.append(caught.value.existing)
        done.set()
        raise Fatal("no export today")

    first = p.enqueue(Export(tenant="t"))
    handlers = [Handler(Export, doomed)]
    running = start(Worker(h.backend, h.queues, handlers, clock=h.clock, unique_keys=keys), h)
    try:
        h.wait_for(done.is_set)
        h.wait_for(lambda: len(h.backend.dead_letters(ALPHA)) == 1)
    finally:
        running.stop()
    assert refused == [first], "held while it ran"
    assert p.enqueue(Export(tenant="t")) != first, "let go when it was dead-lettered"


@pytest.mark.requires("unique_keys")
def test_a_job_id_the_caller_chose_is_a_key_where_the_backend_keeps_keys(
    stored: Stored, keys: UniqueKeys | None
) -> None:
    p = producer(stored, keys)
    first = p.enqueue(Greet(name="ada"), job_id="order-1")
    with pytest.raises(DuplicateJobError) as caught:
        p.enqueue(Greet(name="ada"), job_id="order-1")
    assert caught.value.existing == first
    assert stored.h.backend.pending(ALPHA) == 1


def test_producers_racing_for_the_same_keys_make_one_job_a_key(
    stored: Stored, keys: UniqueKeys | None
) -> None:
    h = stored.h
    producers = [producer(stored, keys) for _ in range(8)]
    made: list[list[uuid.UUID]] = [[] for _ in producers]
    go = threading.Barrier(len(producers))

    def race(i: int) -> None:
        go.wait()
        for n in range(100):
            with contextlib.suppress(DuplicateJobError):
                made[i].append(producers[i].enqueue(Invoice(invoice_id=n)))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(producers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(map(len, made)) == 100, "one job a key, whoever won it"
    h.wait_for(lambda: h.backend.pending(ALPHA) == 100)


def test_the_keys_held_are_listed_and_a_gone_jobs_are_let_go_of_all_at_once(
    stored: Stored, keys: UniqueKeys | None
) -> None:
    """What ``queuey unique list`` and ``release`` stand on: every key store lists the
    keys held (by key, for one job, at most a limit) and lets go of one job's keys."""
    backend = stored.h.backend
    table = keys if keys is not None else cast(HoldsUniqueKeys, backend).unique_keys()
    now = stored.h.clock.wall_ms()
    p = producer(stored, keys)
    first = p.enqueue(Invoice(invoice_id=1))
    chosen = p.enqueue(Invoice(invoice_id=2), job_id="order-2")
    held = table.holding(now)
    assert {h.job_id for h in held} == {str(first), str(chosen)}
    assert [h.key for h in held] == sorted(h.key for h in held)
    assert all(h.expires_at is None for h in held), "held until a worker lets go"
    assert len(table.holding(now, limit=1)) == 1
    mine = table.holding(now, job_id=str(chosen))
    # A caller-chosen id is a key too where the backend keeps keys itself.
    assert len(mine) == (2 if keys is None else 1)

    assert len(table.let_go(str(chosen))) == len(mine)
    assert table.let_go(str(chosen)) == [], "nothing left to let go of"
    assert [h.job_id for h in table.holding(now)] == [str(first)]
    assert p.enqueue(Invoice(invoice_id=2)) != chosen, "its key is free again"
    with pytest.raises(DuplicateJobError):
        p.enqueue(Invoice(invoice_id=1))
