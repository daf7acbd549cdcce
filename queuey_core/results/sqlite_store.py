"""The job store in a SQLite file (``sqlite:///path``): the embedded backend's own file
by default, or a file of its own.

Owns: the connection (WAL, a busy timeout) and its lock; the rest is
:class:`~queuey_core.results.sql_store.SqlJobStore`'s, the same on every database. The file is
made a queuey file first (:class:`~queuey_core.backends.sqlite.database.Database` creates
or checks the backend's schema), so the backend and the store can share it in any order.
Every ``sqlite3`` error becomes a one-line :class:`~queuey_core.errors.JobStoreError`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.explaining import explain
from queuey_core.backends.sqlite.options import parse_url
from queuey_core.errors import BackendError, ConfigError, JobStoreError
from queuey_core.results import sql
from queuey_core.results.records import JobEvent
from queuey_core.results.sql_store import SqlJobStore
from queuey_core.results.store import DEFAULT_RETENTION

T = TypeVar("T")

_DIALECT = sql.Dialect()


class SqliteJobStore(SqlJobStore):
    """A :class:`~queuey_core.results.JobStore` in one SQLite file."""

    def __init__(
        self, path: str, *, retention: float = DEFAULT_RETENTION, busy_timeout: float = 5.0
    ) -> None:
        super().__init__(_DIALECT, retention=retention)
        self.path = path
        self._busy_timeout = busy_timeout
        self._lock = threading.Lock()
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

    @contextlib.contextmanager
    def _writing(self, events: Sequence[JobEvent]) -> Iterator[sql.Execute]:
        """See :meth:`SqlJobStore._writing`: the statements made before the file's write
        lock is taken (a store in the embedded backend's file shares it)."""
        try:
            statements = sql.planned(_DIALECT, events)
            with self._transaction() as execute:
                sql.run(execute, self._conn.executemany, statements)
                yield execute
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _read(self, query: Callable[[sql.Execute], T]) -> T:
        """See :meth:`SqlJobStore._read`."""
        try:
            with self._reading() as execute:
                return query(execute)
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


def open_store(url: str, *, retention: float = DEFAULT_RETENTION) -> SqliteJobStore:
    """The store in the file ``url`` names (see :func:`~queuey_core.results.open_job_store`)."""
    try:
        options = parse_url(url)
        Database(options).close()  # create or check the queuey schema
    except (ConfigError, BackendError) as exc:
        raise JobStoreError(f"job store: {exc}") from None
    return SqliteJobStore(options.path, retention=retention, busy_timeout=options.busy_timeout)
