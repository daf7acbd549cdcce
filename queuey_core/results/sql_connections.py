"""Connections to a job store's database, for every table kept beside its records: the
dead letters (:mod:`.dead_letter_table`), the unique keys (:mod:`queuey_core.flow`),
the limits' state (:mod:`queuey_core.flow.limit_stores`) and the workflows
(:mod:`queuey_core.workflows`). One copy of this code, so that a fix to how a store is
reached (a lost connection, a table two processes make at once, a password in an
error) reaches every table at once.

Owns: :class:`SqlConnections` (SQLite: one connection, behind a lock, each transaction
``BEGIN IMMEDIATE``; PostgreSQL: one per thread, or one behind a lock when ``shared``,
autocommit outside the transactions it opens), the tables made on first use under one
advisory lock across processes, and every database error turned into a one-line error
of the caller's class with no password in it; :func:`open_sql`, the connections of a
``sqlite:///`` or ``postgresql://`` URL, :func:`open_table`, those connections with the
statements of one table for their dialect, and :func:`sqlite_in_memory`.
Must never: hold a transaction open once its block has ended.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from queuey_core.errors import ConfigError, JobStoreError, QueueyError
from queuey_core.urls import redact

if TYPE_CHECKING:
    import sqlite3

#: A DB-API cursor (sqlite3's or psycopg's).
Cursor = Any
#: Makes the statements of the caller's tables: ``ddl(prefix, postgres)``.
Ddl = Callable[[str, bool], Sequence[str]]
#: Makes the statements of one table for a dialect: ``(prefix=, placeholder=, postgres=)``
#: on PostgreSQL, no arguments on SQLite (as :class:`~.dead_letter_sql.Sql` takes them).
MakeSql = Callable[..., Any]

#: The PostgreSQL advisory lock every queuey table's creation takes (an arbitrary key):
#: ``CREATE ... IF NOT EXISTS`` is not safe against itself on PostgreSQL (two sessions
#: both create, one fails on the catalog's unique index), so one session of any process
#: makes tables at a time.
DDL_LOCK = 0x71756575


class SqlConnections:
    """The connections to one database, thread-safe, connected on first use.

    ``ddl(prefix, postgres)`` gives the statements that make the caller's tables if they
    are missing (run once, on the first transaction); ``prefix`` is the quoted schema and
    a dot on PostgreSQL, "" on SQLite. On PostgreSQL, ``shared`` keeps one connection
    for every thread (for callers whose transactions are serialised anyway), and
    ``xact_lock`` is an advisory lock every transaction takes first.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        ddl: Ddl,
        *,
        postgres: bool,
        prefix: str = "",
        shown: str,
        errors: tuple[type[BaseException], ...],
        secret: str | None = None,
        label: str = "job store",
        error: type[QueueyError] = JobStoreError,
        shared: bool = False,
        xact_lock: int | None = None,
    ) -> None:
        self._connect = connect
        self._ddl = ddl
        self.postgres = postgres
        self.prefix = prefix
        self.shown = shown
        self._errors = errors
        self._secret = secret
        self._label = label
        self._error_class = error
        self._xact_lock = xact_lock
        self._local = threading.local()
        self._lock = threading.RLock() if shared or not postgres else None
        self._making = threading.Lock()
        self._all: list[Any] = []
        self._closed = False
        self._ready = False

    @property
    def placeholder(self) -> str:
        """The driver's parameter placeholder."""
        return "%s" if self.postgres else "?"

    def _conn(self) -> Any:
        if self._closed:
            raise self._error_class(f"{self._label} {self.shown}: closed")
        if self._lock is not None:
            conn = self._all[-1] if self._all else None
        else:
            conn = getattr(self._local, "conn", None)
        if conn is not None and self.postgres and (conn.closed or conn.broken):
            conn.close()
            conn = None
        if conn is None:
            conn = self._connect()
            self._all.append(conn)
            if self._lock is None:
                self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction, its cursor; any database error as the caller's error."""
        guard = self._lock if self._lock is not None else contextlib.nullcontext()
        try:
            with guard:
                conn = self._conn()
                if not self._ready:
                    self._make(conn)
                if self.postgres:
                    with conn.transaction(), conn.cursor() as cur:
                        if self._xact_lock is not None:
                            cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._xact_lock,))
                        yield cur
                else:
                    cur = conn.cursor()
                    cur.execute("BEGIN IMMEDIATE")
                    try:
                        yield cur
                        cur.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
        except self._errors as exc:
            raise self._error(exc) from None

    def _make(self, conn: Any) -> None:
        if self.postgres:
            with self._making, conn.transaction():
                conn.execute(f"SELECT pg_advisory_xact_lock({DDL_LOCK})")
                if not self._ready:
                    for statement in self._ddl(self.prefix, True):
                        conn.execute(statement)
        else:
            for statement in self._ddl(self.prefix, False):
                conn.execute(statement)
        self._ready = True

    def _error(self, exc: BaseException) -> QueueyError:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if self._secret:
            first = first.replace(self._secret, "****")
        return self._error_class(f"{self._label} {self.shown}: {first}")

    def ready(self) -> None:
        """Connect and make the tables if missing; the caller's error if it is down."""
        with self.transaction():
            pass

    def close(self) -> None:
        """Close every connection; idempotent."""
        guard = self._lock if self._lock is not None else contextlib.nullcontext()
        with guard:
            self._closed = True
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()


def open_sql(
    url: str,
    ddl: Ddl,
    *,
    application_name: str,
    label: str = "job store",
    error: type[QueueyError] = JobStoreError,
    shared: bool = False,
    xact_lock: int | None = None,
) -> SqlConnections:
    """The connections of ``url`` (``sqlite:///path``, its queuey schema made or checked
    first, or ``postgresql://...?schema=NAME``), connected on first use.

    Raises:
        ConfigError: another scheme, or a postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        return _sqlite(url, ddl, label, error)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url, ddl, application_name, label, error, shared, xact_lock)
    raise ConfigError(f"{label}: {scheme}:// is neither sqlite:/// nor postgresql://")


def sqlite_in_memory(
    ddl: Ddl, *, label: str, error: type[QueueyError] = JobStoreError
) -> SqlConnections:
    """Connections to a SQLite database in this process's memory, its tables made."""
    import sqlite3  # noqa: PLC0415 - on use, as in _sqlite

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)

    return SqlConnections(
        connect,
        ddl,
        postgres=False,
        shown=":memory:",
        errors=(sqlite3.Error,),
        label=label,
        error=error,
    )


def _sqlite(url: str, ddl: Ddl, label: str, error: type[QueueyError]) -> SqlConnections:
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
        error=error,
    )


def _postgres(
    url: str,
    ddl: Ddl,
    application_name: str,
    label: str,
    error: type[QueueyError],
    shared: bool,
    xact_lock: int | None,
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
        with conn.transaction():  # under the lock the tables are made with (_make)
            conn.execute(f"SELECT pg_advisory_xact_lock({DDL_LOCK})")
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
        error=error,
        shared=shared,
        xact_lock=xact_lock,
    )


def open_table(url: str, make_sql: MakeSql, *, what: str) -> tuple[SqlConnections, Any]:
    """The connections of the job store ``url`` names, and the statements ``make_sql``
    gives for its dialect, whose ``ddl()`` makes the table on first use; ``what`` the
    table keeps names it in errors.

    Raises:
        ConfigError: a store that cannot hold a table (``memory://``), or a
            postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ConfigError(f"{what} cannot be kept in a {scheme}:// job store")
    made: list[Any] = []
    db = open_sql(url, lambda _prefix, _pg: made[0].ddl(), application_name=f"queuey {what}")
    if db.postgres:
        made.append(make_sql(prefix=db.prefix, placeholder="%s", postgres=True))
    else:
        made.append(make_sql())
    return db, made[0]
