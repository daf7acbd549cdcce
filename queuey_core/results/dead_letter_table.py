"""The dead-letter table in a job store (SQLite file or PostgreSQL schema): where
RabbitMQ's dead letters live when ``[results] url`` is set, so that a page, a lookup or
a move of one is an index lookup, whatever the number of dead letters (issue 28).

Owns: the connections to the table (SQLite: one, behind a lock, WAL; PostgreSQL: one
per thread, autocommit outside the transactions it opens) and :class:`DeadLetterTable`,
the operations the dead-letter tools need, each one transaction. The statements are in
:mod:`.dead_letter_sql`. Every database error becomes a one-line
:class:`~queuey_core.errors.JobStoreError` with no password in it.
Must never: hold a transaction open while a caller reads a stream (streams read in
chunks by key), or delete a row a command did not name or claim.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from queuey_core.errors import ConfigError, JobStoreError
from queuey_core.results.dead_letter_sql import Row, Sql, Stored
from queuey_core.urls import redact

if TYPE_CHECKING:
    import sqlite3

T = TypeVar("T")

#: Rows a stream reads per query.
CHUNK = 500

Cursor = Any


class DeadLetterTable:
    """The dead letters of every queue, in the table of one job store."""

    def __init__(
        self,
        connect: Callable[[], Any],
        sql: Sql,
        *,
        shown: str,
        errors: tuple[type[BaseException], ...],
    ) -> None:
        self._connect = connect
        self._sql = sql
        self.shown = shown
        self._errors = errors
        self._local = threading.local()
        self._lock = threading.RLock() if not sql.postgres else None
        self._all: list[Any] = []
        self._closed = False
        self._ready = False
        #: A password to keep out of error messages.
        self.secret: str | None = None

    # -- connections ---------------------------------------------------------------------

    def _conn(self) -> Any:
        conn = self._all[0] if self._lock is not None and self._all else None
        if self._lock is None:
            conn = getattr(self._local, "conn", None)
            if conn is not None and (conn.closed or conn.broken):
                conn.close()
                conn = None
        if conn is None:
            if self._closed:
                raise JobStoreError(f"job store {self.shown}: closed")
            conn = self._connect()
            self._all.append(conn)
            if self._lock is None:
                self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Cursor]:
        """One transaction, its cursor; any database error as a JobStoreError."""
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
        if self._lock is None:
            with conn.transaction():
                for statement in self._sql.ddl():
                    conn.execute(statement)
        else:
            for statement in self._sql.ddl():
                conn.execute(statement)
        self._ready = True

    def _error(self, exc: BaseException) -> JobStoreError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if self.secret:
            first = first.replace(self.secret, "****")
        return JobStoreError(f"job store {self.shown}: {first}")

    def ready(self) -> None:
        """Connect and make the table if missing; JobStoreError if the store is down."""
        with self._tx():
            pass

    def close(self) -> None:
        """Close every connection; idempotent."""
        self._closed = True
        conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()

    # -- writes --------------------------------------------------------------------------

    def insert(self, rows: Sequence[Row]) -> None:
        """Insert ``rows`` in one transaction; those already there are left alone."""
        if rows:
            with self._tx() as cur:
                cur.executemany(self._sql.insert(), [tuple(r) for r in rows])

    def delete(self, queue: str, handles: Sequence[str]) -> int:
        """Delete the rows of ``queue`` listed under ``handles`` (``#N``: seq N); how many."""
        seqs = [int(h[1:]) for h in handles if h.startswith("#") and h[1:].isdigit()]
        named = [h for h in handles if not h.startswith("#")]
        if not seqs and not named:
            return 0
        with self._tx() as cur:
            cur.execute(self._sql.delete(len(named), len(seqs)), [queue, *named, *seqs])
            return int(cur.rowcount)

    def purge(self, queue: str) -> int:
        """Delete every row of ``queue``; how many."""
        with self._tx() as cur:
            cur.execute(self._sql.purge(), [queue])
            return int(cur.rowcount)

    # -- claims (moves) ------------------------------------------------------------------

    def claim(
        self, queue: str, token: str, handles: Sequence[str] | None, limit: int
    ) -> list[Stored]:
        """Mark at most ``limit`` of the oldest unclaimed envelopes of ``queue`` (with one of
        ``handles``, or any) with ``token``, in one transaction; those rows."""
        chosen = None if handles is None else len(handles)
        with self._tx() as cur:
            cur.execute(self._sql.claim(chosen), [token, queue, *(handles or []), limit])
            cur.execute(self._sql.claimed(), [token])
            return [_stored(r) for r in cur.fetchall()]

    def release(self, token: str) -> None:
        """The rows ``token`` holds are dead letters again."""
        with self._tx() as cur:
            cur.execute(self._sql.release(), [token])

    def move_claim(self, seqs: Sequence[int], token: str) -> None:
        """Hand claimed rows to ``token`` (those a requeue keeps, released at its end)."""
        if seqs:
            with self._tx() as cur:
                cur.executemany(self._sql.move_claim(), [(token, seq) for seq in seqs])

    def delete_claimed(self, token: str) -> int:
        """Delete the rows ``token`` holds; how many."""
        with self._tx() as cur:
            cur.execute(self._sql.delete_claimed(), [token])
            return int(cur.rowcount)

    def release_stale(self, queue: str) -> int:
        """Let go of the claims a command that is gone left on ``queue``; how many."""
        with self._tx() as cur:
            cur.execute(self._sql.stale(), [queue])
            stale = int(cur.fetchone()[0])
            if stale:
                cur.execute(self._sql.release_queue(), [queue])
            return stale

    # -- reads ---------------------------------------------------------------------------

    def count(self, queue: str, job_type: str | None = None, reason: str | None = None) -> int:
        """How many dead letters of ``queue`` the filter keeps."""
        clause, params = self._sql.where(queue, job_type, reason)
        with self._tx() as cur:
            cur.execute(self._sql.count(clause), params)
            return int(cur.fetchone()[0])

    def page(
        self,
        queue: str,
        offset: int,
        limit: int,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> tuple[list[Stored], int]:
        """A page of what the filter keeps, oldest first, and how many it keeps in all
        (one transaction: the count and the page agree)."""
        clause, params = self._sql.where(queue, job_type, reason)
        with self._tx() as cur:
            cur.execute(self._sql.count(clause), params)
            total = int(cur.fetchone()[0])
            cur.execute(self._sql.page(clause), [*params, limit, offset])
            return [_stored(r) for r in cur.fetchall()], total

    def find(self, queue: str, handle: str) -> Stored | None:
        """The oldest row of ``queue`` listed under ``handle`` (``#N``: seq N)."""
        with self._tx() as cur:
            if handle.startswith("#") and handle[1:].isdigit():
                cur.execute(self._sql.by_seq(), [queue, int(handle[1:])])
            else:
                cur.execute(self._sql.by_handle(), [queue, handle])
            found = cur.fetchone()
        return None if found is None else _stored(found)

    def stream(
        self,
        queue: str,
        job_type: str | None = None,
        reason: str | None = None,
        *,
        offset: int = 0,
    ) -> Generator[Stored, None, None]:
        """Every row the filter keeps after the first ``offset``, oldest first,
        :data:`CHUNK` per query, no transaction held between chunks (constant memory on
        both sides)."""
        clause, params = self._sql.where(queue, job_type, reason)
        with self._tx() as cur:
            cur.execute(self._sql.page(clause), [*params, CHUNK, offset])
            rows = [_stored(r) for r in cur.fetchall()]
        while rows:
            yield from rows
            last = rows[-1]
            if len(rows) < CHUNK:
                return
            key = [last.row.dead_at, last.row.dead_at, last.seq, CHUNK]
            with self._tx() as cur:
                cur.execute(self._sql.after(clause), [*params, *key])
                rows = [_stored(r) for r in cur.fetchall()]

    def counts(self) -> dict[str, int]:
        """How many dead letters each queue has in the table."""
        with self._tx() as cur:
            cur.execute(self._sql.queues(), [])
            return {str(q): int(n) for q, n in cur.fetchall()}


def _stored(values: Sequence[Any]) -> Stored:
    seq, queue, handle, job_type, reason, dead_at, attempt, digest, body, headers = values
    row = Row(queue, handle, job_type, reason, int(dead_at), attempt, digest, bytes(body), headers)
    return Stored(int(seq), row)


def open_dead_letter_table(url: str) -> DeadLetterTable:
    """The dead-letter table of the job store ``url`` names (``sqlite:///path`` or
    ``postgresql://...?schema=NAME``), connected on first use.

    Raises:
        ConfigError: a store that cannot hold dead letters (``memory://``), or a
            postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        return _sqlite(url)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url)
    raise ConfigError(f"dead letters cannot be kept in a {scheme}:// job store")


def _sqlite(url: str) -> DeadLetterTable:
    # On use: a worker on RabbitMQ loads this module, and sqlite3 is 1 MB of it.
    import sqlite3  # noqa: PLC0415

    from queuey_core.backends.sqlite.database import Database  # noqa: PLC0415 - on use
    from queuey_core.backends.sqlite.options import parse_url  # noqa: PLC0415

    options = parse_url(url)

    def connect() -> sqlite3.Connection:
        Database(options).close()  # create or check the queuey schema, as the store does
        conn = sqlite3.connect(
            options.path,
            timeout=options.busy_timeout,
            check_same_thread=False,
            isolation_level=None,
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    from queuey_core.errors import BackendError  # noqa: PLC0415

    return DeadLetterTable(connect, Sql(), shown=options.path, errors=(sqlite3.Error, BackendError))


def _postgres(url: str) -> DeadLetterTable:
    from queuey_core.results.postgres_store import split_url  # noqa: PLC0415 - on use

    try:
        import psycopg  # noqa: PLC0415 - the postgres extra, on use
    except ImportError:  # pragma: no cover - depends on the extra
        raise ConfigError(
            "a postgresql:// job store needs psycopg: pip install 'queuey[postgres]'"
        ) from None
    conninfo, schema = split_url(url)
    password = urllib.parse.urlsplit(conninfo).password

    def connect() -> Any:
        conn = psycopg.connect(
            conninfo, autocommit=True, connect_timeout=5, application_name="queuey dead letters"
        )
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        return conn

    table = DeadLetterTable(
        connect,
        Sql(prefix=f'"{schema}".', placeholder="%s", postgres=True),
        shown=redact(url),
        errors=(psycopg.Error,),
    )
    table.secret = password
    return table
