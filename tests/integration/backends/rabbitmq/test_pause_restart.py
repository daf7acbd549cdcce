"""A paused queue stays paused across a restart of the broker, on a node of the tests'
own (``fresh_node``: the shared broker is never stopped), with a worker running through
it: the worker reconnects, consumes the other queue again, takes none of the paused
one's jobs, and takes them once resumed; nothing is lost or run twice."""

from __future__ import annotations

import threading
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
from queuey_core.flow.pause import pause_queue
from queuey_core.flow.pause import paused_queues
from queuey_core.flow.pause import resume_queue
from tests.integration.nodes import Node
from tests.support import start
from tests.support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELD = "pause.held"
OPEN = "pause.open"


class Held(Job):
    NAME: ClassVar[str] = "pause.held"
    QUEUE: ClassVar[str] = HELD
    n: int


class Open(Job):
    NAME: ClassVar[str] = "pause.open"
    QUEUE: ClassVar[str] = OPEN
    n: int


def test_a_pause_survives_a_broker_restart_and_the_running_worker_keeps_to_it(
    fresh_node: Node,
) -> None:
    url = fresh_node.url()
    queues = QueueSet([QueueConfig(HELD, prefetch=4), QueueConfig(OPEN, prefetch=4)])
    lock = threading.Lock()
    ran: list[str] = []

    def record(job: Held | Open, ctx: JobContext) -> None:
        with lock:
            ran.append(f"{job.NAME} {job.n}")

    def runs(name: str) -> list[str]:
        with lock:
            return [r for r in ran if r.startswith(name)]

    worker_backend = RabbitMQBackend(url, recovery_timeout=180, publish_timeout=10)
    operator = RabbitMQBackend(url, recovery_timeout=180, publish_timeout=10)
    worker = Worker(worker_backend, queues, [Handler(Held, record), Handler(Open, record)])
    running = start(worker, None)
    try:
        wait_for(lambda: operator.queue_counts(HELD)[1] == 1, timeout=60)
        assert pause_queue(operator, HELD).changed
        wait_for(lambda: operator.queue_counts(HELD)[1] == 0, timeout=60)
        producer = Producer(operator, queues)
        producer.enqueue_many([Held(n=n) for n in range(3)])
        operator.close()

        fresh_node.stop()
        fresh_node.start()

        operator = RabbitMQBackend(url, recovery_timeout=180, publish_timeout=10)
        assert paused_queues(operator, [HELD, OPEN]) == {HELD}, "the pause is durable"
        producer = Producer(operator, queues)
        producer.enqueue(Open(n=1))
        wait_for(lambda: runs(Open.NAME) == [f"{Open.NAME} 1"], timeout=180)
        assert running.error is None
        assert runs(Held.NAME) == [], "a paused queue's jobs ran after the restart"
        assert operator.queue_counts(HELD) == (3, 0), "kept, and no consumer"

        assert resume_queue(operator, HELD).changed
        wait_for(lambda: len(runs(Held.NAME)) == 3, timeout=60)
        assert sorted(runs(Held.NAME)) == [f"{Held.NAME} {n}" for n in range(3)]
        wait_for(lambda: operator.queue_counts(HELD) == (0, 1), timeout=60)
    finally:
        worker.handle.shutdown()
        running.join()
        worker_backend.close()
        operator.close()
