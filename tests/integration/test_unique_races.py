"""Races for unique keys between processes: 8 producers enqueueing the same 1,000 keys at
once make exactly 1,000 jobs, on the embedded file and on RabbitMQ with a SQLite and with
a PostgreSQL job store (docs/flow-control.md, "Unique jobs")."""

from __future__ import annotations

import multiprocessing
import random
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import ClassVar

import pytest

from queuey_core import DuplicateJobError
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.open import open_backend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_store import open_unique_keys
from queuey_core.jobs import Job
from queuey_core.settings.sections import BrokerSettings
from tests.backend_kinds import PG_URL
from tests.backend_kinds import drop_schema
from tests.harness import AMQP_URL
from tests.integration.broker import clean_queues
from tests.integration.broker import take_job_ids

QUEUE = "test.unique.race"
KEYS = 1000
PRODUCERS = 8
BATCH = 50


class Charge(Job):
    NAME: ClassVar[str] = "test.unique.charge"
    QUEUE: ClassVar[str] = QUEUE
    UNIQUE: ClassVar[Unique] = Unique(key=("order",))
    order: int


def produce(broker: str, store: str | None, seed: int, go: object) -> tuple[int, int]:
    """One producer process: every key in an order of its own, in batches, all started
    at once; (jobs enqueued, duplicates)."""
    backend = open_backend(BrokerSettings(url=broker))
    keys = open_unique_keys(store) if store is not None else None
    producer = Producer(backend, QueueSet([QueueConfig(QUEUE)]), unique_keys=keys)
    orders = list(range(KEYS))
    random.Random(seed).shuffle(orders)
    made = refused = 0
    go.wait()  # type: ignore[attr-defined]
    try:
        for i in range(0, KEYS, BATCH):
            batch = [Charge(order=n) for n in orders[i : i + BATCH]]
            try:
                made += len(producer.enqueue_many(batch))
            except DuplicateJobError as exc:
                made += len(exc.confirmed)
                refused += len(exc.duplicates)
    finally:
        backend.close()
        if keys is not None:
            keys.close()
    return made, refused


def race(broker: str, store: str | None) -> list[tuple[int, int]]:
    # The file and the store made first, as the first process to use them would: the
    # race under test is the keys', not the making of a new file's tables.
    if store is not None:
        keys = open_unique_keys(store)
        keys.held(0)
        keys.close()
    if broker.startswith("sqlite"):
        SqliteBackend(broker).close()
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Manager().Barrier(PRODUCERS)
    with ctx.Pool(PRODUCERS) as pool:
        results = [pool.apply_async(produce, (broker, store, seed, go)) for seed in range(8)]
        return [r.get(timeout=300) for r in results]


@pytest.fixture
def folder() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="queuey-unique-race-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.processes
def test_eight_producers_make_one_job_a_key_on_the_file(folder: str) -> None:
    url = f"sqlite:///{folder}/queuey.db"
    outcomes = race(url, None)
    assert sum(made for made, _ in outcomes) == KEYS, outcomes
    assert sum(refused for _, refused in outcomes) == KEYS * (PRODUCERS - 1)
    backend = SqliteBackend(url)
    try:
        assert backend.counts([QUEUE])[QUEUE][0].ready == KEYS
    finally:
        backend.close()


@pytest.mark.integration
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_eight_producers_make_one_job_a_key_on_rabbitmq_with_a_store(
    folder: str, store: str
) -> None:
    url = (
        f"sqlite:///{folder}/store.db"
        if store == "sqlite"
        else f"{PG_URL}?schema=queuey_test_{uuid.uuid4().hex[:12]}"
    )
    try:
        with clean_queues(QUEUE):
            outcomes = race(AMQP_URL, url)
            ids = take_job_ids(QUEUE)
    finally:
        if store == "postgres":
            drop_schema(url)
    assert sum(made for made, _ in outcomes) == KEYS, outcomes
    assert len(ids) == len(set(ids)) == KEYS, "on the broker: one message a key"
