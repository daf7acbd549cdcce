"""The embedded backend's checkpoints run on a thread of their own: no commit of the
backend's connection ever copies the WAL back (and waits for its fsyncs), every
EVERY_COMMITS of them wake the thread, a failed checkpoint is one log line, and the
thread ends with the backend."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import checkpoints
from queuey_core.backends.sqlite import parse_url
from tests.backends.sqlite.files import declared
from tests.backends.sqlite.files import job_envelope
from tests.backends.sqlite.files import rows_in_file

Q = QueueConfig("ckpt", prefetch=8)
THREAD = "queuey-sqlite-checkpoint"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db"


@pytest.fixture
def backend(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqliteBackend]:
    monkeypatch.setattr(checkpoints, "EVERY_COMMITS", 5)
    yield from declared(url, Q)


def publish(backend: SqliteBackend, n: int) -> None:
    """``n`` jobs, a commit each."""
    for i in range(n):
        backend.publish(job_envelope(Q.name, i=i, pad="x" * 2000))


def until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def test_the_connection_never_checkpoints_in_a_commit(backend: SqliteBackend) -> None:
    with backend._db.read() as conn:
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0


def test_few_commits_start_no_thread(backend: SqliteBackend) -> None:
    publish(backend, 3)  # declare's commit and these: fewer than 5
    assert not checkpoint_threads()
    assert backend._db.checkpoints.runs == 0


def test_every_n_commits_a_thread_copies_the_wal_back(backend: SqliteBackend, url: str) -> None:
    publish(backend, 4)  # with declare's commit: the fifth wakes the thread
    ckpt = backend._db.checkpoints
    until(lambda: ckpt.runs >= 1, "no checkpoint ran after 5 commits")
    assert ckpt.alive
    assert ckpt.last is not None
    busy, frames, copied = ckpt.last
    assert busy == 0
    assert frames > 0
    assert copied == frames  # nobody read or wrote meanwhile: the whole WAL went back
    publish(backend, 5)
    until(lambda: ckpt.runs >= 2, "the second checkpoint never ran")
    assert len(checkpoint_threads()) == 1  # the same thread, woken again


def test_a_commit_of_many_rows_wakes_the_thread_sooner(
    backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of rows (``enqueue --file`` commits a thousand at a time) counts by its
    rows, so that the WAL does not grow for EVERY_COMMITS such commits (two changes a
    job: its row, and its queue's count)."""
    monkeypatch.setattr(checkpoints, "EVERY_COMMITS", 1000)
    monkeypatch.setattr(checkpoints, "EVERY_ROWS", 100)
    ckpt = backend._db.checkpoints
    backend.publish_many([(job_envelope(Q.name, i=i), None) for i in range(30)])
    assert ckpt.runs == 0
    assert not checkpoint_threads()
    backend.publish_many([(job_envelope(Q.name, i=i), None) for i in range(30)])
    until(lambda: ckpt.runs >= 1, "60 rows in two commits woke no checkpoint")


def test_commits_do_not_wait_for_a_checkpoint(backend: SqliteBackend) -> None:
    """A checkpoint that takes long (slow fsyncs) does not hold up the commits that
    follow it: they go into the WAL meanwhile."""
    ckpt = backend._db.checkpoints
    entered = threading.Event()
    release = threading.Event()
    real_connect = ckpt._connect

    class SlowCheckpoint:
        def __init__(self, inner: sqlite3.Connection) -> None:
            self.inner = inner

        def execute(self, sql: str) -> sqlite3.Cursor:
            entered.set()
            assert release.wait(10)
            return self.inner.execute(sql)

        def close(self) -> None:
            self.inner.close()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt, "_connect", lambda: SlowCheckpoint(real_connect()))
        publish(backend, 4)
        assert entered.wait(10), "the checkpoint never started"
        started = time.monotonic()
        publish(backend, 20)  # while the checkpoint is held
        assert time.monotonic() - started < 5
        release.set()
        until(lambda: ckpt.runs >= 1, "the held checkpoint never finished")
    with backend._db.read() as conn:
        assert conn.execute("SELECT count(*) FROM queuey_messages").fetchone()[0] == 24


def test_a_failed_checkpoint_is_one_line_and_tried_again(
    backend: SqliteBackend, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = backend._db.checkpoints
    failures = [2]
    real_connect = ckpt._connect

    def connect() -> sqlite3.Connection:
        if failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("disk I/O error\nsecond line")
        return real_connect()

    caplog.set_level(logging.INFO, logger=checkpoints.__name__)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckpt, "_connect", connect)
        publish(backend, 4)
        until(lambda: failures[0] == 1, "the first checkpoint was never tried")
        publish(backend, 5)
        until(lambda: failures[0] == 0, "the second checkpoint was never tried")
        publish(backend, 5)
        until(lambda: ckpt.runs == 1, "the third checkpoint never ran")
    lines = [r.getMessage() for r in caplog.records if r.name == checkpoints.__name__]
    assert len(lines) == 2, lines
    assert "a checkpoint failed (disk I/O error)" in lines[0]
    assert "\n" not in lines[0]
    assert "checkpoints work again" in lines[1]


def test_close_ends_the_thread_and_leaves_no_wal_behind(backend: SqliteBackend, url: str) -> None:
    publish(backend, 4)
    ckpt = backend._db.checkpoints
    until(lambda: ckpt.runs >= 1, "no checkpoint ran")
    publish(backend, 2)  # frames the thread has not copied
    backend.close()
    assert not ckpt.alive
    assert not checkpoint_threads()
    # The last connection to close copied the rest and removed the WAL, as SQLite does.
    assert not Path(parse_url(url).path + "-wal").exists()
    assert rows_in_file(url) == 6


def test_a_commit_counted_after_close_starts_no_thread(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = SqliteBackend(url)
    made.declare([Q])
    made.close()
    monkeypatch.setattr(checkpoints, "EVERY_COMMITS", 1)
    made._db.checkpoints.committed(0)  # a commit that ended as the backend closed
    assert not checkpoint_threads()
