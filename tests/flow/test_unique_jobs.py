"""Unique jobs on the in-memory backend and a manual clock: the fourth outcome, the
periods, the give-back of a claim never published (docs/flow-control.md)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import ClassVar

import pytest
from prometheus_client import CollectorRegistry

from queuey_core import AsyncProducer
from queuey_core import ConfigError
from queuey_core import DuplicateJobError
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.flow.unique import QUEUED_OR_RUNNING
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique import key_of
from queuey_core.flow.unique_keys import CLAIM_HOLD
from queuey_core.flow.unique_keys import Claim
from queuey_core.flow.unique_metrics import DuplicatesCollector
from queuey_core.jobs import Job
from tests.harness import Wrapping
from tests.support import ALPHA
from tests.support import Greet
from tests.support import drain
from tests.support import noop
from tests.support import start
from tests.support import wait_for


class Invoice(Job):
    NAME: ClassVar[str] = "test.invoice"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(key=("invoice_id",))
    invoice_id: int
    note: str = ""


class Export(Job):
    NAME: ClassVar[str] = "test.export"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(period=QUEUED_OR_RUNNING)
    tenant: str


class Digest(Job):
    NAME: ClassVar[str] = "test.digest"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(key=lambda p: f"user-{p['user']}", period="10m")
    user: int


def test_a_declaration_reads_its_period_and_refuses_what_cannot_work() -> None:
    assert Unique().until == "start"
    assert Unique(period=QUEUED_OR_RUNNING).until == "end"
    timed = Unique(period="10m")
    assert (timed.until, timed.seconds) == ("time", 600.0)
    for bad in ("forever", 0, -1, "2000d"):
        with pytest.raises(ValueError, match=r"duration|period"):
            Unique(period=bad)
    with pytest.raises(ValueError, match="at least one field"):
        Unique(key=())


def test_the_key_is_the_job_type_and_the_chosen_arguments_only() -> None:
    unique = Unique(key=("invoice_id",))
    one = key_of(unique, "a", {"invoice_id": 1, "note": "x"})
    assert one == key_of(unique, "a", {"note": "y", "invoice_id": 1}), "other fields ignored"
    assert one != key_of(unique, "b", {"invoice_id": 1}), "the job type is in the key"
    assert one != key_of(unique, "a", {"invoice_id": 2})
    every = Unique()
    assert key_of(every, "a", {"x": 1, "y": 2}) == key_of(every, "a", {"y": 2, "x": 1})
    with pytest.raises(ValueError, match="invoice_id"):
        key_of(unique, "a", {"note": "no id"})


def test_a_second_enqueue_of_a_held_key_is_a_duplicate_naming_the_holder(
    backend: MemoryBackend, producer: Producer
) -> None:
    first = producer.enqueue(Invoice(invoice_id=7))
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue(Invoice(invoice_id=7, note="double click"))
    assert caught.value.existing == first
    assert caught.value.job_id != first
    assert not isinstance(caught.value, NotEnqueuedError), "a fourth outcome of its own"
    assert backend.pending(ALPHA) == 1, "nothing published for the duplicate"
    producer.enqueue(Invoice(invoice_id=8))
    assert backend.pending(ALPHA) == 2, "another key is another job"


def test_a_queued_key_is_let_go_when_the_job_starts(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    started = threading.Event()
    go_on = threading.Event()

    def slow(job: Invoice, ctx: JobContext) -> None:
        started.set()
        go_on.wait(30)

    first = producer.enqueue(Invoice(invoice_id=1))
    running = start(Worker(backend, queues, [Handler(Invoice, slow)], clock=clock), clock)
    try:
        assert started.wait(30)
        second = producer.enqueue(Invoice(invoice_id=1))
        assert second != first, "the first is running: the key was let go at its start"
        go_on.set()
        wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    finally:
        go_on.set()
        running.stop()


def test_a_queued_or_running_key_survives_retries_and_is_let_go_at_the_end(
    backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock
) -> None:
    attempts: list[int] = []
    refused: list[uuid.UUID] = []

    def flaky(job: Export, ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        with pytest.raises(DuplicateJobError) as caught:
            producer.enqueue(Export(tenant="t"))
        refused.append(caught.value.existing)
        if ctx.attempt == 1:
            raise Retryable("once")

    first = producer.enqueue(Export(tenant="t"))
    running = start(Worker(backend, queues, [Handler(Export, flaky)], clock=clock), clock)
    try:
        wait_for(lambda: len(attempts) == 2, clock)
        wait_for(lambda: len(backend.acked(ALPHA)) == 2, clock)
    finally:
        running.stop()
    assert attempts == [1, 2]
    assert refused == [first, first], "held while running, through the retry"
    assert producer.enqueue(Export(tenant="t")) != first, "let go at its success"


def test_a_timed_key_holds_for_its_period_whatever_becomes_of_the_job(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    first = producer.enqueue(Digest(user=1))
    clock.advance(599)
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue(Digest(user=1))
    assert caught.value.existing == first
    clock.advance(2)
    assert producer.enqueue(Digest(user=1)) != first, "expired after 10 minutes"


def test_a_batch_reports_each_duplicate_and_enqueues_the_others(
    backend: MemoryBackend, producer: Producer
) -> None:
    held = producer.enqueue(Invoice(invoice_id=1))
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue_many(
            [Invoice(invoice_id=1), Invoice(invoice_id=2), Invoice(invoice_id=2), Greet(name="a")]
        )
    err = caught.value
    assert len(err.confirmed) == 2, "the first 2 and the greeting"
    assert len(err.duplicates) == 2
    holders = sorted(map(str, err.duplicates.values()))
    assert str(held) in holders
    assert set(err.duplicates.values()) - {held} <= set(err.confirmed), "the batch's own"
    assert backend.pending(ALPHA) == 3


def test_a_job_id_the_caller_chose_is_held_while_the_job_is_queued_or_running(
    backend: MemoryBackend, producer: Producer
) -> None:
    first = producer.enqueue(Greet(name="a"), job_id="line-1")
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue(Greet(name="a"), job_id="line-1")
    assert caught.value.existing == first == caught.value.job_id, "it is already enqueued"
    with pytest.raises(DuplicateJobError) as many:
        producer.enqueue_many([Greet(name="a"), Greet(name="b")], job_ids=["line-1", "line-2"])
    assert list(many.value.duplicates) == [first]
    assert backend.pending(ALPHA) == 2


def test_a_declared_key_lets_its_holder_enqueue_again_as_the_retry_it_is(
    backend: MemoryBackend, producer: Producer
) -> None:
    # After an unknown outcome the caller retries under the same job id: not a duplicate
    # of itself on a declared key (the id's own key is what refuses it on this backend).
    keys = backend.unique_keys()
    job_id = uuid.uuid4()
    [claim] = [Claim(key_of(Invoice.UNIQUE, Invoice.NAME, {"invoice_id": 5}), str(job_id), None)]
    assert keys.claim([claim], 0) == {}
    keys.keep([claim], 0)
    producer_without_ids = Producer(Wrapping(backend), producer._queues, unique_keys=keys)
    assert producer_without_ids.enqueue(Invoice(invoice_id=5), job_id=job_id) == job_id


def test_a_publish_that_surely_failed_gives_its_key_back(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    backend.close()
    with pytest.raises(NotEnqueuedError):
        producer.enqueue(Invoice(invoice_id=1))
    assert backend.unique_keys().held(clock.wall_ms()) == 0


def test_a_claim_never_published_holds_its_key_for_the_claim_hold_only(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    # A producer killed between its claim and its publish: the claim alone is left.
    keys = backend.unique_keys()
    dead = str(uuid.uuid4())
    key = key_of(Invoice.UNIQUE, Invoice.NAME, {"invoice_id": 9})
    assert keys.claim([Claim(key, dead, None)], clock.wall_ms()) == {}
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue(Invoice(invoice_id=9))
    assert str(caught.value.existing) == dead
    clock.advance(CLAIM_HOLD + 1)
    producer.enqueue(Invoice(invoice_id=9))
    assert backend.pending(ALPHA) == 1


def test_the_envelope_carries_the_key_through_retries_and_nothing_without_one(
    backend: MemoryBackend, producer: Producer
) -> None:
    producer.enqueue(Invoice(invoice_id=3))
    producer.enqueue(Greet(name="plain"))
    marked, plain = drain(backend, ALPHA)
    assert marked.unique is not None
    assert marked.unique[0].until == "start"
    assert marked.next_attempt().unique == marked.unique
    assert b"unique" not in plain.encode(), "a job without a key is the same bytes as before"


def test_unique_jobs_with_nowhere_to_keep_keys_are_refused_at_start(
    backend: MemoryBackend, queues: QueueSet
) -> None:
    elsewhere = Wrapping(backend)  # a backend that keeps no keys, and no store given
    with pytest.raises(ConfigError, match=r"\[results\] url"):
        Producer(elsewhere, queues).enqueue(Invoice(invoice_id=1))
    assert backend.pending(ALPHA) == 0
    with pytest.raises(ConfigError, match=r"\[results\] url"):
        Worker(elsewhere, queues, [noop(Invoice)])


def test_duplicates_are_counted_by_job_type_for_metrics(producer: Producer) -> None:
    registry = CollectorRegistry()
    registry.register(DuplicatesCollector(producer.unique.duplicates))
    producer.enqueue(Invoice(invoice_id=1))
    for _ in range(2):
        with pytest.raises(DuplicateJobError):
            producer.enqueue(Invoice(invoice_id=1))
    with pytest.raises(DuplicateJobError):
        producer.enqueue_many([Invoice(invoice_id=1), Greet(name="a")])
    assert producer.unique.duplicates() == {Invoice.NAME: 3}
    counted = registry.get_sample_value(
        "queuey_enqueue_duplicates_total", {"job_type": Invoice.NAME}
    )
    assert counted == 3


def test_the_async_producer_reports_the_duplicates_of_every_slice_of_a_batch(
    backend: MemoryBackend, queues: QueueSet
) -> None:
    held = Producer(backend, queues).enqueue(Invoice(invoice_id=7))

    async def main() -> DuplicateJobError:
        async with AsyncProducer(backend, queues) as producer:
            with pytest.raises(DuplicateJobError) as caught:
                await producer.enqueue_many([Invoice(invoice_id=n % 1000) for n in range(1200)])
            return caught.value

    err = asyncio.run(main())
    assert len(err.confirmed) == 999, "every key once, but the one held before"
    assert len(err.duplicates) == 201
    assert held in set(err.duplicates.values())
    assert backend.pending(ALPHA) == 1000
