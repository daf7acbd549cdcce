"""Producer: validation happens before anything is published."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import ValidationError

from queuey_core import ConfigError
from queuey_core import InvalidPriorityError
from queuey_core import Job
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import UnknownQueueError
from tests.support import ALPHA
from tests.support import GAMMA
from tests.support import Greet
from tests.support import Nudge


class Misrouted(Job):
    NAME: ClassVar[str] = "test.misrouted"
    QUEUE: ClassVar[str] = "test.nowhere"
    id: int


def test_enqueue_publishes_a_first_attempt_envelope(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    job_id = producer.enqueue(Greet(name="ada"), priority=3)
    assert backend.pending(ALPHA) == 1
    assert job_id


def test_an_unknown_queue_is_refused_before_anything_is_published(
    backend: MemoryBackend, producer: Producer
) -> None:
    with pytest.raises(UnknownQueueError, match=r"test\.nowhere"):
        producer.enqueue(Misrouted(id=1))


def test_a_priority_above_the_queue_maximum_is_refused(
    backend: MemoryBackend, producer: Producer
) -> None:
    with pytest.raises(InvalidPriorityError, match="maximum is 10"):
        producer.enqueue(Greet(name="ada"), priority=11)
    with pytest.raises(InvalidPriorityError, match="not a priority queue"):
        producer.enqueue(Nudge(id=1), priority=1)
    assert backend.pending(ALPHA) == 0
    assert backend.pending(GAMMA) == 0


def test_enqueue_many_checks_every_job_before_publishing_any(
    backend: MemoryBackend, producer: Producer
) -> None:
    with pytest.raises(UnknownQueueError):
        producer.enqueue_many([Greet(name="a"), Misrouted(id=1), Greet(name="b")])
    assert backend.pending(ALPHA) == 0
    ids = producer.enqueue_many([Greet(name="a"), Greet(name="b")])
    assert len(set(ids)) == 2
    assert backend.pending(ALPHA) == 2


def test_a_delayed_job_is_held_until_its_time(
    backend: MemoryBackend, producer: Producer, clock: ManualClock
) -> None:
    producer.enqueue(Greet(name="later"), delay=10)
    assert (backend.pending(ALPHA), backend.held(ALPHA)) == (0, 1)
    clock.advance(9.9)
    assert backend.pending(ALPHA) == 0
    clock.advance(0.1)
    assert (backend.pending(ALPHA), backend.held(ALPHA)) == (1, 0)


def test_a_negative_delay_is_refused(producer: Producer) -> None:
    with pytest.raises(ValueError, match="negative"):
        producer.enqueue(Greet(name="x"), delay=-1)


def test_payloads_are_validated_when_the_job_is_built() -> None:
    with pytest.raises(ValidationError):
        Greet.model_validate({"name": 42})


def test_queue_set_rejects_reserved_and_duplicate_names(queues: QueueSet) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        QueueConfig("jobs.dlq")
    with pytest.raises(ConfigError, match="twice"):
        QueueSet([QueueConfig("a"), QueueConfig("a")])
    with pytest.raises(ConfigError, match="max_priority"):
        QueueConfig("a", max_priority=256)
    with pytest.raises(ConfigError, match="prefetch"):
        QueueConfig("a", prefetch=-1)


def test_membership_in_a_queue_set_never_raises(queues: QueueSet) -> None:
    assert ALPHA in queues
    assert "test.nowhere" not in queues
    assert queues.get("test.nowhere") is None
