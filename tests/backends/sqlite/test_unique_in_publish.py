"""On the embedded file, a unique job's claims, its publish and the keeping of its keys
are one transaction: whatever interrupts or refuses the publish takes the claims with
it, so no key is ever held by a job that is not in the file (before, a Ctrl-C during
the publish kept the key for good: every later enqueue was "a duplicate" of a job that
never existed), and a commit that may have happened is the enqueue's unknown outcome
for the job and its keys alike."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import DuplicateJobError
from queuey_core import EnqueueUnknownError
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.flow.unique import Unique
from queuey_core.jobs import Job
from tests.backends.sqlite.files import WrappedConnection
from tests.backends.sqlite.files import rows_in_file
from tests.backends.sqlite.files import value_in_file
from tests.support import ALPHA
from tests.support import seed_queues


class Invoice(Job):
    NAME: ClassVar[str] = "t.invoice"
    QUEUE: ClassVar[str] = ALPHA
    UNIQUE: ClassVar[Unique] = Unique(key=("invoice_id",))
    invoice_id: int


class Misbehaving(WrappedConnection):
    """The backend's connection, one statement of which misbehaves once armed."""

    def __init__(self, inner: sqlite3.Connection, statement: str, error: BaseException) -> None:
        super().__init__(inner)
        self.statement = statement
        self.error = error
        self.armed = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._inner.execute(sql, *args)
        if sql == self.statement and self.armed:
            self.armed = False
            raise self.error
        return cursor

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith(self.statement) and self.armed:
            self.armed = False
            raise self.error
        return self._inner.executemany(sql, *args)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db"


@pytest.fixture
def backend(url: str) -> Iterator[SqliteBackend]:
    made = SqliteBackend(url)
    yield made
    made.close()


@pytest.fixture
def producer(backend: SqliteBackend) -> Producer:
    return Producer(backend, seed_queues())


def keys_in_file(url: str) -> int:
    return value_in_file(url, "SELECT COUNT(*) FROM queuey_unique_keys")


def misbehave(
    monkeypatch: pytest.MonkeyPatch, backend: SqliteBackend, statement: str, error: BaseException
) -> Misbehaving:
    wrapped = Misbehaving(backend._db._conn, statement, error)
    monkeypatch.setattr(backend._db, "_conn", wrapped)
    return wrapped


def enqueue_invoices(producer: Producer, batch: bool, ids: tuple[int, ...] = (1, 2)) -> None:
    """Enqueue invoice 1 alone, or the invoices of `ids` as one batch."""
    if batch:
        producer.enqueue_many([Invoice(invoice_id=i) for i in ids])
    else:
        producer.enqueue(Invoice(invoice_id=ids[0]))


@pytest.mark.parametrize("batch", [False, True], ids=["enqueue", "enqueue_many"])
def test_a_publish_interrupted_before_its_commit_leaves_neither_job_nor_key(
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    backend: SqliteBackend,
    producer: Producer,
    batch: bool,
) -> None:
    misbehave(monkeypatch, backend, "INSERT INTO queuey_messages", KeyboardInterrupt())

    with pytest.raises(KeyboardInterrupt):
        enqueue_invoices(producer, batch)

    assert (rows_in_file(url), keys_in_file(url)) == (0, 0)
    # Not "a duplicate of" a job that is not there: the key is free at once.
    producer.enqueue(Invoice(invoice_id=1))
    assert (rows_in_file(url), keys_in_file(url)) == (1, 1)


@pytest.mark.parametrize("batch", [False, True], ids=["enqueue", "enqueue_many"])
def test_a_publish_the_file_refuses_gives_its_claims_back_with_it(
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    backend: SqliteBackend,
    producer: Producer,
    batch: bool,
) -> None:
    full = sqlite3.OperationalError("database or disk is full")
    misbehave(monkeypatch, backend, "INSERT INTO queuey_messages", full)

    with pytest.raises(NotEnqueuedError, match="disk is full"):
        enqueue_invoices(producer, batch)

    assert (rows_in_file(url), keys_in_file(url)) == (0, 0)
    producer.enqueue_many([Invoice(invoice_id=1), Invoice(invoice_id=2)])
    assert (rows_in_file(url), keys_in_file(url)) == (2, 2)


@pytest.mark.parametrize("batch", [False, True], ids=["enqueue", "enqueue_many"])
def test_a_commit_that_may_have_happened_is_unknown_for_the_job_and_its_key_alike(
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    backend: SqliteBackend,
    producer: Producer,
    batch: bool,
) -> None:
    # A signal while COMMIT runs: it ran here, and the job and its key are both in.
    misbehave(monkeypatch, backend, "COMMIT", KeyboardInterrupt())

    with pytest.raises(EnqueueUnknownError) as caught:
        enqueue_invoices(producer, batch, ids=(1,))

    [unknown] = caught.value.unknown
    assert (rows_in_file(url), keys_in_file(url)) == (1, 1)
    with pytest.raises(DuplicateJobError) as again:
        producer.enqueue(Invoice(invoice_id=1))
    assert again.value.existing == unknown


def test_a_duplicate_in_a_batch_is_left_out_and_the_others_hold_their_keys(
    url: str, producer: Producer
) -> None:
    first = producer.enqueue(Invoice(invoice_id=1))

    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue_many([Invoice(invoice_id=1), Invoice(invoice_id=2)])

    assert list(caught.value.duplicates.values()) == [first]
    assert len(caught.value.confirmed) == 1
    assert (rows_in_file(url), keys_in_file(url)) == (2, 2)


def test_a_write_inside_a_write_is_part_of_it_and_rolls_back_with_it(
    url: str, backend: SqliteBackend
) -> None:
    db = backend._db

    def two_rows_then_fail() -> None:
        with db.write() as outer:
            outer.execute("INSERT INTO queuey_paused (queue, paused_at) VALUES ('a', 1)")
            with db.write() as inner:
                inner.execute("INSERT INTO queuey_paused (queue, paused_at) VALUES ('b', 1)")
            with db.read() as seen:  # a read inside sees the write's own rows
                assert seen.execute("SELECT COUNT(*) FROM queuey_paused").fetchone()[0] == 2
            raise RuntimeError("the outer block fails")

    with pytest.raises(RuntimeError):
        two_rows_then_fail()

    assert value_in_file(url, "SELECT COUNT(*) FROM queuey_paused") == 0
    with db.write():
        with db.write() as inner:
            inner.execute("INSERT INTO queuey_paused (queue, paused_at) VALUES ('b', 1)")
        assert value_in_file(url, "SELECT COUNT(*) FROM queuey_paused") == 0, "not yet"
    assert value_in_file(url, "SELECT COUNT(*) FROM queuey_paused") == 1
