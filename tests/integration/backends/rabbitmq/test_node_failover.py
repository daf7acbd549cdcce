"""A URL list whose first node does not answer: every connection queuey opens goes on
to the next node, at once. On the shared broker (the test virtual host), with a dead
port listed first; the cluster tests (``test_cluster.py``) stop a real node."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from queuey_core import BackendError
from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.election import RabbitElection
from queuey_core.backends.rabbitmq.schedule_state import RabbitScheduleState
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.harness import VHOST
from tests.integration.broker import delete_queues
from tests.integration.broker import scratch_queue
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration

#: Nothing listens on port 1: a node that is down.
DOWN = f"amqp://guest:n0tsecret@127.0.0.1:1/{AMQP_URL.rsplit('/', 1)[1]}"


@pytest.fixture
def queue() -> Iterator[str]:
    with scratch_queue("it.failover") as name:
        yield name


def test_a_backend_whose_first_node_is_down_works_through_the_next(queue: str) -> None:
    # shuffle=False: the dead node is tried first by every connection.
    rabbit = RabbitMQBackend([DOWN, AMQP_URL], shuffle=False, connect_timeout=2)
    config = QueueConfig(queue, prefetch=4)
    queues = QueueSet([config])
    ran: list[str] = []

    class Ping(Job):
        NAME = "it.failover.ping"
        QUEUE = queue
        n: int

    def ping(job: Ping, ctx: JobContext) -> None:
        ran.append(str(ctx.job_id))

    try:
        began = time.monotonic()
        rabbit.declare([config])  # the admin connection
        producer = Producer(rabbit, queues)
        ids = [str(producer.enqueue(Ping(n=0)))]  # the direct publisher, then the link
        ids += [str(i) for i in producer.enqueue_many([Ping(n=n) for n in range(1, 20)])]
        worker = Worker(rabbit, queues, [Handler(Ping, ping)])
        running = start(worker, None)
        wait_for(lambda: len(set(ran)) == len(ids), timeout=30)
        worker.handle.shutdown()
        running.join()
        took = time.monotonic() - began
        assert sorted(set(ran)) == sorted(ids)
        assert rabbit.list_dead_letters(queue) == []
        status = rabbit.connection_status()
        assert status["consumer"].state == "open"
        assert status["publisher"].state == "open"
        assert took < 20, f"a refused node should cost no back-off: {took:.1f}s"
    finally:
        rabbit.close()


def test_a_list_of_nodes_that_are_all_down_names_each_without_a_password() -> None:
    other = DOWN.replace(":1/", ":2/")
    with pytest.raises(BackendError) as caught:
        RabbitMQBackend([DOWN, other], connect_timeout=1)
    message = str(caught.value)
    assert "n0tsecret" not in message
    assert "127.0.0.1:1/" in message, message
    assert "127.0.0.1:2/" in message, message


def test_the_scheduler_connections_fail_over_too() -> None:
    require_broker()
    leader_queue = f"queuey.test.leader.{uuid.uuid4().hex[:8]}"
    election = RabbitElection([DOWN, AMQP_URL], heartbeat=2, queue=leader_queue)
    state = RabbitScheduleState([DOWN, AMQP_URL])
    name = f"failover-{uuid.uuid4().hex[:8]}"
    try:
        election.start(lambda: None)
        wait_for(election.is_leader, timeout=20)
        assert election.confirm()
        state.record(name, 1234)
        assert state.last_fired([name]) == {name: 1234}
    finally:
        election.close()
        state.close()
        delete_queues(leader_queue, f"queuey.schedule.{name}")


def test_the_enqueued_envelope_is_untouched_by_the_route(queue: str) -> None:
    """The URL list changes where a message goes in, never what it holds."""
    rabbit = RabbitMQBackend(f"{DOWN},{AMQP_URL}", shuffle=False, connect_timeout=2)
    try:
        config = QueueConfig(queue)
        rabbit.declare([config])
        env = Envelope(
            job_id=uuid.uuid4(),
            job_type="it.job",
            queue=queue,
            attempt=1,
            deferrals=0,
            priority=0,
            enqueued_at=int(time.time() * 1000),
            payload={"vhost": VHOST},
        )
        rabbit.publish_dead_letter(env, "checked")
        [dead] = rabbit.list_dead_letters(queue)
        assert dead.envelope == env  # type: ignore[union-attr]
    finally:
        rabbit.close()
