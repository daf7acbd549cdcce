"""``Producer.begin_enqueue_many``: a batch is checked and handed over at once, its
outcome waited for later; batches are handed over in the order of the calls, and a
batch counts as enqueued (to the caller, to the job store) only once confirmed."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

import pytest

from queuey_core import EnqueueUnknownError
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import UnknownQueueError
from queuey_core.backends import PublishesAhead
from queuey_core.envelope import EncodedEnvelope
from tests.producer.test_producer import Misrouted
from tests.support import ALPHA
from tests.support import Greet


class Ahead(MemoryBackend, PublishesAhead):
    """A memory backend that hands batches over at once and confirms each only when its
    wait is called, failing it with ``fail`` if one is set; it notes every step."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.steps: list[str] = []
        self.fail: BaseException | None = None

    def publish_ahead(
        self, items: Sequence[tuple[EncodedEnvelope, float | None]]
    ) -> Callable[[], None]:
        names = ",".join(env.envelope().payload["name"] for env, _ in items)
        self.publish_encoded(items)
        self.steps.append(f"handed {names}")
        fails = [self.fail] if self.fail is not None else []
        self.fail = None

        def wait() -> None:  # fails once, if told to
            self.steps.append(f"waited {names}")
            if fails:
                raise fails.pop()

        return wait


class Recorded:
    """A recorder of queued jobs: what it was told, in order."""

    def __init__(self) -> None:
        self.jobs: list[uuid.UUID] = []

    def enqueued(self, jobs: Iterable[Any]) -> None:
        self.jobs.extend(job.job_id for job in jobs)


def greet(*names: str) -> list[Greet]:
    return [Greet(name=n) for n in names]


def test_a_batch_is_handed_over_at_once_and_confirmed_when_asked(
    clock: ManualClock, queues: QueueSet
) -> None:
    backend = Ahead(clock)
    producer = Producer(backend, queues, clock=clock)
    recorded = Recorded()
    producer.recorder = recorded  # type: ignore[assignment]
    first = producer.begin_enqueue_many(greet("a", "b"))
    second = producer.begin_enqueue_many(greet("c"))
    assert backend.steps == ["handed a,b", "handed c"], "both handed over, none waited for"
    assert backend.pending(ALPHA) == 3
    assert recorded.jobs == [], "nothing recorded as queued before it is confirmed"
    ids = first.result()
    assert backend.steps[-1] == "waited a,b"
    assert recorded.jobs == ids
    assert second.result() != ids
    assert first.result() == ids, "asked again: the same ids, no second wait"
    assert backend.steps == ["handed a,b", "handed c", "waited a,b", "waited c"]
    assert len(recorded.jobs) == 3


def test_a_batch_that_fails_raises_from_result_with_its_jobs_named(
    clock: ManualClock, queues: QueueSet
) -> None:
    backend = Ahead(clock)
    producer = Producer(backend, queues, clock=clock)
    backend.fail = EnqueueUnknownError("the connection was lost before the confirms")
    pending = producer.begin_enqueue_many(greet("a", "b"), job_ids=["k1", "k2"])
    with pytest.raises(EnqueueUnknownError) as caught:
        pending.result()
    assert len(caught.value.unknown) == 2, "the error names the batch's jobs"
    with pytest.raises(EnqueueUnknownError):
        pending.result()
    assert backend.steps == ["handed a,b", "waited a,b"], "an outcome is kept, not waited again"


def test_a_wait_cut_short_is_no_outcome_and_is_waited_for_again(
    clock: ManualClock, queues: QueueSet
) -> None:
    backend = Ahead(clock)
    producer = Producer(backend, queues, clock=clock)
    backend.fail = KeyboardInterrupt()
    pending = producer.begin_enqueue_many(greet("a"))
    with pytest.raises(KeyboardInterrupt):
        pending.result()
    assert len(pending.result()) == 1
    assert backend.steps == ["handed a", "waited a", "waited a"]


def test_a_bad_job_is_refused_by_begin_and_nothing_is_handed_over(
    clock: ManualClock, queues: QueueSet
) -> None:
    backend = Ahead(clock)
    producer = Producer(backend, queues, clock=clock)
    with pytest.raises(UnknownQueueError):
        producer.begin_enqueue_many([Greet(name="a"), Misrouted(id=1)])
    with pytest.raises(ValueError, match="1 job ids for 2 jobs"):
        producer.begin_enqueue_many(greet("a", "b"), job_ids=["k"])
    assert backend.steps == []
    assert backend.pending(ALPHA) == 0


def test_without_publish_ahead_the_batch_is_published_by_begin(
    backend: MemoryBackend, producer: Producer
) -> None:
    pending = producer.begin_enqueue_many(greet("a", "b"))
    assert backend.pending(ALPHA) == 2, "published (and confirmed) before begin returned"
    assert len(pending.result()) == 2


class Refusing(MemoryBackend):
    """A memory backend whose broker refuses every batch."""

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        raise NotEnqueuedError("refused")


def test_without_publish_ahead_a_failed_publish_is_raised_by_result(
    clock: ManualClock, queues: QueueSet
) -> None:
    pending = Producer(Refusing(clock=clock), queues, clock=clock).begin_enqueue_many(greet("a"))
    with pytest.raises(NotEnqueuedError) as caught:
        pending.result()
    assert len(caught.value.not_enqueued) == 1
