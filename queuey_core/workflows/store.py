"""Where workflows are kept: the embedded file, or the job store (SQLite or PostgreSQL).

Owns: :class:`WorkflowStore`, its connections (SQLite: one, behind a lock, each
transaction ``BEGIN IMMEDIATE``; PostgreSQL: one per thread) and
:func:`open_workflow_store`. Every transition is :mod:`.sql`'s, in one transaction
here; every database error becomes a one-line :class:`~queuey_core.errors.JobStoreError`
with no password in it. Must never: hold a transaction across a publish (the outbox is
written in one, published after it).
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from queuey_core.errors import ConfigError, JobStoreError
from queuey_core.urls import redact
from queuey_core.workflows import sql
from queuey_core.workflows.sql import Ending, NewMember
from queuey_core.workflows.tables import Sql


class WorkflowStore:
    """The workflows of one job store; thread-safe. Connected on first use."""

    def __init__(
        self,
        connect: Callable[[], Any],
        dialect: Sql,
        *,
        shown: str,
        errors: tuple[type[BaseException], ...],
        secret: str | None = None,
    ) -> None:
        self._connect = connect
        self._sql = dialect
        self.shown = shown
        self._errors = errors
        self._secret = secret
        self._local = threading.local()
        self._lock = None if dialect.postgres else threading.Lock()
        self._all: list[Any] = []
        self._ready = False
        self._closed = False

    # -- transactions ------------------------------------------------------------------

    def _conn(self) -> Any:
        if self._closed:
            raise JobStoreError(f"workflow store {self.shown}: closed")
        if self._lock is not None:
            if not self._all:
                self._all.append(self._connect())
            return self._all[0]
        conn = getattr(self._local, "conn", None)
        if conn is not None and (conn.closed or conn.broken):
            conn.close()
            conn = None
        if conn is None:
            conn = self._local.conn = self._connect()
            self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """One transaction's cursor; a database error as a JobStoreError."""
        guard = self._lock if self._lock is not None else contextlib.nullcontext()
        try:
            with guard:
                conn = self._conn()
                if not self._ready:
                    self._make(conn)
                if self._lock is not None:
                    cur = conn.cursor()
                    cur.execute("BEGIN IMMEDIATE")
                    try:
                        yield cur
                        cur.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                else:
                    with conn.transaction(), conn.cursor() as cur:
                        yield cur
        except self._errors as exc:
            raise self._error(exc) from None

    def _make(self, conn: Any) -> None:
        if self._sql.postgres:
            with conn.transaction():
                for statement in self._sql.ddl():
                    conn.execute(statement)
        # A SQLite store is a queuey file: its schema (4) holds the tables already.
        self._ready = True

    def _error(self, exc: BaseException) -> JobStoreError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if self._secret:
            first = first.replace(self._secret, "****")
        return JobStoreError(f"workflow store {self.shown}: {first}")

    def close(self) -> None:
        """Close every connection; idempotent."""
        self._closed = True
        conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()

    # -- operations --------------------------------------------------------------------

    def create(
        self,
        workflow_id: str,
        name: str,
        on_failure: str,
        members: Sequence[NewMember],
        now: int,
    ) -> list[tuple[str, str]]:
        """Write a workflow; the envelopes of its first members, now in the outbox."""
        with self.transaction() as cur:
            return sql.create(cur, self._sql, workflow_id, name, on_failure, members, now)

    def started(self, job_id: str, now: int) -> tuple[int, bool] | None:
        """Count a member's start (:func:`.sql.started`)."""
        with self.transaction() as cur:
            return sql.started(cur, self._sql, job_id, now)

    def ended(
        self, job_id: str, *, outcome: str, result: str | None, error: str, now: int
    ) -> Ending:
        """Record a member's end in one transaction (:func:`.sql.ended`)."""
        with self.transaction() as cur:
            return sql.ended(
                cur, self._sql, job_id, outcome=outcome, result=result, error=error, now=now
            )

    def mark_sent(self, job_ids: Sequence[str]) -> None:
        """Outbox rows published."""
        if job_ids:
            with self.transaction() as cur:
                sql.mark_sent(cur, self._sql, job_ids)

    def unsent(self, before: int, limit: int = 1000) -> list[tuple[str, str]]:
        """Outbox rows made ready before ``before`` (ms), not yet marked sent."""
        with self.transaction() as cur:
            return sql.unsent(cur, self._sql, before, limit)

    def cancel(self, workflow_id: str, now: int) -> list[str] | None:
        """Cancel a workflow; the job ids published and not started (None: unknown)."""
        with self.transaction() as cur:
            return sql.cancel(cur, self._sql, workflow_id, now)

    def read(self, workflow_id: str) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]] | None:
        """The workflow row and its member rows (:func:`.sql.workflow`, :func:`.sql.members`)."""
        with self.transaction() as cur:
            found = sql.workflow(cur, self._sql, workflow_id)
            if found is None:
                return None
            return found, sql.members(cur, self._sql, workflow_id)


def open_workflow_store(url: str) -> WorkflowStore:
    """The workflows of the job store ``url`` names (``sqlite:///path``, the embedded
    backend's own file included, or ``postgresql://...?schema=NAME``), connected on
    first use.

    Raises:
        ConfigError: a store that cannot hold workflows (``memory://``), or a
            postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        return _sqlite(url)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url)
    raise ConfigError(
        f"workflows cannot be kept in a {scheme}:// job store: use sqlite:/// or postgresql://"
    )


def _sqlite(url: str) -> WorkflowStore:
    import sqlite3  # noqa: PLC0415 - on use

    from queuey_core.backends.sqlite.database import Database  # noqa: PLC0415 - on use
    from queuey_core.backends.sqlite.options import parse_url  # noqa: PLC0415
    from queuey_core.errors import BackendError  # noqa: PLC0415

    options = parse_url(url)

    def connect() -> sqlite3.Connection:
        Database(options).close()  # create the queuey schema, or upgrade it to 4
        conn = sqlite3.connect(
            options.path,
            timeout=options.busy_timeout,
            check_same_thread=False,
            isolation_level=None,
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    return WorkflowStore(connect, Sql(), shown=options.path, errors=(sqlite3.Error, BackendError))


def _postgres(url: str) -> WorkflowStore:
    from queuey_core.results.postgres_store import split_url  # noqa: PLC0415 - on use

    try:
        import psycopg  # noqa: PLC0415 - the postgres extra, on use
    except ImportError:  # pragma: no cover - depends on the extra
        raise ConfigError(
            "a postgresql:// job store needs psycopg: pip install 'queuey[postgres]'"
        ) from None
    conninfo, schema = split_url(url)

    def connect() -> Any:
        conn = psycopg.connect(
            conninfo, autocommit=True, connect_timeout=5, application_name="queuey workflows"
        )
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        return conn

    return WorkflowStore(
        connect,
        Sql(prefix=f'"{schema}".', postgres=True),
        shown=redact(url),
        errors=(psycopg.Error,),
        secret=urllib.parse.urlsplit(conninfo).password,
    )
