"""The job store in a SQLite file (``sqlite:///path``): the embedded backend's own file
by default, or a file of its own.

Owns: the connection (WAL, a busy timeout), its lock, and when to expire. The file is
made a queuey file first (:class:`~queuey_core.backends.sqlite.database.Database` creates
or checks the backend's schema), so the backend and the store can share it in any order.
Every ``sqlite3`` error becomes a one-line :class:`~queuey_core.errors.JobStoreError`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime

from queuey_core.backends.sqlite.database import Database, explain
from queuey_core.backends.sqlite.options import parse_url
from queuey_core.errors import BackendError, ConfigError, JobStoreError
from queuey_core.results import sql
from queuey_core.results.records import JobEvent, JobRecord, JobState
from queuey_core.results.store import DEFAULT_RETENTION

_DIALECT = sql.Dialect()


class SqliteJobStore:
    """A :class:`~queuey_core.results.JobStore` in one SQLite file."""

    def __init__(
        self, path: str, *, retention: float = DEFAULT_RETENTION, busy_timeout: float = 5.0
    ) -> None:
        self.path = path
        self._busy_timeout = busy_timeout
        self._retention_ms = int(retention * 1000)
        self._lock = threading.Lock()
        self._written = 0
        self._closed = False
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout, check_same_thread=False, isolation_level=None
            )
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._transaction() as execute:
                # No AUTOINCREMENT (stores made before keep theirs): a new row's id is
                # one more than the largest, which orders a job's attempts all the same
                # without a write to sqlite_sequence per attempt.
                for statement in sql.ddl(_DIALECT, serial="INTEGER PRIMARY KEY"):
                    execute(statement, ())
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.Error) -> JobStoreError:
        """``exc`` in one line naming the file and what to do, as the embedded
        backend says it (a lock held too long, a full disk...)."""
        return JobStoreError(
            f"job store {self.path}: {explain(exc, self._busy_timeout, self.path)}"
        )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sql.Execute]:
        with self._lock:
            if self._closed:
                raise JobStoreError(f"job store {self.path}: closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn.execute
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sql.Execute]:
        with self._lock:
            if self._closed:
                raise JobStoreError(f"job store {self.path}: closed")
            yield self._conn.execute

    def write(self, events: Sequence[JobEvent]) -> None:
        """Apply a batch in one transaction; expire old records every so often."""
        if not events:
            return
        try:
            statements = sql.planned(_DIALECT, events)
            with self._transaction() as execute:
                sql.run(execute, self._conn.executemany, statements)
                if (
                    self._written == 0
                    or self._written // sql.EXPIRE_EVERY
                    != (self._written + len(events)) // sql.EXPIRE_EVERY
                ):
                    sql.expire(execute, _DIALECT, _now_ms() - self._retention_ms)
            self._written += len(events)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def get(self, job_id: uuid.UUID | str) -> JobRecord | None:
        """The record of ``job_id``, or None."""
        try:
            with self._reading() as execute:
                return sql.get(execute, _DIALECT, str(job_id))
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def search(
        self,
        *,
        state: JobState | None = None,
        job_type: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """Records matching every filter, most recently updated first."""
        try:
            with self._reading() as execute:
                return sql.search(
                    execute,
                    _DIALECT,
                    state=state,
                    job_type=job_type,
                    queue=queue,
                    since=since,
                    until=until,
                    limit=limit,
                    offset=offset,
                )
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def expire_now(self) -> None:
        """Delete what is past the retention now (expiry otherwise runs with writes)."""
        try:
            with self._transaction() as execute:
                sql.expire(execute, _DIALECT, _now_ms() - self._retention_ms)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def open_store(url: str, *, retention: float = DEFAULT_RETENTION) -> SqliteJobStore:
    """The store in the file ``url`` names (see :func:`~queuey_core.results.open_job_store`)."""
    try:
        options = parse_url(url)
        Database(options).close()  # create or check the queuey schema
    except (ConfigError, BackendError) as exc:
        raise JobStoreError(f"job store: {exc}") from None
    return SqliteJobStore(options.path, retention=retention, busy_timeout=options.busy_timeout)
