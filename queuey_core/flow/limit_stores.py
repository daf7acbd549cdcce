"""Where limits' state is kept, opened: one :class:`~.limit_state.Connector` a database.

* :func:`in_process`: an in-memory SQLite database, for the in-memory backend (its
  queues end with the process, and so does this);
* :func:`sqlite_file`: the embedded backend's file, or a job store's SQLite file (the
  file is made a queuey file first, so its tables are schema version 4's);
* :func:`postgres`: the job store's PostgreSQL schema (tables created beside the
  store's); every transaction takes one advisory lock, so decisions are made one at a
  time across every worker, as ``BEGIN IMMEDIATE`` makes them on a file.

Owns: the limits' view of a store's connections (:mod:`queuey_core.results.sql_connections`,
shared with every other table kept beside the job store, which turns a driver's errors
into a one-line :class:`~queuey_core.errors.LimitStateError` with no password in it).
Must never: decide anything (:mod:`.limit_state` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from queuey_core.errors import LimitStateError
from queuey_core.flow import limit_schema
from queuey_core.flow.limit_state import Execute
from queuey_core.results.sql_connections import SqlConnections, open_sql, sqlite_in_memory

#: The PostgreSQL advisory lock every limits transaction takes ("qlim" in ASCII).
ADVISORY_LOCK = 0x716C696D
#: How errors name the place (followed by where it is).
LABEL = "limits' state in"


class SqlConnector:
    """Limits' state in a database: each transaction exclusive for writing (SQLite's
    ``BEGIN IMMEDIATE``; PostgreSQL's advisory lock, on one connection a process)."""

    def __init__(self, db: SqlConnections) -> None:
        self._db = db
        self.prefix = db.prefix
        self.placeholder = db.placeholder

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Execute]:
        """A write transaction; raises :class:`~queuey_core.errors.LimitStateError`."""
        with self._db.transaction() as cur:

            def execute(statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                cur.execute(statement, params)
                return list(cur.fetchall()) if cur.description else []

            yield execute

    def close(self) -> None:
        """Close the connections; idempotent."""
        self._db.close()


def in_process() -> SqlConnector:
    """Limits' state for one process (the in-memory backend)."""
    db = sqlite_in_memory(lambda _p, _pg: limit_schema.SCHEMA, label=LABEL, error=LimitStateError)
    return _ready(db)


def sqlite_file(url: str) -> SqlConnector:
    """Limits' state in the queuey file ``url`` names (created or upgraded first: the
    schema holds the limits' tables).

    Raises:
        ConfigError: not a usable ``sqlite:///`` URL.
        LimitStateError: the file cannot be opened.
    """
    db = open_sql(url, lambda _p, _pg: (), application_name="", label=LABEL, error=LimitStateError)
    return _ready(db)


def postgres(url: str) -> SqlConnector:
    """Limits' state in the PostgreSQL schema ``url`` names, its tables made if missing.

    Raises:
        ConfigError: psycopg is not installed.
        LimitStateError: it cannot be reached.
    """
    db = open_sql(
        url,
        lambda prefix, _pg: limit_schema.ddl(prefix, blob="BYTEA"),
        application_name="queuey limits",
        label=LABEL,
        error=LimitStateError,
        # Decisions are one at a time under ADVISORY_LOCK anyway: one connection a
        # process, not one a worker thread.
        shared=True,
        xact_lock=ADVISORY_LOCK,
    )
    return _ready(db)


def _ready(db: SqlConnections) -> SqlConnector:
    """Connected and the tables made now: a place that cannot be reached is refused at
    start, not at the first limited job."""
    try:
        db.ready()
    except BaseException:
        db.close()
        raise
    return SqlConnector(db)
