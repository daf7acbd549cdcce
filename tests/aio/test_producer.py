"""The asyncio producer: the producer's outcomes and errors, awaited, and an event loop
that keeps running while a batch is confirmed (on the in-memory backend; the RabbitMQ
twin is tests/integration/test_async_producer.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest

from queuey_core import AsyncProducer
from queuey_core import EnqueueUnknownError
from queuey_core import Envelope
from queuey_core import InvalidPriorityError
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import QueueSet
from queuey_core import QueueyError
from queuey_core.aio import producer as aio_producer
from tests.aio.ticking import idle_ticks
from tests.aio.ticking import kept_ticking
from tests.aio.ticking import ticking
from tests.harness import Wrapping
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import Ping
from tests.support import drain
from tests.support import seed_queues


class Failing(Wrapping):
    """Publishes batches until the ``fail_on``-th, which ends with ``error``."""

    def __init__(self, inner: MemoryBackend, fail_on: int, error: type[Exception]) -> None:
        super().__init__(inner)
        self.calls = 0
        self.sizes: list[int] = []
        self.fail_on = fail_on
        self.error = error

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        self.calls += 1
        self.sizes.append(len(items))
        if self.calls == self.fail_on:
            raise self.error("the broker went away")
        self.inner.publish_many(items)

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        self.publish_many([(envelope, delay)])


def test_enqueue_is_awaited_and_the_job_is_on_its_queue() -> None:
    backend = MemoryBackend()

    async def main() -> uuid.UUID:
        async with AsyncProducer(backend, seed_queues()) as producer:
            return await producer.enqueue(Greet(name="ada"), priority=3)

    job_id = asyncio.run(main())
    assert backend.pending(ALPHA) == 1
    (envelope,) = drain(backend, ALPHA)
    assert envelope.job_id == job_id
    assert envelope.priority == 3


def test_bad_input_is_refused_before_anything_is_published() -> None:
    backend = MemoryBackend()

    async def main() -> None:
        async with AsyncProducer(backend, seed_queues()) as producer:
            with pytest.raises(InvalidPriorityError):
                await producer.enqueue(Greet(name="ada"), priority=11)
            with pytest.raises(ValueError, match="delay"):
                await producer.enqueue(Greet(name="ada"), delay=-1)
            with pytest.raises(ValueError, match="delay"):
                await producer.enqueue_many([Greet(name=str(i)) for i in range(1200)], delay=-1)

    asyncio.run(main())
    assert backend.pending(ALPHA) == 0


def test_a_bad_job_at_the_end_of_a_large_batch_stops_the_whole_batch() -> None:
    backend = MemoryBackend()
    queues = QueueSet(list(seed_queues().values()))
    jobs = [Greet(name=str(i)) for i in range(aio_producer.SLICE * 3)]

    async def main() -> None:
        async with AsyncProducer(backend, queues) as producer:
            with pytest.raises(InvalidPriorityError):
                # Ping's queue has no priorities: the last slice's jobs cannot have one.
                await producer.enqueue_many([*jobs, Ping(seq=1)], priority=2)

    asyncio.run(main())
    assert backend.pending(ALPHA) == 0, "nothing of the batch was published"
    assert backend.pending(BETA) == 0


@pytest.mark.parametrize("error", [NotEnqueuedError, EnqueueUnknownError])
def test_a_failed_slice_accounts_for_every_job_of_the_batch(error: type[Exception]) -> None:
    inner = MemoryBackend()
    backend = Failing(inner, fail_on=2, error=error)
    count = aio_producer.SLICE * 3

    async def main() -> BaseException:
        async with AsyncProducer(backend, seed_queues()) as producer:
            with pytest.raises(error) as caught:
                await producer.enqueue_many([Greet(name=str(i)) for i in range(count)])
            return caught.value

    exc = asyncio.run(main())
    assert isinstance(exc, (NotEnqueuedError, EnqueueUnknownError))
    on_queue = {e.job_id for e in drain(inner, ALPHA)}
    first, failed = backend.sizes
    assert set(exc.confirmed) == on_queue, "the first slice is confirmed, and said so"
    assert len(exc.confirmed) == first
    never_sent = count - first - failed
    if error is EnqueueUnknownError:
        assert len(exc.unknown) == failed, "the failed slice is in doubt"
        assert len(exc.not_enqueued) == never_sent, "the rest was never sent"
    else:
        assert len(exc.not_enqueued) == failed + never_sent, "failed, and never sent"
    assert len(set(exc.confirmed) | set(exc.unknown) | set(exc.not_enqueued)) == count, (
        "every job of the batch is in exactly one list"
    )
    assert backend.calls == 2, "the slice after the failed one was never sent"


def test_one_producer_is_shared_by_many_tasks() -> None:
    backend = MemoryBackend()

    async def main() -> list[uuid.UUID]:
        async with AsyncProducer(backend, seed_queues()) as producer:

            async def client(n: int) -> list[uuid.UUID]:
                ids = [await producer.enqueue(Greet(name=f"{n}-{i}")) for i in range(10)]
                ids += await producer.enqueue_many([Greet(name=f"{n}-m{i}") for i in range(10)])
                return ids

            results = await asyncio.gather(*(client(n) for n in range(50)))
        return [job_id for ids in results for job_id in ids]

    ids = asyncio.run(main())
    assert len(set(ids)) == 1000
    assert {e.job_id for e in drain(backend, ALPHA)} == set(ids)


def test_a_closed_producer_refuses_to_enqueue() -> None:
    backend = MemoryBackend()

    async def main() -> None:
        producer = AsyncProducer(backend, seed_queues(), close_backend=True)
        async with producer:
            await producer.enqueue(Greet(name="ada"))
        await producer.aclose()  # twice is fine
        with pytest.raises(QueueyError, match="closed"):
            await producer.enqueue(Greet(name="late"))

    asyncio.run(main())
    assert backend.is_closed(), "close_backend closes the backend too"


def test_the_loop_keeps_ticking_while_ten_thousand_jobs_are_confirmed() -> None:
    backend = MemoryBackend()
    jobs = [Greet(name=str(i)) for i in range(10_000)]

    async def main() -> None:
        async with AsyncProducer(backend, seed_queues()) as producer:
            idle = await idle_ticks(0.2)
            ids, during = await ticking(producer.enqueue_many(jobs))
            assert len(ids) == 10_000
            problem = kept_ticking(during, idle)
            assert problem is None, problem

    asyncio.run(main())
    assert backend.pending(ALPHA) == 10_000
