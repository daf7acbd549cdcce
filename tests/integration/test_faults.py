"""Failure on a real RabbitMQ: lost connections, heartbeats, dead channels, lost queues."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from queuey_core import (
    ConsumerStoppedError,
    Handler,
    Job,
    JobContext,
    Producer,
    QueueConfig,
    QueueSet,
    RetryPolicy,
    Worker,
)
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import VHOST, channel, delete_queues, rabbitmqctl, unique
from tests.support import Running, start, wait_for

pytestmark = pytest.mark.integration

QNAME = unique("it.faults")


class Work(Job):
    NAME: ClassVar[str] = "it.work"
    QUEUE: ClassVar[str] = QNAME
    n: int


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    require_broker()
    delete_queues(QNAME)
    yield QueueSet([QueueConfig(QNAME, prefetch=10, retry=RetryPolicy(5))])
    delete_queues(QNAME)


def backend(**kwargs: float) -> RabbitMQBackend:
    return RabbitMQBackend(AMQP_URL, publish_timeout=20, **kwargs)  # type: ignore[arg-type]


def ready(rabbit: RabbitMQBackend) -> int:
    return rabbit.queue_counts(QNAME)[0]


def close_all_connections() -> None:
    # Only the test vhost's: without -p, rabbitmqctl closes those of "/" whatever the
    # tests use, and a shared broker's other users would lose theirs.
    rabbitmqctl("close_all_connections", "-p", VHOST, "queuey fault test")


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[int] = []

    def add(self, n: int) -> None:
        with self.lock:
            self.runs.append(n)

    def distinct(self) -> set[int]:
        with self.lock:
            return set(self.runs)

    def count(self) -> int:
        with self.lock:
            return len(self.runs)


def test_every_job_completes_when_the_broker_closes_the_connections_mid_run(
    queues: QueueSet,
) -> None:
    rabbit = backend()
    seen = Seen()

    def handle(job: Work, ctx: JobContext) -> None:
        time.sleep(0.003)
        seen.add(job.n)

    worker = Worker(rabbit, queues, [Handler(Work, handle)])
    producer = Producer(rabbit, queues)
    producer.enqueue_many([Work(n=i) for i in range(300)])
    running = start(worker, None)
    wait_for(lambda: seen.count() >= 60)
    close_all_connections()

    wait_for(lambda: len(seen.distinct()) == 300, timeout=60)
    wait_for(lambda: ready(rabbit) == 0, timeout=30)
    assert not running.is_finished(), "the worker recovered instead of ending"

    producer.enqueue(Work(n=300))  # the publisher recovered too
    wait_for(lambda: 300 in seen.distinct(), timeout=30)
    running.stop()
    assert ready(rabbit) == 0, "nothing was left behind"
    assert rabbit.list_dead_letters(QNAME) == []
    rabbit.close()


def test_publishes_in_flight_when_the_connection_drops_are_republished(
    queues: QueueSet,
) -> None:
    rabbit = backend()
    producer = Producer(rabbit, queues)
    producer.enqueue(Work(n=-1))  # the publisher link is up
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            producer.enqueue_many([Work(n=i) for i in range(5000)])
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    time.sleep(0.05)
    close_all_connections()
    thread.join(60)
    assert errors == [], f"enqueue_many failed: {errors}"
    # Republishing after a drop can duplicate (at least once), never lose.
    wait_for(lambda: ready(rabbit) >= 5001, timeout=20)
    rabbit.close()


def test_a_job_longer_than_three_heartbeats_is_acked_once(queues: QueueSet) -> None:
    rabbit = backend(heartbeat=1)
    seen = Seen()

    def handle(job: Work, ctx: JobContext) -> None:
        seen.add(job.n)
        time.sleep(4)  # blocks this thread only: heartbeats flow on the connection's own

    worker = Worker(rabbit, queues, [Handler(Work, handle)])
    Producer(rabbit, queues).enqueue(Work(n=1))
    running = start(worker, None)
    wait_for(lambda: seen.count() == 1)
    time.sleep(6.5)  # past the job, and long enough for a redelivery to show up
    assert seen.count() == 1, "the job was redelivered: the connection died"
    assert worker.handle.settle_failures() == 0
    assert ready(rabbit) == 0
    running.stop()
    rabbit.close()


def test_a_settle_on_a_dead_channel_is_counted_and_the_job_redelivered(
    queues: QueueSet,
) -> None:
    rabbit = backend()
    seen = Seen()
    release = threading.Event()

    def handle(job: Work, ctx: JobContext) -> None:
        seen.add(job.n)
        if seen.count() == 1:
            release.wait(30)

    worker = Worker(rabbit, queues, [Handler(Work, handle)], concurrency=2)
    Producer(rabbit, queues).enqueue(Work(n=7))
    running = start(worker, None)
    wait_for(lambda: seen.count() == 1)
    close_all_connections()
    # The broker takes the unacked message back and redelivers it on the new channel.
    wait_for(lambda: seen.count() == 2, timeout=30)
    release.set()
    wait_for(lambda: worker.handle.settle_failures() == 1, timeout=30)
    wait_for(lambda: ready(rabbit) == 0)
    running.stop()
    assert seen.runs == [7, 7]
    assert worker.handle.settle_failures() == 1, "the stale ack was refused, not resent"
    assert rabbit.list_dead_letters(QNAME) == []
    rabbit.close()


def test_a_queue_deleted_under_a_worker_ends_its_run(queues: QueueSet) -> None:
    rabbit = backend()
    worker = Worker(rabbit, queues, [Handler(Work, lambda job, ctx: None)])
    running = start(worker, None)
    wait_for(lambda: rabbit.queue_counts(QNAME)[1] == 1)
    with channel() as ch:
        ch.queue_delete(QNAME)
    error = Running.join(running)
    assert isinstance(error, ConsumerStoppedError), f"unexpected: {error!r}"
    assert "cancelled" in str(error)
    rabbit.close()


def test_the_run_ends_when_the_broker_stays_away_longer_than_recovery_allows(
    queues: QueueSet,
) -> None:
    rabbit = backend(recovery_timeout=3)
    worker = Worker(rabbit, queues, [Handler(Work, lambda job, ctx: None)])
    running = start(worker, None)
    wait_for(lambda: rabbit.queue_counts(QNAME)[1] == 1)
    try:
        rabbitmqctl("stop_app")
        error = running.join()
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")
    assert isinstance(error, ConsumerStoppedError), f"unexpected: {error!r}"
    assert "could not recover within 3s" in str(error)
    rabbit.close()
