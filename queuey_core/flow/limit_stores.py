"""Where limits' state is kept, opened: one :class:`~.limit_state.Connector` a database.

* :func:`in_process`: an in-memory SQLite database, for the in-memory backend (its
  queues end with the process, and so does this);
* :func:`sqlite_file`: the embedded backend's file, or a job store's SQLite file (the
  file is made a queuey file first, so its tables are schema version 4's);
* :func:`postgres`: the job store's PostgreSQL schema (tables created beside the
  store's); every transaction takes one advisory lock, so decisions are made one at a
  time across every worker, as ``BEGIN IMMEDIATE`` makes them on a file.

Owns: connections, their locks, and turning a driver's errors into a one-line
:class:`~queuey_core.errors.LimitStateError` (passwords left out). Must never: decide
anything (:mod:`.limit_state` does).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

from queuey_core.errors import BackendError, ConfigError, LimitStateError
from queuey_core.flow import limit_schema
from queuey_core.flow.limit_state import Execute
from queuey_core.urls import redact

#: The PostgreSQL advisory lock every limits transaction takes ("qlim" in ASCII).
ADVISORY_LOCK = 0x716C696D


class SqliteConnector:
    """Limits' state in a SQLite database: a file shared by processes, or in memory."""

    placeholder = "?"
    prefix = ""

    def __init__(self, path: str, *, busy_timeout: float = 5.0) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._conn = sqlite3.connect(
                path, timeout=busy_timeout, check_same_thread=False, isolation_level=None
            )
            if path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
            else:  # nobody else made the tables
                for statement in limit_schema.SCHEMA:
                    self._conn.execute(statement)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.Error) -> LimitStateError:
        return LimitStateError(f"limits' state in {self.path}: {exc}")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Execute]:
        """``BEGIN IMMEDIATE``: one writer at a time on the file."""
        with self._lock:
            if self._closed:
                raise LimitStateError(f"limits' state in {self.path}: closed")
            conn = self._conn

            def execute(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                return conn.execute(statement, params).fetchall()

            try:
                conn.execute("BEGIN IMMEDIATE")
                yield execute
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(conn)
                raise self._error(exc) from None
            except BaseException:
                _rollback(conn)
                raise

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def in_process() -> SqliteConnector:
    """Limits' state for one process (the in-memory backend)."""
    return SqliteConnector(":memory:")


def sqlite_file(url: str) -> SqliteConnector:
    """Limits' state in the queuey file ``url`` names (created or upgraded first).

    Raises:
        ConfigError: not a usable ``sqlite:///`` URL.
        LimitStateError: the file cannot be opened.
    """
    # Imported here: a RabbitMQ worker with a PostgreSQL store never loads them.
    from queuey_core.backends.sqlite.database import Database  # noqa: PLC0415
    from queuey_core.backends.sqlite.options import parse_url  # noqa: PLC0415

    options = parse_url(url)
    try:
        Database(options).close()  # create or check the queuey schema (version 4)
    except BackendError as exc:
        raise LimitStateError(f"limits' state: {exc}") from None
    return SqliteConnector(options.path, busy_timeout=options.busy_timeout)


class PostgresConnector:
    """Limits' state in a PostgreSQL schema (the job store's), one connection."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        try:
            import psycopg  # noqa: PLC0415
        except ImportError:  # pragma: no cover - depends on the extra
            raise ConfigError(
                "limits in a postgresql:// store need psycopg: pip install 'queuey[postgres]'"
            ) from None
        from queuey_core.results.postgres_store import split_url  # noqa: PLC0415

        self._psycopg: Any = psycopg
        self._conninfo, schema = split_url(url)
        self.prefix = f'"{schema}".'
        self._shown = redact(url)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False
        with self.transaction() as execute:
            execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"', ())
            for statement in limit_schema.ddl(self.prefix, blob="BYTEA"):
                execute(statement, ())

    def _error(self, exc: Exception) -> LimitStateError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        password = urllib.parse.urlsplit(self._conninfo).password
        if password:
            first = first.replace(password, "****")
        return LimitStateError(f"limits' state in {self._shown}: {first}")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Execute]:
        """A transaction holding the limits' advisory lock; a lost connection is
        replaced on the next one."""
        psycopg = self._psycopg
        with self._lock:
            if self._closed:
                raise LimitStateError(f"limits' state in {self._shown}: closed")
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = psycopg.connect(
                        self._conninfo,
                        autocommit=True,
                        connect_timeout=5,
                        application_name="queuey limits",
                    )
                conn = self._conn

                def execute(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                    cursor = conn.execute(statement, params)
                    return list(cursor.fetchall()) if cursor.description else []

                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK,))
                    yield execute
            except psycopg.Error as exc:
                raise self._error(exc) from None

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()


def postgres(url: str) -> PostgresConnector:
    """Limits' state in the PostgreSQL schema ``url`` names.

    Raises:
        LimitStateError: it cannot be reached.
    """
    return PostgresConnector(url)
