"""Acks on the embedded backend are committed in groups: every ack waiting when a commit
begins shares it, each keeps its own outcome, and none returns before its commit."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuey_core import BackendError
from queuey_core import QueueConfig
from queuey_core.backends.base import Delivery
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import parse_url
from queuey_core.backends.sqlite.database import SqliteError
from tests.backends.sqlite.files import declared
from tests.backends.sqlite.files import job_envelope
from tests.backends.sqlite.files import rows_in_file
from tests.support import Got

Q = QueueConfig("acks", prefetch=8)
THREADS = 8


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db"


@pytest.fixture
def backend(url: str) -> Iterator[SqliteBackend]:
    yield from declared(url, Q)


def deliveries(backend: SqliteBackend, n: int) -> list[Delivery]:
    for i in range(n):
        backend.publish(job_envelope(Q.name, i=i))
    got = Got()
    backend.consume(Q, got)
    deadline = time.monotonic() + 10
    while len(got) < n:
        assert time.monotonic() < deadline, "the deliveries never came"
        time.sleep(0.005)
    backend._pump.stop()  # no claims or renewals: every commit from here on is an ack's
    return list(got.items)


class HeldCommit:
    """The backend's connection, whose first COMMIT waits until ``waiting`` more acks
    queued behind it (so that they share the next commit), counting COMMITs; with
    ``fail``, every later COMMIT fails as a full disk would."""

    def __init__(self, backend: SqliteBackend, waiting: int, *, fail: bool = False) -> None:
        self.inner = backend._db._conn
        self.acks = backend._writer._acks
        self.waiting = waiting
        self.fail = fail
        self.commits = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            self.commits += 1
            if self.commits == 1:
                deadline = time.monotonic() + 10
                while len(self.acks._waiting) < self.waiting:
                    assert time.monotonic() < deadline, "the other acks never queued"
                    time.sleep(0.001)
            elif self.fail:
                self.inner.execute("ROLLBACK")
                raise sqlite3.OperationalError("database or disk is full")
        return self.inner.execute(sql, *args)


def ack_all(items: list[Delivery], url: str) -> dict[int, BaseException | None]:
    """Ack ``items`` from a thread each, all at once; each thread checks, as its ack
    returns, that another connection no longer sees its row."""
    start = threading.Barrier(len(items))
    outcome: dict[int, BaseException | None] = {}
    seen_after: list[int] = []

    def one(i: int, item: Delivery) -> None:
        start.wait()
        try:
            item.ack()
        except BaseException as exc:
            outcome[i] = exc
            return
        outcome[i] = None
        conn = sqlite3.connect(parse_url(url).path)
        try:
            row_id = item.row_id  # type: ignore[attr-defined]
            found = conn.execute("SELECT 1 FROM queuey_messages WHERE id = ?", (row_id,))
            if found.fetchone() is not None:
                seen_after.append(i)
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i, d)) for i, d in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen_after == [], "an ack returned before the commit that carries it"
    return outcome


def test_acks_waiting_share_one_commit_and_each_returns_once_committed(
    backend: SqliteBackend, url: str
) -> None:
    items = deliveries(backend, THREADS)
    # The first ack commits alone, held until the 7 others wait: they share the second.
    held = HeldCommit(backend, THREADS - 1)
    backend._db._conn = held  # type: ignore[assignment]
    outcome = ack_all(items, url)
    assert outcome == dict.fromkeys(range(THREADS))
    assert held.commits == 2
    assert rows_in_file(url) == 0


def test_a_lost_lease_fails_only_its_own_ack_in_a_group(backend: SqliteBackend, url: str) -> None:
    items = deliveries(backend, THREADS)
    lost = items[3]
    conn = sqlite3.connect(parse_url(url).path)
    conn.execute(
        "UPDATE queuey_messages SET lease_owner = 'another worker' WHERE id = ?",
        (lost.row_id,),  # type: ignore[attr-defined]
    )
    conn.commit()
    conn.close()
    backend._db._conn = HeldCommit(backend, THREADS - 1)  # type: ignore[assignment]
    outcome = ack_all(items, url)
    failed = outcome.pop(3)
    assert isinstance(failed, BackendError)
    assert "lease was lost" in str(failed)
    assert set(outcome.values()) == {None}
    assert rows_in_file(url) == 1, "the other worker's row is its own"


def test_a_failed_commit_fails_every_ack_it_carried_and_keeps_their_rows(
    backend: SqliteBackend, url: str
) -> None:
    items = deliveries(backend, THREADS)
    backend._db._conn = HeldCommit(backend, THREADS - 1, fail=True)  # type: ignore[assignment]
    outcome = ack_all(items, url)
    carried = [i for i, exc in outcome.items() if exc is not None]
    assert len(carried) == THREADS - 1, "the first commit went through, the second failed"
    for i in carried:
        exc = outcome[i]
        assert isinstance(exc, SqliteError)
        assert "disk is full" in str(exc)
        assert not exc.maybe_committed
    assert rows_in_file(url) == THREADS - 1
