"""The trace context on a queuey file: kept beside the body in the file, given back on
delivery, through retries, dead letters, their requeue, an upgrade of an older file and
a move to another backend; a stored context that is not well-formed is ignored.

Spans are recorded as in test_spans (the SDK's in-memory exporter); time is a
ManualClock.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core import Delivery
from queuey_core import Envelope
from queuey_core import Handler
from queuey_core import JobContext
from queuey_core import ManualClock
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import Worker
from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite.migrate import migrate
from queuey_core.backends.sqlite.schema import SCHEMA_VERSION
from queuey_core.backends.sqlite.schema import UPGRADES
from queuey_core.trace_context import TraceContext
from tests.backends.sqlite.test_migrate import Broker
from tests.support import ALPHA
from tests.support import Got
from tests.support import Greet
from tests.support import named_envelope
from tests.tracing.test_spans import Traced
from tests.tracing.test_spans import _parent_id
from tests.tracing.test_spans import fatal_once
from tests.tracing.test_spans import letter_and_requeue_stay_in_the_trace
from tests.tracing.test_spans import run_until
from tests.tracing.test_spans import traced  # noqa: F401 (a fixture)

TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=abc")
Q = QueueConfig("jobs", prefetch=1)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return f"{tmp_path}/q.db"


@pytest.fixture
def file(path: str, clock: ManualClock, queues: QueueSet) -> Iterator[SqliteBackend]:
    backend = SqliteBackend(f"sqlite:///{path}", clock=clock)
    backend.declare([*queues.values(), Q])
    yield backend
    backend.close()


def delivered(backend: SqliteBackend) -> Delivery:
    """The next delivery of ``Q`` (the backend's thread claims it in real time)."""
    got = Got()
    sub = backend.consume(Q, got)
    deadline = time.monotonic() + 10
    while not got.items:
        assert time.monotonic() < deadline, "never delivered"
        time.sleep(0.01)
    sub.cancel()
    return got.items[0]


def test_one_trace_runs_from_the_enqueue_through_a_retry_to_success_on_a_file(
    traced: Traced,  # noqa: F811
    file: SqliteBackend,
    queues: QueueSet,
    clock: ManualClock,
) -> None:
    def greet(job: Greet, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retryable("flaky failure")

    producer = Producer(file, queues, clock=clock, tracer_provider=traced.provider)
    worker = Worker(
        file, queues, [Handler(Greet, greet)], clock=clock, tracer_provider=traced.provider
    )
    with traced.provider.get_tracer("the app").start_as_current_span("POST /orders"):
        producer.enqueue(Greet(name="ada"))

    run_until(worker, clock, lambda: len(traced.processed()) == 2)

    (request,) = traced.spans("POST /orders")
    (publish,) = traced.spans(f"publish {ALPHA}")
    first, second = traced.processed()
    assert {s.context.trace_id for s in [publish, first, second]} == {request.context.trace_id}, (
        "the enqueue and both attempts on the file are one trace"
    )
    assert _parent_id(first) == _parent_id(second) == publish.context.span_id


def test_a_dead_letter_on_a_file_keeps_its_trace_and_a_requeue_joins_it_again(
    traced: Traced,  # noqa: F811
    file: SqliteBackend,
    queues: QueueSet,
    clock: ManualClock,
) -> None:
    worker = fatal_once(traced, file, queues, clock)

    Producer(file, queues, clock=clock, tracer_provider=traced.provider).enqueue(Greet(name="x"))
    run_until(worker(), clock, lambda: len(file.list_dead_letters(ALPHA)) == 1)

    (letter,) = file.list_dead_letters(ALPHA)
    assert isinstance(letter, DeadLetter)
    letter_and_requeue_stay_in_the_trace(traced, file, letter, worker, clock)


def test_the_context_and_its_tracestate_come_back_as_they_went_in(file: SqliteBackend) -> None:
    file.publish(named_envelope(Q.name, "traced").with_trace(TRACE))
    file.publish(named_envelope(Q.name, "untraced"))
    first = delivered(file)
    assert first.envelope.trace == TRACE
    first.retry(first.envelope.next_attempt(), 0)
    again = delivered(file)
    assert again.envelope.payload == {"name": "untraced"}
    assert again.envelope.trace is None, "no context: none invented"
    again.dead_letter("fatal error: no")
    retried = delivered(file)
    assert (retried.envelope.attempt, retried.envelope.trace) == (2, TRACE)
    retried.dead_letter("fatal error: no")
    letters = {d.envelope.payload["name"]: d for d in file.list_dead_letters(Q.name)}  # type: ignore[union-attr]
    assert letters["traced"].envelope.trace == TRACE  # type: ignore[union-attr]
    assert letters["untraced"].envelope.trace is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        "00-" + "f" * 10_000,
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x00",
    ],
)
def test_a_hostile_stored_traceparent_is_ignored_and_the_job_still_runs(
    file: SqliteBackend, path: str, traceparent: str
) -> None:
    file.publish(named_envelope(Q.name, "job").with_trace(TRACE))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE queuey_messages SET traceparent = ?", (traceparent,))
    delivery = delivered(file)
    assert delivery.envelope.payload == {"name": "job"}
    assert delivery.envelope.trace is None, "a context that is not well-formed is dropped"
    delivery.dead_letter("fatal error: no")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE queuey_dead SET traceparent = ?", (traceparent,))
    (letter,) = file.list_dead_letters(Q.name)
    assert isinstance(letter, DeadLetter)
    assert letter.envelope.trace is None


def test_a_bad_stored_tracestate_is_dropped_alone(file: SqliteBackend, path: str) -> None:
    file.publish(named_envelope(Q.name, "job").with_trace(TRACE))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE queuey_messages SET tracestate = ?", ("=,=" * 500,))
    assert delivered(file).envelope.trace == TraceContext(TRACE.traceparent)


def _tables_of(statements: tuple[str, ...]) -> list[str]:
    """The tables that ``statements`` create."""
    found = (re.match(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)", s) for s in statements)
    return [m.group(1) for m in found if m]


def _make_version_1(path: str) -> None:
    """Turn a file into what queuey wrote before the trace columns (schema version 1),
    and before the counts of version 3 and every table of version 4."""
    with sqlite3.connect(path) as conn:
        triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        for (trigger,) in triggers.fetchall():
            conn.execute(f"DROP TRIGGER {trigger}")
        later = ("queuey_counts", "queuey_dead_counts", *_tables_of(UPGRADES[4]))
        for table in later:
            conn.execute(f"DROP TABLE {table}")
        for table in ("queuey_messages", "queuey_dead"):
            for column in ("traceparent", "tracestate"):
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("UPDATE queuey_schema SET version = 1")


def test_a_version_1_file_is_upgraded_in_place_and_keeps_its_jobs(
    path: str, clock: ManualClock
) -> None:
    old = SqliteBackend(f"sqlite:///{path}", clock=clock)
    old.declare([Q])
    old.publish(named_envelope(Q.name, "waiting"))
    old.publish(named_envelope(Q.name, "later"), delay=60)
    delivered(old).dead_letter("fatal error: no")  # "waiting" is now a dead letter
    old.publish(named_envelope(Q.name, "waiting too"))
    old.close()
    _make_version_1(path)

    backend = SqliteBackend(f"sqlite:///{path}", clock=clock)
    try:
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT version FROM queuey_schema").fetchall() == [
                (SCHEMA_VERSION,)
            ]
        (letter,) = backend.list_dead_letters(Q.name)
        assert isinstance(letter, DeadLetter)
        assert (letter.envelope.payload, letter.envelope.trace) == ({"name": "waiting"}, None)
        job = delivered(backend)
        assert (job.envelope.payload, job.envelope.trace) == ({"name": "waiting too"}, None)
        job.ack()
        clock.advance(61)
        assert delivered(backend).envelope.payload == {"name": "later"}, "kept its delay"
        backend.publish(named_envelope(Q.name, "new").with_trace(TRACE))
        assert backend.requeue_dead_letters(Q.name) == 1
    finally:
        backend.close()
    # Opened again: already the current version, nothing to do.
    again = SqliteBackend(f"sqlite:///{path}", clock=clock)
    again.close()


def test_a_move_to_another_backend_carries_the_context_on(
    file: SqliteBackend, clock: ManualClock
) -> None:
    file.publish(named_envelope(Q.name, "traced").with_trace(TRACE))
    doomed: Envelope = named_envelope(Q.name, "doomed").with_trace(TRACE)
    file.publish(doomed, delay=1)
    clock.advance(2)
    file.publish(named_envelope(Q.name, "untraced"))
    # Dead-letter "traced" (the first due), as a worker would.
    delivered(file).dead_letter("fatal error: no")

    target = Broker(clock=ManualClock())
    moved = migrate(file, target, [Q])
    assert (moved.jobs, moved.dead_letters) == (2, 1)
    (letter,) = target.dead_letters(Q.name)
    assert letter.envelope.trace == TRACE, "a dead letter moves with its context"
    got = Got()
    target.consume(dataclasses.replace(Q, prefetch=10), got)
    run: dict[str, TraceContext | None] = {
        str(d.envelope.payload["name"]): d.envelope.trace for d in got.items
    }
    assert run == {"doomed": TRACE, "untraced": None}
