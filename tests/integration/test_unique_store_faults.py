"""Unique jobs on RabbitMQ when their job store is out of reach: they fail closed (not
enqueued, one clear error), and jobs without a key are not held back by it."""

from __future__ import annotations

from typing import ClassVar

import pytest

from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.open import open_backend
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_store import open_unique_keys
from queuey_core.jobs import Job
from queuey_core.settings.sections import BrokerSettings
from tests.harness import AMQP_URL
from tests.integration.broker import clean_queues
from tests.integration.broker import take_job_ids

pytestmark = pytest.mark.integration

QUEUE = "test.unique.faults"
#: Nothing listens on port 1: the store is out of reach.
GONE = "postgresql://postgres:s3cret@127.0.0.1:1/queuey?schema=gone"


class Refund(Job):
    NAME: ClassVar[str] = "test.unique.refund"
    QUEUE: ClassVar[str] = QUEUE
    UNIQUE: ClassVar[Unique] = Unique(key=("order",))
    order: int


class Plain(Job):
    NAME: ClassVar[str] = "test.unique.plain"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def test_a_unique_job_is_not_enqueued_while_its_store_is_out_of_reach() -> None:
    with clean_queues(QUEUE):
        backend = open_backend(BrokerSettings(url=AMQP_URL))
        keys = open_unique_keys(GONE)
        try:
            producer = Producer(backend, QueueSet([QueueConfig(QUEUE)]), unique_keys=keys)
            with pytest.raises(NotEnqueuedError) as caught:
                producer.enqueue(Refund(order=1))
            text = str(caught.value)
            assert "\n" not in text
            assert "s3cret" not in text, "no password in the error"
            sent = producer.enqueue(Plain(n=1))  # no key: the store is not asked
            assert take_job_ids(QUEUE) == [sent], "only the job without a key"
        finally:
            keys.close()
            backend.close()
