"""Unique keys in a job store: RabbitMQ's place for them, beside its records.

Owns: :func:`open_unique_keys`, the key table of a ``[results] url`` store (SQLite or
PostgreSQL), opened on the same connection code as the store's dead letters
(:mod:`queuey_core.results.dead_letter_table`), with :mod:`.unique_keys`'s statements.
Must never: be imported by the embedded backend (its keys are in its own file).
"""

from __future__ import annotations

from typing import cast

from queuey_core.flow.unique_keys import SqlUniqueKeys, UniqueSql
from queuey_core.results.dead_letter_table import open_dead_letter_table


def open_unique_keys(url: str) -> SqlUniqueKeys:
    """The unique keys of the job store ``url`` names (``sqlite:///path`` or
    ``postgresql://...?schema=NAME``), in a table beside its records, connected on
    first use (on the same connections code as its dead letters).

    Raises:
        ConfigError: a store that cannot hold them, or postgresql:// without psycopg.
    """
    table = open_dead_letter_table(url, UniqueSql, what="unique keys")
    # The statements the table was opened with (it made them with its schema's prefix).
    sql = cast("UniqueSql", table._sql)
    return SqlUniqueKeys(table.transaction, sql, close=table.close)
