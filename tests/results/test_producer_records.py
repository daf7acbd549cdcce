"""A library :class:`~queuey_core.Producer` (or :class:`~queuey_core.AsyncProducer`)
given a job store records its jobs as queued: in batches by a writer thread by default,
before the call returns with ``record_now``; never without a store, and never at the
cost of an enqueue."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence

import pytest

from queuey_core import AsyncProducer
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core.envelope import EncodedEnvelope
from queuey_core.errors import JobStoreError
from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results.sqlite_store import SqliteJobStore
from tests.support import ALPHA
from tests.support import Greet


def writers() -> int:
    return sum(t.name == "queuey-results-writer" for t in threading.enumerate())


def enqueue_every_way(producer: Producer) -> list[uuid.UUID]:
    return [
        producer.enqueue(Greet(name="one")),
        producer.enqueue_raw(Greet.NAME, {"name": "raw"}, queue=ALPHA),
        *producer.enqueue_many([Greet(name="a"), Greet(name="b")]),
    ]


def test_a_producer_with_a_store_records_its_jobs_as_queued(
    store: JobStore, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    producer = Producer(backend, queues, clock=clock, job_store=store)
    ids = enqueue_every_way(producer)
    producer.close()
    for job_id in ids:
        record = store.get(job_id)
        assert record is not None, f"{job_id} recorded once the producer closed"
        assert record.state is JobState.QUEUED
        assert (record.job_type, record.queue) == (Greet.NAME, ALPHA)
        assert record.attempts == ()
    assert producer.recorder is not None
    assert producer.recorder.unrecorded == 0


def test_record_now_writes_before_the_enqueue_returns(
    store: JobStore, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    before = writers()
    producer = Producer(backend, queues, clock=clock, job_store=store, record_now=True)
    for job_id in enqueue_every_way(producer):
        record = store.get(job_id)
        assert record is not None, "recorded before the call returned"
        assert record.state is JobState.QUEUED
    assert writers() == before, "no writer thread: each call writes"


def test_without_a_store_a_producer_records_nothing_and_starts_no_thread(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    before = writers()
    producer = Producer(backend, queues, clock=clock)
    enqueue_every_way(producer)
    producer.close()
    assert producer.recorder is None
    assert writers() == before


class Refusing(SqliteJobStore):
    """A store that is down: every write fails."""

    def write(self, events: Sequence[JobEvent]) -> None:
        raise JobStoreError("job store: down")


@pytest.mark.parametrize("record_now", [False, True], ids=["batched", "record_now"])
def test_a_store_that_refuses_loses_the_record_not_the_job(
    backend: MemoryBackend, queues: QueueSet, clock: ManualClock, record_now: bool
) -> None:
    producer = Producer(
        backend, queues, clock=clock, job_store=Refusing(":memory:"), record_now=record_now
    )
    job_id = producer.enqueue(Greet(name="x"))
    producer.close()
    assert isinstance(job_id, uuid.UUID), "the enqueue returned its id"
    assert backend.pending(ALPHA) == 1, "the job is on the broker"
    assert producer.recorder is not None
    assert producer.recorder.unrecorded == 1, "the lost record is counted"


def test_an_async_producer_with_a_store_records_its_jobs_as_queued(
    store: JobStore, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    many = [Greet(name=f"n{i}") for i in range(1200)]  # past a slice: published in parts

    async def enqueue() -> tuple[AsyncProducer, list[uuid.UUID]]:
        async with AsyncProducer(backend, queues, clock=clock, job_store=store) as producer:
            ids = [
                await producer.enqueue(Greet(name="one")),
                await producer.enqueue_raw(Greet.NAME, {"name": "raw"}, queue=ALPHA),
                *await producer.enqueue_many(many),
            ]
        return producer, ids

    before = writers()
    producer, ids = asyncio.run(enqueue())
    assert len(ids) == 1202
    for job_id in ids:
        record = store.get(job_id)
        assert record is not None, f"{job_id} recorded once the producer closed"
        assert record.state is JobState.QUEUED
    recorder = producer.producer.recorder
    assert recorder is not None
    assert recorder.unrecorded == 0
    assert writers() == before, "aclose stopped the writer thread"


def test_an_async_producer_with_record_now_has_written_when_the_await_returns(
    store: JobStore, backend: MemoryBackend, queues: QueueSet, clock: ManualClock
) -> None:
    async def enqueue_and_look() -> list[bool]:
        async with AsyncProducer(
            backend, queues, clock=clock, job_store=store, record_now=True
        ) as producer:
            one = await producer.enqueue(Greet(name="one"))
            many = await producer.enqueue_many([Greet(name=f"n{i}") for i in range(700)])
            return [store.get(job_id) is not None for job_id in [one, *many]]

    assert all(asyncio.run(enqueue_and_look()))


class HalfRefusing(MemoryBackend):
    """A broker that confirms the first half of a batch and refuses the rest."""

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        half = len(items) // 2
        super().publish_encoded(items[:half])
        exc = NotEnqueuedError("the broker refused the rest")
        exc.with_jobs(
            confirmed=[job_id_of(env) for env, _ in items[:half]],
            not_enqueued=[job_id_of(env) for env, _ in items[half:]],
        )
        raise exc


def job_id_of(env: EncodedEnvelope) -> uuid.UUID:
    assert env.job_id is not None, "the test gives every job its id"
    return env.job_id


@pytest.mark.parametrize("record_now", [False, True], ids=["batched", "record_now"])
def test_the_confirmed_part_of_a_failed_batch_is_recorded(
    store: JobStore, queues: QueueSet, clock: ManualClock, record_now: bool
) -> None:
    backend = HalfRefusing(clock=clock)
    producer = Producer(backend, queues, clock=clock, job_store=store, record_now=record_now)
    ids = [uuid.uuid4() for _ in range(4)]
    with pytest.raises(NotEnqueuedError) as caught:
        producer.enqueue_many([Greet(name=f"n{i}") for i in range(4)], job_ids=ids)
    producer.close()
    assert caught.value.confirmed == tuple(ids[:2])
    assert backend.pending(ALPHA) == 2
    for job_id in ids[:2]:
        record = store.get(job_id)
        assert record is not None, "a job the broker confirmed is recorded, error or not"
        assert record.state is JobState.QUEUED
    assert [store.get(job_id) for job_id in ids[2:]] == [None, None], "never enqueued"


def test_an_async_batch_cut_short_records_what_the_broker_confirmed(
    store: JobStore, queues: QueueSet, clock: ManualClock
) -> None:
    backend = HalfRefusing(clock=clock)
    ids = [uuid.uuid4() for _ in range(1200)]  # past a slice: checked, then sent in parts

    async def enqueue() -> NotEnqueuedError:
        async with AsyncProducer(backend, queues, clock=clock, job_store=store) as producer:
            with pytest.raises(NotEnqueuedError) as caught:
                await producer.enqueue_many(
                    [Greet(name=f"n{i}") for i in range(len(ids))], job_ids=ids
                )
        return caught.value

    error = asyncio.run(enqueue())
    assert error.confirmed, "the first slice was taken in part"
    assert len(error.confirmed) + len(error.not_enqueued) == len(ids)
    assert backend.pending(ALPHA) == len(error.confirmed)
    for job_id in error.confirmed:
        assert store.get(job_id) is not None, "a confirmed job is recorded"
    assert all(store.get(job_id) is None for job_id in error.not_enqueued)
