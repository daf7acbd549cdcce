"""Failure on a real RabbitMQ: lost connections, heartbeats, dead channels, lost queues.

On the tests' own node (``conftest.py``), never the shared broker: these tests close
every connection, stop the broker and raise alarms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from typing import ClassVar

import pika
import pytest

from queuey_core import ConsumerStoppedError
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import RetryPolicy
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.integration.broker import unique
from tests.integration.nodes import Node
from tests.integration.nodes import port_open
from tests.support import Running
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

QNAME = unique("it.faults")


class Work(Job):
    NAME: ClassVar[str] = "it.work"
    QUEUE: ClassVar[str] = QNAME
    n: int


@contextmanager
def channel(node: Node) -> Iterator[Any]:
    """A raw pika channel on the node, for what queuey would not do."""
    conn = pika.BlockingConnection(pika.URLParameters(node.url()))
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


@pytest.fixture
def queues(node: Node) -> Iterator[QueueSet]:
    def delete() -> None:
        with channel(node) as ch:
            ch.queue_delete(QNAME)
            ch.queue_delete(f"{QNAME}.dlq")

    delete()
    yield QueueSet([QueueConfig(QNAME, prefetch=10, retry=RetryPolicy(5))])
    if port_open(node.amqp_port):  # a test may have left it down; the next one restarts it
        delete()


def backend(node: Node, **kwargs: float) -> RabbitMQBackend:
    return RabbitMQBackend(node.url(), publish_timeout=20, **kwargs)  # type: ignore[arg-type]


def ready(rabbit: RabbitMQBackend) -> int:
    return rabbit.queue_counts(QNAME)[0]


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
    node: Node,
) -> None:
    rabbit = backend(node)
    seen = Seen()

    def handle(job: Work, ctx: JobContext) -> None:
        time.sleep(0.003)
        seen.add(job.n)

    worker = Worker(rabbit, queues, [Handler(Work, handle)])
    producer = Producer(rabbit, queues)
    producer.enqueue_many([Work(n=i) for i in range(300)])
    running = start(worker, None)
    wait_for(lambda: seen.count() >= 60)
    node.close_all_connections()

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
    node: Node,
) -> None:
    rabbit = backend(node)
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
    node.close_all_connections()
    thread.join(60)
    assert errors == [], f"enqueue_many failed: {errors}"
    # Republishing after a drop can duplicate (at least once), never lose.
    wait_for(lambda: ready(rabbit) >= 5001, timeout=20)
    rabbit.close()


def test_a_job_longer_than_three_heartbeats_is_acked_once(queues: QueueSet, node: Node) -> None:
    rabbit = backend(node, heartbeat=1)
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
    node: Node,
) -> None:
    rabbit = backend(node)
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
    node.close_all_connections()
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


def test_a_queue_deleted_under_a_worker_ends_its_run(queues: QueueSet, node: Node) -> None:
    rabbit = backend(node)
    worker = Worker(rabbit, queues, [Handler(Work, lambda job, ctx: None)])
    running = start(worker, None)
    wait_for(lambda: rabbit.queue_counts(QNAME)[1] == 1)
    with channel(node) as ch:
        ch.queue_delete(QNAME)
    error = Running.join(running)
    assert isinstance(error, ConsumerStoppedError), f"unexpected: {error!r}"
    assert "cancelled" in str(error)
    rabbit.close()


def test_the_run_ends_when_the_broker_stays_away_longer_than_recovery_allows(
    queues: QueueSet, node: Node
) -> None:
    rabbit = backend(node, recovery_timeout=3)
    worker = Worker(rabbit, queues, [Handler(Work, lambda job, ctx: None)])
    running = start(worker, None)
    wait_for(lambda: rabbit.queue_counts(QNAME)[1] == 1)
    try:
        node.stop_app()
        error = running.join()
    finally:
        node.start_app()
    assert isinstance(error, ConsumerStoppedError), f"unexpected: {error!r}"
    assert "could not recover within 3s" in str(error)
    rabbit.close()


def test_a_worker_keeps_acking_while_the_broker_blocks_publishers(
    queues: QueueSet, node: Node
) -> None:
    # Consuming and publishing have connections of their own: a memory alarm blocks the
    # publisher's, and the consumer's acks still flow.
    rabbit = backend(node)
    Producer(rabbit, queues).enqueue_many([Work(n=i) for i in range(200)])
    seen = Seen()
    worker = Worker(rabbit, queues, [Handler(Work, lambda job, ctx: seen.add(job.n))])
    node.memory_alarm(True)
    try:
        assert "Memory alarm" in node.alarms()
        running = start(worker, None)
        wait_for(lambda: len(seen.distinct()) == 200, timeout=30)
        wait_for(lambda: ready(rabbit) == 0, timeout=10)
        running.stop()
    finally:
        node.memory_alarm(False)
    assert "no alarms" in node.alarms()
    assert seen.count() == 200, "a job ran twice: an ack did not go through"
    assert worker.handle.settle_failures() == 0
    rabbit.close()


def test_deliveries_whose_channel_died_before_they_started_are_not_run(
    queues: QueueSet, node: Node
) -> None:
    rabbit = backend(node)
    seen = Seen()
    release = threading.Event()

    def handle(job: Work, ctx: JobContext) -> None:
        seen.add(job.n)
        if job.n == 0:
            release.wait(30)

    Producer(rabbit, queues).enqueue_many([Work(n=i) for i in range(5)])
    # One job at a time, prefetch 10: jobs 1-4 wait in the worker while job 0 runs.
    worker = Worker(rabbit, queues, [Handler(Work, handle)], concurrency=1)
    running = start(worker, None)
    wait_for(lambda: seen.count() == 1)
    node.close_all_connections()
    # The new consumer has taken all five back (redelivered behind the stale four).
    wait_for(lambda: rabbit.queue_counts(QNAME) == (0, 1), timeout=30)
    release.set()
    wait_for(lambda: len(seen.distinct()) == 5 and worker.handle.in_flight() == 0, timeout=30)
    wait_for(lambda: ready(rabbit) == 0)
    running.stop()
    rabbit.close()
    assert seen.runs.count(0) == 2, "job 0 was running: its ack could not go through"
    assert [seen.runs.count(n) for n in range(1, 5)] == [1, 1, 1, 1], (
        f"jobs that never started on the dead channel ran twice: {seen.runs}"
    )
