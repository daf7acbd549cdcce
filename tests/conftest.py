from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from queuey_core import ManualClock, MemoryBackend, Producer, QueueSet
from tests.support import Recorder, seed_queues


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def queues() -> QueueSet:
    return seed_queues()


@pytest.fixture
def backend(clock: ManualClock) -> MemoryBackend:
    return MemoryBackend(clock=clock)


@pytest.fixture
def producer(backend: MemoryBackend, queues: QueueSet, clock: ManualClock) -> Producer:
    return Producer(backend, queues, clock=clock)


@pytest.fixture
def recorder() -> Iterator[Callable[[], Recorder]]:
    """Makes Recorders, and fails the test if an assert inside a handler failed."""
    made: list[Recorder] = []

    def make() -> Recorder:
        rec = Recorder()
        made.append(rec)
        return rec

    yield make
    failures = [exc for rec in made for exc in rec.failed_assertions]
    assert not failures, f"assertions failed inside handlers: {failures}"
