"""Cancels in the embedded backend's file reach a worker of another backend (another
process, as far as the file knows): before it starts, and while the job runs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from tests.results.support import settled_record
from tests.support import Greet
from tests.support import start


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queuey.db'}"


@pytest.fixture
def store(url: str) -> Iterator[JobStore]:
    s = open_job_store(url)
    yield s
    s.close()


def test_cancels_in_the_file_reach_another_backends_worker(
    url: str, store: JobStore, queues: QueueSet
) -> None:
    other = SqliteBackend(url)
    producer = Producer(other, queues)
    early = producer.enqueue(Greet(name="early"), delay=0.2)
    other.cancel_jobs([early])  # before any worker exists

    started = threading.Event()

    def patient(job: Greet, ctx: JobContext) -> None:
        started.set()
        ctx.wait(60)
        ctx.raise_if_cancelled()

    backend = SqliteBackend(url)
    worker = Worker(backend, queues, [Handler(Greet, patient)], hooks=[JobRecorder(store)])
    running = start(worker, None)
    try:
        settled_record(store, early, None, JobState.CANCELLED)
        late = producer.enqueue(Greet(name="late"))
        assert started.wait(20)
        other.cancel_jobs([late])  # seen through the file, by the worker's watch
        record = settled_record(store, late, None, JobState.CANCELLED)
    finally:
        running.stop()
        backend.close()
        other.close()
    assert [a.outcome for a in record.attempts] == [JobState.CANCELLED]
    seen: list[uuid.UUID] = []
    again = SqliteBackend(url)
    again.watch_cancels(seen.extend).close()
    again.close()
    assert sorted(seen) == sorted([early, late]), "a new watch reads the whole window"
