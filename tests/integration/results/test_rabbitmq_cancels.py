"""Cancels on RabbitMQ without a job store: the ``queuey.cancels`` stream reaches a
worker that starts after the cancel, and a running job; in this worktree's vhost."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import ClassVar

import pytest

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import RetryPolicy
from queuey_core import SystemClock
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from tests.harness import AMQP_URL
from tests.integration.broker import clean_queues
from tests.results.support import settled_record
from tests.support import start

pytestmark = pytest.mark.integration

QUEUE = f"results.cancels.{uuid.uuid4().hex[:8]}"


class Sleepy(Job):
    NAME: ClassVar[str] = "results.sleepy"
    QUEUE: ClassVar[str] = QUEUE
    seconds: float


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    with clean_queues(QUEUE):
        yield QueueSet([QueueConfig(QUEUE, prefetch=2, retry=RetryPolicy(3))])


@pytest.fixture
def store() -> Iterator[JobStore]:
    s = open_job_store(f"memory://{uuid.uuid4().hex}")
    yield s
    s.close()


def sleepy(ran: list[uuid.UUID]) -> Handler[Sleepy]:
    def run(job: Sleepy, ctx: JobContext) -> None:
        ran.append(ctx.job_id)
        ctx.wait(job.seconds)
        ctx.raise_if_cancelled()

    return Handler(Sleepy, run)


def test_a_worker_started_after_the_cancel_never_runs_the_job(
    queues: QueueSet, store: JobStore
) -> None:
    canceller = RabbitMQBackend(AMQP_URL)
    producer = Producer(canceller, queues)
    doomed = producer.enqueue(Sleepy(seconds=0))
    kept = producer.enqueue(Sleepy(seconds=0))
    canceller.cancel_jobs([doomed])
    canceller.close()

    backend = RabbitMQBackend(AMQP_URL)  # another process, as far as the broker knows
    ran: list[uuid.UUID] = []
    worker = Worker(backend, queues, [sleepy(ran)], clock=SystemClock(), hooks=[JobRecorder(store)])
    running = start(worker, None)
    try:
        settled_record(store, kept, None, JobState.SUCCEEDED)
        record = settled_record(store, doomed, None, JobState.CANCELLED)
    finally:
        running.stop()
        backend.close()
    assert record.attempts == ()
    assert ran == [kept]


def test_a_running_job_is_told_through_the_stream(queues: QueueSet, store: JobStore) -> None:
    backend = RabbitMQBackend(AMQP_URL)
    ran: list[uuid.UUID] = []
    worker = Worker(backend, queues, [sleepy(ran)], clock=SystemClock(), hooks=[JobRecorder(store)])
    running = start(worker, None)
    try:
        job = Producer(backend, queues).enqueue(Sleepy(seconds=600))
        settled_record(store, job, None, JobState.RUNNING)
        other = RabbitMQBackend(AMQP_URL)
        other.cancel_jobs([job])
        other.close()
        record = settled_record(store, job, None, JobState.CANCELLED)
    finally:
        running.stop()
        backend.close()
    assert [a.outcome for a in record.attempts] == [JobState.CANCELLED]
