"""The job store on PostgreSQL (``postgresql://user@host/db?schema=NAME``), through
psycopg 3 (the ``postgres`` extra): for fleets on several machines.

Owns: one connection per thread that uses the store (psycopg connections are thread
safe but serialise their statements), and the schema the tables live in (``schema`` in
the URL's query, default ``public``; it is created if missing); the rest is
:class:`~queuey_core.results.sql_store.SqlJobStore`'s, the same on every database.
Errors become one-line :class:`~queuey_core.errors.JobStoreError` with the password left
out.
"""

from __future__ import annotations

import contextlib
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from queuey_core.errors import ConfigError, JobStoreError
from queuey_core.results import sql
from queuey_core.results.records import JobEvent
from queuey_core.results.sql_store import SqlJobStore
from queuey_core.results.store import DEFAULT_RETENTION
from queuey_core.urls import redact

try:
    import psycopg
except ImportError:  # pragma: no cover - depends on the extra
    psycopg = None  # type: ignore[assignment]

T = TypeVar("T")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresJobStore(SqlJobStore):
    """A :class:`~queuey_core.results.JobStore` in a PostgreSQL schema."""

    def __init__(self, url: str, *, retention: float = DEFAULT_RETENTION) -> None:
        if psycopg is None:
            raise ConfigError(
                "a postgresql:// job store needs psycopg: pip install 'queuey[postgres]'"
            )
        self._conninfo, self.schema = split_url(url)
        super().__init__(
            sql.Dialect(prefix=f'"{self.schema}".', placeholder="%s"), retention=retention
        )
        self._shown = redact(url)
        #: What ``pg_stat_activity`` shows of this store's connections.
        self.application_name = f"queuey job store {self.schema}"
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        try:
            with self._connection().transaction():
                execute = self._connection().execute
                execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                for statement in sql.ddl(self._dialect, serial="BIGSERIAL PRIMARY KEY"):
                    execute(statement)
        except psycopg.Error as exc:
            raise self._error(exc) from None

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            if self._closed:
                raise JobStoreError(f"job store {self._shown}: closed")
            try:
                conn = psycopg.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=5,
                    application_name=self.application_name,
                )
            except psycopg.Error as exc:
                raise self._error(exc) from None
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _error(self, exc: Exception) -> JobStoreError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # psycopg may quote the conninfo; the password is never in self._shown.
        password = urllib.parse.urlsplit(self._conninfo).password
        if password:
            first = first.replace(password, "****")
        return JobStoreError(f"job store {self._shown}: {first}")

    @contextlib.contextmanager
    def _writing(self, events: Sequence[JobEvent]) -> Iterator[sql.Execute]:
        """See :meth:`SqlJobStore._writing`: each table's rows in one statement."""
        try:
            conn = self._connection()
            with conn.transaction():
                with conn.cursor() as cursor:
                    sql.apply_columns(conn.execute, cursor.executemany, self._dialect, events)
                yield conn.execute
        except psycopg.Error as exc:
            self._drop_broken()
            raise self._error(exc) from None

    def _read(self, query: Callable[[sql.Execute], T]) -> T:
        """Run a read; once more on a new connection if this one was lost (a server
        restart, a terminated session): reading twice changes nothing."""
        for attempt in (1, 2):
            try:
                return query(self._connection().execute)
            except psycopg.Error as exc:
                lost = self._drop_broken()
                if not lost or attempt == 2:
                    raise self._error(exc) from None
        raise AssertionError("unreachable")

    def drop(self) -> None:
        """Drop the schema and everything in it (tests that made a schema of their own)."""
        self._read(lambda execute: execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE', ()))

    def close(self) -> None:
        """Close every connection; idempotent."""
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

    def _drop_broken(self) -> bool:
        """Forget this thread's connection if it is lost; whether it was."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and (conn.broken or conn.closed):
            conn.close()
            self._local.conn = None
            return True
        return False


def split_url(url: str) -> tuple[str, str]:
    """The URL without ``schema=``, and the schema (checked: it goes into SQL text)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schema = "public"
    kept = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _IDENTIFIER.match(schema):
        raise ConfigError(f"job store URL: schema {schema!r} is not a plain SQL name")
    rest = parts._replace(query=urllib.parse.urlencode(kept))
    return urllib.parse.urlunsplit(rest), schema


def open_store(url: str, *, retention: float = DEFAULT_RETENTION) -> PostgresJobStore:
    """The store ``url`` names (see :func:`~queuey_core.results.open_job_store`)."""
    return PostgresJobStore(url, retention=retention)
