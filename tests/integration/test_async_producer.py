"""The asyncio producer on a real RabbitMQ: the loop keeps ticking while ten thousand
jobs are published and confirmed, and every one is on its queue after."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from queuey_core import AsyncProducer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.aio.ticking import idle_ticks
from tests.aio.ticking import kept_ticking
from tests.aio.ticking import ticking
from tests.integration.broker import delete_queues
from tests.integration.broker import take_job_ids
from tests.support import Greet

pytestmark = pytest.mark.integration


@pytest.fixture
def queues() -> Iterator[QueueSet]:
    queues = QueueSet([QueueConfig(Greet.QUEUE, prefetch=4, max_priority=10)])
    delete_queues(*queues)
    yield queues
    delete_queues(*queues)


def test_the_loop_keeps_ticking_while_ten_thousand_jobs_are_confirmed(
    rabbit: RabbitMQBackend, queues: QueueSet
) -> None:
    jobs = [Greet(name=str(i)) for i in range(10_000)]

    async def main() -> list[uuid.UUID]:
        async with AsyncProducer(rabbit, queues) as producer:
            idle = await idle_ticks(0.2)
            ids, during = await ticking(producer.enqueue_many(jobs))
            problem = kept_ticking(during, idle)
            assert problem is None, problem
            one = await producer.enqueue(Greet(name="one more"))
        return [*ids, one]

    ids = asyncio.run(main())
    assert sorted(take_job_ids(Greet.QUEUE)) == sorted(ids), "every job confirmed is there"
