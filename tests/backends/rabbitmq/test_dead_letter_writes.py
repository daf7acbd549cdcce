"""The worker's dead letters into the job store (issue 28): a committed row, or, when
the store fails or hangs past the bound, False (the caller publishes to ``<queue>.dlq``),
counted, logged once per episode; and the same message written and published is one
row once imported."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path

import pytest

from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.capabilities import UndecodableDeadLetter
from queuey_core.backends.rabbitmq.dead_letter_rows import letter_of
from queuey_core.backends.rabbitmq.dead_letter_rows import row_of
from queuey_core.backends.rabbitmq.dead_letter_writes import DeadLetterWriter
from queuey_core.backends.rabbitmq.dead_letters import dead_letter_pub
from queuey_core.backends.rabbitmq.dead_letters import raw_dead_letter_pub
from queuey_core.errors import JobStoreError
from queuey_core.results.dead_letter_sql import Row
from queuey_core.results.dead_letter_table import DeadLetterTable
from queuey_core.results.dead_letter_table import open_dead_letter_table
from queuey_core.trace_context import TraceContext
from tests.support import named_envelope


@pytest.fixture
def table(tmp_path: Path) -> Iterator[DeadLetterTable]:
    t = open_dead_letter_table(f"sqlite:///{tmp_path / 'store.db'}")
    yield t
    t.close()


def test_a_dead_letter_is_a_committed_row_and_reads_back_as_it_was(
    table: DeadLetterTable,
) -> None:
    trace = TraceContext.from_headers(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    )
    envelope = named_envelope("q", "j1").with_trace(trace)
    pub = dead_letter_pub(envelope, "fatal error: boom")
    writer = DeadLetterWriter(table)
    assert writer.write("q", pub.props, pub.body)
    writer.close()
    (stored,) = list(table.stream("q"))
    dead = letter_of(stored)
    assert isinstance(dead, DeadLetter)
    assert dead.envelope == envelope
    assert dead.envelope.trace == trace, "requeued, it stays in its trace"
    assert dead.reason == "fatal error: boom"
    assert pub.props is not None
    assert dead.dead_at == pub.props.headers["x-queuey-dead-at"]
    assert writer.fallbacks == 0


def test_a_body_that_is_no_envelope_is_kept_as_it_was(table: DeadLetterTable) -> None:
    pub = raw_dead_letter_pub("q", b"\x00not json", "not a queuey envelope", message_id=None)
    table.insert([row_of("q", pub.props, pub.body)])
    (stored,) = list(table.stream("q"))
    dead = letter_of(stored)
    assert isinstance(dead, UndecodableDeadLetter)
    assert dead.handle == f"#{stored.seq}"
    assert stored.row.body == b"\x00not json"
    assert stored.row.job_type is None, "never requeued"


def test_the_same_message_written_and_imported_is_one_row(table: DeadLetterTable) -> None:
    pub = dead_letter_pub(named_envelope("q", "j1"), "boom")
    table.insert([row_of("q", pub.props, pub.body)])
    table.insert([row_of("q", pub.props, pub.body)])  # the fallback's copy, imported
    assert table.count("q") == 1


def test_a_failing_store_falls_back_and_is_logged_once_per_episode(
    table: DeadLetterTable, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def down(rows: Sequence[Row]) -> None:
        raise JobStoreError("job store x: unable to open database file")

    insert = table.insert
    monkeypatch.setattr(table, "insert", down)
    writer = DeadLetterWriter(table)
    pubs = [dead_letter_pub(named_envelope("q", f"j{i}"), "boom") for i in range(4)]
    with caplog.at_level(logging.WARNING):
        assert not writer.write("q", pubs[0].props, pubs[0].body)
        assert not writer.write("q", pubs[1].props, pubs[1].body)
        monkeypatch.setattr(table, "insert", insert)
        assert writer.write("q", pubs[2].props, pubs[2].body)
    writer.close()
    assert writer.fallbacks == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert "cannot take dead letters" in warnings[0]
    assert "again, after 2" in warnings[1]


def test_a_hung_store_holds_a_job_thread_no_longer_than_the_bound(
    table: DeadLetterTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    insert = table.insert

    def hung(rows: Sequence[Row]) -> None:
        release.wait()
        insert(rows)

    monkeypatch.setattr(table, "insert", hung)
    writer = DeadLetterWriter(table, bound=0.01)
    first = dead_letter_pub(named_envelope("q", "j1"), "boom")
    second = dead_letter_pub(named_envelope("q", "j2"), "boom")
    assert not writer.write("q", first.props, first.body), "past the bound: publish it"
    assert not writer.write("q", second.props, second.body), "not queued behind the hung one"
    assert writer.fallbacks == 2
    release.set()
    writer.close()
