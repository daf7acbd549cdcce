"""A library :class:`~queuey_core.Producer` given a job store records its jobs as
queued: in batches by a writer thread by default, before the call returns with
``record_now``; never without a store, and never at the cost of an enqueue."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pytest

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
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
