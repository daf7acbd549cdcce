"""Unique keys in a job store: RabbitMQ's place for them, beside its records.

Owns: :func:`open_unique_keys`, the key table of a ``[results] url`` store (SQLite or
PostgreSQL), on the store's connections (:mod:`queuey_core.results.sql_connections`),
with :mod:`.unique_keys`'s statements.
Must never: be imported by the embedded backend (its keys are in its own file).
"""

from __future__ import annotations

from queuey_core.flow.unique_keys import SqlUniqueKeys, UniqueSql
from queuey_core.results.sql_connections import open_table


def open_unique_keys(url: str) -> SqlUniqueKeys:
    """The unique keys of the job store ``url`` names (``sqlite:///path`` or
    ``postgresql://...?schema=NAME``), in a table beside its records, connected on
    first use.

    Raises:
        ConfigError: a store that cannot hold them, or postgresql:// without psycopg.
    """
    db, sql = open_table(url, UniqueSql, what="unique keys")
    return SqlUniqueKeys(db.transaction, sql, close=db.close)
