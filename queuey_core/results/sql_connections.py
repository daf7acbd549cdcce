"""Connections to a job store's database, for the tables kept beside its records:
workflows (:mod:`queuey_core.workflows`). The dead-letter table (:mod:`.dead_letter_table`)
still has a copy of this code of its own: moving it here broke the RabbitMQ + PostgreSQL
SIGKILL contract test, for a reason not found yet.

Owns: :class:`SqlConnections` (SQLite: one connection, behind a lock, each transaction
``BEGIN IMMEDIATE``; PostgreSQL: one per thread, autocommit outside the transactions
it opens), the tables made on first use, and every database error turned into a
one-line :class:`~queuey_core.errors.JobStoreError` with no password in it;
:func:`open_sql`, the connections of a ``sqlite:///`` or ``postgresql://`` URL.
Must never: hold a transaction open once its block has ended.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from queuey_core.errors import ConfigError, JobStoreError
from queuey_core.urls import redact

if TYPE_CHECKING:
    import sqlite3

#: A DB-API cursor (sqlite3's or psycopg's).
Cursor = Any


class SqlConnections:
    """The connections to one database, thread-safe, connected on first use.

    ``ddl(prefix, postgres)`` gives the statements that make the caller's tables if they
    are missing (run once, on the first transaction); ``prefix`` is the quoted schema and
    a dot on PostgreSQL, "" on SQLite.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        ddl: Callable[[str, bool], Sequence[str]],
        *,
        postgres: bool,
        prefix: str = "",
        shown: str,
        errors: tuple[type[BaseException], ...],
        secret: str | None = None,
        label: str = "job store",
    ) -> None:
        self._connect = connect
        self._ddl = ddl
        self.postgres = postgres
        self.prefix = prefix
        self.shown = shown
        self._errors = errors
        self._secret = secret
        self._label = label
        self._local = threading.local()
        self._lock = None if postgres else threading.RLock()
        self._all: list[Any] = []
        self._closed = False
        self._ready = False

    def _conn(self) -> Any:
        if self._closed:
            raise JobStoreError(f"{self._label} {self.shown}: closed")
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
    def transaction(self) -> Iterator[Cursor]:
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
        statements = self._ddl(self.prefix, self.postgres)
        if self.postgres:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
        else:
            for statement in statements:
                conn.execute(statement)
        self._ready = True

    def _error(self, exc: BaseException) -> JobStoreError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if self._secret:
            first = first.replace(self._secret, "****")
        return JobStoreError(f"{self._label} {self.shown}: {first}")

    def ready(self) -> None:
        """Connect and make the tables if missing; JobStoreError if the store is down."""
        with self.transaction():
            pass

    def close(self) -> None:
        """Close every connection; idempotent."""
        self._closed = True
        conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()


def open_sql(
    url: str,
    ddl: Callable[[str, bool], Sequence[str]],
    *,
    application_name: str,
    label: str = "job store",
) -> SqlConnections:
    """The connections of ``url`` (``sqlite:///path``, its queuey schema made or checked
    first, or ``postgresql://...?schema=NAME``), connected on first use.

    Raises:
        ConfigError: another scheme, or a postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        return _sqlite(url, ddl, label)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url, ddl, application_name, label)
    raise ConfigError(f"{label}: {scheme}:// is neither sqlite:/// nor postgresql://")


def _sqlite(url: str, ddl: Callable[[str, bool], Sequence[str]], label: str) -> SqlConnections:
    # On use: a worker on RabbitMQ loads this module, and sqlite3 is 1 MB of it.
    import sqlite3  # noqa: PLC0415

    from queuey_core.backends.sqlite.database import Database  # noqa: PLC0415 - on use
    from queuey_core.backends.sqlite.options import parse_url  # noqa: PLC0415
    from queuey_core.errors import BackendError  # noqa: PLC0415

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

    return SqlConnections(
        connect,
        ddl,
        postgres=False,
        shown=options.path,
        errors=(sqlite3.Error, BackendError),
        label=label,
    )


def _postgres(
    url: str, ddl: Callable[[str, bool], Sequence[str]], application_name: str, label: str
) -> SqlConnections:
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
            conninfo, autocommit=True, connect_timeout=5, application_name=application_name
        )
        # Two connections making it at once (threads, processes): IF NOT EXISTS is not
        # atomic in PostgreSQL, and the loser's unique violation means the schema is there.
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        return conn

    return SqlConnections(
        connect,
        ddl,
        postgres=True,
        prefix=f'"{schema}".',
        shown=redact(url),
        errors=(psycopg.Error,),
        secret=urllib.parse.urlsplit(conninfo).password,
        label=label,
    )
