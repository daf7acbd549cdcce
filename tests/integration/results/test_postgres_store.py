"""A worker recording on PostgreSQL (psycopg 3), in a schema of its own that is dropped
after, whose connection goes away mid-run: its batch is counted, the store reconnects,
no job is held back. (Every outcome on PostgreSQL: tests/results, its ``postgres``
store kind.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import open_job_store
from queuey_core.results.postgres_store import PostgresJobStore
from tests.harness import Memory
from tests.results.conftest import pg_store_url
from tests.results.support import recording_worker
from tests.results.support import settled_record
from tests.results.test_recording import handler
from tests.support import Greet
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def pg() -> Iterator[PostgresJobStore]:
    store = open_job_store(pg_store_url())
    assert isinstance(store, PostgresJobStore)
    yield store
    store.drop()
    store.close()


def test_a_connection_lost_mid_run_is_counted_and_recovered(
    mem: Memory, pg: PostgresJobStore
) -> None:
    backend, producer, queues, clock = mem
    recorder = JobRecorder(pg)
    running = start(recording_worker(backend, queues, clock, handler, recorder), clock)
    first = producer.enqueue(Greet(name="first"))
    settled_record(pg, first, clock, JobState.SUCCEEDED)
    # End the writer's own session from another connection: the next batch fails.
    with psycopg.connect(pg_store_url().split("?")[0], autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name = %s",
            (pg.application_name,),
        )
    alpha = queues[Greet.QUEUE].name
    producer.enqueue(Greet(name="during"))
    wait_for(lambda: len(backend.acked(alpha)) == 2, clock)
    assert recorder.flush(10)
    assert recorder.unrecorded == 2, "the batch on the lost session was counted"
    last = producer.enqueue(Greet(name="after"))
    settled_record(pg, last, clock, JobState.SUCCEEDED)
    running.stop()
    assert len(backend.acked(alpha)) == 3, "every job settled, recorded or not"
    assert recorder.written == 4
    assert pg.get(uuid.uuid4()) is None
