"""A write waits for another process's lock by trying again every LOCK_RETRY (a tenth
of a millisecond at first), not on SQLite's busy handler (1, 2, 5 ms sleeps), until
busy_timeout; any other error is raised at once; reads keep SQLite's own waiting."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuey_core import BackendError
from queuey_core import NotEnqueuedError
from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import database
from queuey_core.backends.sqlite import parse_url
from tests.backends.sqlite.files import WrappedConnection
from tests.backends.sqlite.files import declared
from tests.backends.sqlite.files import job_envelope
from tests.backends.sqlite.files import rows_in_file
from tests.support import Got
from tests.support import wait_for

Q = QueueConfig("locks", prefetch=8)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db?busy_timeout=0.05"


@pytest.fixture
def backend(url: str) -> Iterator[SqliteBackend]:
    yield from declared(url, Q)


@pytest.fixture
def holder(url: str) -> Iterator[sqlite3.Connection]:
    """Another process's connection, holding the file's write lock."""
    conn = sqlite3.connect(parse_url(url).path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


class FakeTime:
    """The database module's clock and sleep: each sleep advances the clock and calls
    ``on_sleep`` with the number of sleeps so far."""

    def __init__(self, on_sleep: Callable[[int], None] = lambda n: None) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))


def test_a_write_tries_again_at_a_fine_grain_until_the_lock_is_free(
    backend: SqliteBackend, holder: sqlite3.Connection, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def release(sleeps: int) -> None:
        if sleeps == 7:
            holder.execute("ROLLBACK")

    fake = FakeTime(release)
    monkeypatch.setattr(database, "time", fake)
    backend.publish(job_envelope(Q.name))
    assert fake.sleeps == [0.0001, 0.0001, 0.0002, 0.0005, 0.001, 0.001, 0.001]
    assert rows_in_file(url) == 1


def test_a_write_gives_up_after_busy_timeout_with_one_line(
    backend: SqliteBackend, holder: sqlite3.Connection, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTime()
    monkeypatch.setattr(database, "time", fake)
    with pytest.raises(NotEnqueuedError, match=r"locked by another process for more than 0\.05s"):
        backend.publish(job_envelope(Q.name))
    assert 0.05 <= sum(fake.sleeps) < 0.05 + 0.0011
    assert max(fake.sleeps) == 0.001
    holder.execute("ROLLBACK")
    assert rows_in_file(url) == 0


def test_a_write_waits_for_a_real_release(backend: SqliteBackend, url: str) -> None:
    """Without a fake clock: another connection holds the lock for a while, the write
    (busy_timeout 5 s) goes in once it lets go."""
    patient = SqliteBackend(url.replace("busy_timeout=0.05", "busy_timeout=5"))
    other = sqlite3.connect(parse_url(url).path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    letting_go = threading.Timer(0.2, lambda: other.execute("ROLLBACK"))
    letting_go.start()
    try:
        patient.publish(job_envelope(Q.name))
    finally:
        letting_go.join()
        other.close()
        patient.close()
    assert rows_in_file(url) == 1


def test_another_error_is_raised_at_once(
    backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTime()
    monkeypatch.setattr(database, "time", fake)
    monkeypatch.setattr(backend._db, "_conn", FailingBegin(backend._db._conn))
    with pytest.raises(NotEnqueuedError, match="an I/O error from the disk"):
        backend.publish(job_envelope(Q.name))
    assert fake.sleeps == []


def test_reads_wait_with_sqlites_handler_and_writes_by_themselves(
    backend: SqliteBackend,
) -> None:
    with backend._db.read() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 50
    with backend._db.write() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0


class FailingBegin(WrappedConnection):
    """A connection whose BEGIN IMMEDIATE fails with a disk error (not a busy one)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "BEGIN IMMEDIATE":
            exc = sqlite3.OperationalError("disk I/O error")
            exc.sqlite_errorcode = sqlite3.SQLITE_IOERR
            raise exc
        return super().execute(sql, *args)


def test_a_settle_refused_by_a_lock_gives_the_row_back_to_this_same_process(
    url: str,
) -> None:
    """The row of a settle the lock refused is released by the next renewal, and this
    process claims it again: its own commit does not change the file's data_version
    for it, so the release wakes its pump (it used to sit unclaimed until another
    process wrote to the file)."""
    backend = SqliteBackend(f"{url}&lease=1")
    other = sqlite3.connect(parse_url(url).path, isolation_level=None, check_same_thread=False)
    try:
        backend.declare([Q])
        backend.publish(job_envelope(Q.name))
        got = Got()
        backend.consume(Q, got)
        wait_for(lambda: len(got) == 1, timeout=5)
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(BackendError):
            got.items[0].ack()
        other.execute("ROLLBACK")
        wait_for(lambda: len(got) == 2, timeout=5)
        assert got.items[1].redelivered, "the same row, delivered again"
    finally:
        other.close()
        backend.close()
