"""Worker options the seed's tests do not exercise on their own."""

from __future__ import annotations

from typing import ClassVar

import pytest

from queuey_core import Job
from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import UnknownQueueError
from queuey_core import Worker
from tests.support import ALPHA
from tests.support import Greet
from tests.support import noop


class Stray(Job):
    NAME: ClassVar[str] = "test.stray"
    QUEUE: ClassVar[str] = "test.nowhere"


def test_a_concurrency_of_zero_counts_as_one(backend: MemoryBackend, queues: QueueSet) -> None:
    assert Worker(backend, queues, [noop(Greet)], concurrency=0).concurrency == 1


def test_default_concurrency_follows_the_chosen_queues(
    backend: MemoryBackend, queues: QueueSet
) -> None:
    assert Worker(backend, queues, [noop(Greet)], consume=[ALPHA]).concurrency == 4


def test_consuming_an_unknown_queue_is_refused(backend: MemoryBackend, queues: QueueSet) -> None:
    with pytest.raises(UnknownQueueError, match=r"test\.nowhere"):
        Worker(backend, queues, [noop(Greet)], consume=["test.nowhere"])


def test_a_handler_for_a_job_on_an_undeclared_queue_is_refused(
    backend: MemoryBackend, queues: QueueSet
) -> None:
    with pytest.raises(UnknownQueueError, match=r"test\.nowhere"):
        Worker(backend, queues, [noop(Stray)])


def test_a_non_positive_job_timeout_is_refused(backend: MemoryBackend, queues: QueueSet) -> None:
    with pytest.raises(ValueError, match="positive"):
        Worker(backend, queues, [noop(Greet)], job_timeout=0)
