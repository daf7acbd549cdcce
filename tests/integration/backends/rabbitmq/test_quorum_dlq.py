"""A quorum queue's dead-letter queue is quorum, and one an earlier version made classic
is kept: on the shared broker's test virtual host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from queuey_core import QueueConfig
from queuey_core import QueueKind
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.harness import AMQP_URL
from tests.integration.broker import channel
from tests.integration.broker import list_json
from tests.integration.broker import scratch_queue

pytestmark = pytest.mark.integration


@pytest.fixture
def queue() -> Iterator[str]:
    with scratch_queue("it.qdlq") as name:
        yield name


def kinds(*names: str) -> dict[str, str]:
    return {q["name"]: q["type"] for q in list_json("queues", "name", "type") if q["name"] in names}


def test_a_quorum_queue_gets_a_quorum_dead_letter_queue(queue: str) -> None:
    rabbit = RabbitMQBackend(AMQP_URL)
    try:
        rabbit.declare([QueueConfig(queue, kind=QueueKind.QUORUM)])
        rabbit.declare([QueueConfig(queue, kind=QueueKind.QUORUM)])  # declaring again is fine
    finally:
        rabbit.close()
    assert kinds(queue, f"{queue}.dlq") == {queue: "quorum", f"{queue}.dlq": "quorum"}


def test_a_classic_dead_letter_queue_made_before_is_kept(queue: str) -> None:
    with channel() as ch:
        ch.queue_declare(f"{queue}.dlq", durable=True, arguments={"x-queue-type": "classic"})
    rabbit = RabbitMQBackend(AMQP_URL)
    try:
        rabbit.declare([QueueConfig(queue, kind=QueueKind.QUORUM)])
        assert rabbit.list_dead_letters(queue) == []
    finally:
        rabbit.close()
    assert kinds(queue, f"{queue}.dlq") == {queue: "quorum", f"{queue}.dlq": "classic"}
