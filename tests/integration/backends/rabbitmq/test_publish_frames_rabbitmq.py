"""The publisher link's own frames, as RabbitMQ reads them (in the test vhost).

The link writes each batch's frames itself (test_publish_frames.py, under
tests/backends/rabbitmq/, holds them to pika's byte for byte); here the broker takes
them: bodies larger than a frame, mixed job types and priorities in one batch, and
every message's properties as a consumer sees them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import Envelope
from queuey_core import Job
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.harness import AMQP_URL
from tests.integration.broker import clean_queues
from tests.integration.broker import take_all
from tests.integration.broker import unique

pytestmark = pytest.mark.integration

PLAIN = unique("it.frames")
RANKED = unique("it.frames.ranked")


class Big(Job):
    NAME: ClassVar[str] = "it.frames.big"
    QUEUE: ClassVar[str] = PLAIN
    text: str


class Ranked(Job):
    NAME: ClassVar[str] = "it.frames.ranked ✓"
    QUEUE: ClassVar[str] = RANKED
    n: int


@pytest.fixture
def producer() -> Iterator[Producer]:
    with clean_queues(PLAIN, RANKED):
        backend = RabbitMQBackend(AMQP_URL, publish_timeout=20)
        queues = QueueSet([QueueConfig(PLAIN), QueueConfig(RANKED, max_priority=5)])
        yield Producer(backend, queues)
        backend.close()


def taken(queue: str) -> list[tuple[Any, Envelope]]:
    """Every message on ``queue`` as (properties, envelope), taken off it."""
    return [(props, Envelope.decode(body)) for props, body in take_all(queue)]


def test_a_batch_of_bodies_larger_than_a_frame_arrives_whole(producer: Producer) -> None:
    # RabbitMQ's frame_max is 128 KiB: these bodies take two and four body frames.
    texts = ["a" * 200_000, "small", "b" * 400_000, "é" * 70_000]
    ids = producer.enqueue_many([Big(text=t) for t in texts])
    got = taken(PLAIN)
    assert [env.job_id for _, env in got] == ids, "all of them, in order"
    assert [env.payload["text"] for _, env in got] == texts, "every body whole"


def test_mixed_types_and_priorities_in_one_batch_carry_their_properties(
    producer: Producer,
) -> None:
    jobs: list[Job] = [Ranked(n=i) if i % 2 else Big(text=str(i)) for i in range(400)]
    ids = producer.enqueue_many(jobs, priority=None)
    ranked_ids = producer.enqueue_many([Ranked(n=1000), Ranked(n=1001)], priority=3)
    got = taken(PLAIN) + taken(RANKED)
    assert len(got) == 402
    by_id = {env.job_id: (props, env) for props, env in got}
    assert set(by_id) == {*ids, *ranked_ids}
    for job_id, (props, env) in by_id.items():
        assert props.message_id == str(job_id), "the message id is the job id"
        assert props.type == env.job_type
        assert props.delivery_mode == 2, "persistent"
        assert props.content_type == "application/json"
        assert props.timestamp == env.enqueued_at // 1000
        assert props.headers is None
        assert props.priority == (env.priority or None)
    assert {by_id[i][0].priority for i in ranked_ids} == {3}


def test_batches_handed_over_ahead_arrive_whole_and_in_the_order_of_the_calls(
    producer: Producer,
) -> None:
    # Three batches of 700 (each 4 chunks of the link's) handed over before any is
    # confirmed, as `enqueue --file` keeps two in flight: one queue, file order.
    batches = [[Big(text=f"{b}-{i}") for i in range(700)] for b in range(3)]
    pending = [producer.begin_enqueue_many(batch) for batch in batches]
    ids = [job_id for sent in pending for job_id in sent.result()]
    got = taken(PLAIN)
    assert [env.job_id for _, env in got] == ids
    assert [env.payload["text"] for _, env in got] == [j.text for b in batches for j in b]
