"""What a publish tells its caller, on the shared RabbitMQ (in the test vhost).

Chosen ids on the wire, which jobs of a batch made it, and a message pika cannot encode
failing alone. Faults that need a broker to stop or block are in test_producer_faults.py;
a closed backend's outcome, the same on every backend, is in
tests/contract/test_enqueue_outcomes.py.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import ClassVar

import pika
import pytest

from queuey_core import Envelope
from queuey_core import Job
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import PublishFailure
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import UnroutableError
from queuey_core import job_id_for
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.messages import Pub
from queuey_core.backends.rabbitmq.messages import properties
from tests.harness import AMQP_URL
from tests.integration.broker import channel
from tests.integration.broker import clean_queues
from tests.integration.broker import delete_queues
from tests.integration.broker import rabbitmqctl
from tests.integration.broker import take_all
from tests.integration.broker import unique

pytestmark = pytest.mark.integration

HERE = unique("it.outcomes")
GONE = unique("it.outcomes.gone")


class Here(Job):
    NAME: ClassVar[str] = "it.outcomes.here"
    QUEUE: ClassVar[str] = HERE
    n: int


class Gone(Job):
    NAME: ClassVar[str] = "it.outcomes.gone"
    QUEUE: ClassVar[str] = GONE
    n: int


@pytest.fixture(autouse=True)
def fresh_queues() -> Iterator[None]:
    """Each test starts and ends without HERE and GONE (``rabbit`` is the conftest's)."""
    with clean_queues(HERE, GONE):
        yield


@pytest.fixture
def producer(rabbit: RabbitMQBackend) -> Producer:
    return Producer(rabbit, QueueSet([QueueConfig(HERE), QueueConfig(GONE)]))


def taken(queue: str) -> list[tuple[str, Envelope]]:
    """Every message on ``queue`` as (message id, envelope), taken off it."""
    return [(props.message_id, Envelope.decode(body)) for props, body in take_all(queue)]


def test_a_chosen_job_id_is_the_message_id_and_the_envelope_id(producer: Producer) -> None:
    one = producer.enqueue(Here(n=1), job_id="invoice-2024-17")
    many = producer.enqueue_many([Here(n=2), Here(n=3)], job_ids=["a", str(one)])
    assert one == job_id_for("invoice-2024-17")
    assert many == [job_id_for("a"), one], "the same key twice is the same id twice"
    found = taken(HERE)
    assert [env.job_id for _, env in found] == [one, job_id_for("a"), one]
    assert [message_id for message_id, _ in found] == [str(one), str(job_id_for("a")), str(one)]


def test_a_batch_with_an_unroutable_part_says_which_jobs_made_it(producer: Producer) -> None:
    with channel() as ch:
        ch.queue_delete(GONE)  # after the producer declared it
    jobs: list[Job] = [Here(n=i) if i % 2 else Gone(n=i) for i in range(10)]
    ids = [job_id_for(f"mixed-{i}") for i in range(10)]
    with pytest.raises(UnroutableError) as caught:
        producer.enqueue_many(jobs, job_ids=ids)
    error = caught.value
    assert isinstance(error, NotEnqueuedError)
    assert error.reason is PublishFailure.UNROUTABLE
    assert set(error.confirmed) == set(ids[1::2])
    assert set(error.not_enqueued) == set(ids[0::2])
    assert error.unknown == ()
    assert "of 10 jobs, 5 confirmed, 0 may or may not be enqueued, 5 not enqueued" in str(error)
    assert {env.job_id for _, env in taken(HERE)} == set(ids[1::2])

    with pytest.raises(UnroutableError) as single:  # a lone publish, on the direct path
        producer.enqueue(Gone(n=99), job_id="lone")
    assert single.value.not_enqueued == (job_id_for("lone"),)
    assert f"job {job_id_for('lone')} was not enqueued" in str(single.value)


def bad_pubs(n: int) -> tuple[list[Pub], list[uuid.UUID]]:
    """``n`` good messages for HERE, then one pika cannot encode (a header of no AMQP
    type) and one with a routing key over 255 bytes: and their ids, in that order."""
    pubs = []
    for i in range(n + 2):
        env = Envelope.for_job(Here(n=i), enqueued_at=0)
        headers = {"x-bad": object()} if i == n else None
        key = "k" * 300 if i == n + 1 else HERE
        pubs.append(Pub("", key, env.encode(), properties(env, headers), env.job_id))
    return pubs, [pub.job_id for pub in pubs if pub.job_id is not None]


def test_a_message_that_cannot_be_encoded_fails_alone_and_the_publisher_goes_on(
    rabbit: RabbitMQBackend, producer: Producer
) -> None:
    # White box: the public API cannot build such a message; headers come from elsewhere
    # in the backend (dead letters), and a future one must not take the link down.
    pubs, ids = bad_pubs(3)
    with pytest.raises(NotEnqueuedError) as caught:
        rabbit._publishing.send(pubs)  # more than one: through the publisher link
    error = caught.value
    assert error.reason is PublishFailure.UNENCODABLE
    assert "could not be encoded for AMQP" in str(error)
    assert set(error.confirmed) == set(ids[:3])
    assert set(error.not_enqueued) == set(ids[3:])

    env = Envelope.for_job(Here(n=0), enqueued_at=0)
    lone = Pub("", HERE, env.encode(), properties(env, {"x": object()}), env.job_id)
    with pytest.raises(NotEnqueuedError) as direct:
        rabbit._publishing.send([lone])  # alone: on the caller's own connection
    assert direct.value.reason is PublishFailure.UNENCODABLE
    assert direct.value.not_enqueued == (env.job_id,)

    # Both paths still work.
    producer.enqueue(Here(n=100))
    producer.enqueue_many([Here(n=101), Here(n=102)])
    assert len(taken(HERE)) == 3 + 3, "the good ones, and nothing of the bad ones"


FULL = unique("it.outcomes.full")


class Full(Job):
    NAME: ClassVar[str] = "it.outcomes.full"
    QUEUE: ClassVar[str] = FULL
    n: int


def test_a_broker_nack_is_not_enqueued_with_its_own_reason(rabbit: RabbitMQBackend) -> None:
    # A queue that takes nothing (a policy of max length 0, reject-publish) makes RabbitMQ
    # nack every publish, as a quorum queue does while it elects a leader. That reason,
    # not "refused", tells the worker the message itself is not at fault (delivery.py).
    vhost = pika.URLParameters(AMQP_URL).virtual_host
    policy = f"{FULL}-takes-nothing"
    rabbitmqctl(
        *("set_policy", "-p", vhost, "--apply-to", "queues", policy),
        *("^" + re.escape(FULL) + "$", '{"max-length": 0, "overflow": "reject-publish"}'),
    )
    try:
        producer = Producer(rabbit, QueueSet([QueueConfig(FULL)]))
        rabbit.declare([QueueConfig(FULL)])
        time.sleep(0.5)  # a policy reaches a new queue a moment after its declaration
        with pytest.raises(NotEnqueuedError) as one:
            producer.enqueue(Full(n=1))
        assert one.value.reason is PublishFailure.NACKED
        with pytest.raises(NotEnqueuedError) as many:
            producer.enqueue_many([Full(n=2), Full(n=3)])
        assert many.value.reason is PublishFailure.NACKED
        assert len(many.value.not_enqueued) == 2
    finally:
        rabbitmqctl("clear_policy", "-p", vhost, policy)
        delete_queues(FULL)
