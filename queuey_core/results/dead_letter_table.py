"""The dead-letter table in a job store (SQLite file or PostgreSQL schema): where
RabbitMQ's dead letters live when ``[results] url`` is set, so that a page, a lookup or
a move of one is an index lookup, whatever the number of dead letters (issue 28).

Owns: :class:`DeadLetterTable`, the operations the dead-letter tools need, each one
transaction on the store's connections (:mod:`.sql_connections`: every database error a
one-line :class:`~queuey_core.errors.JobStoreError` with no password in it), and
the statements are in :mod:`.dead_letter_sql`.
Must never: hold a transaction open while a caller reads a stream (streams read in
chunks by key), or delete a row a command did not name or claim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any

from queuey_core.results.dead_letter_sql import Row, Sql, Stored
from queuey_core.results.sql_connections import Cursor, SqlConnections, open_table

#: Rows a stream reads per query.
CHUNK = 500


class DeadLetterTable:
    """The dead letters of every queue, in the table of one job store."""

    def __init__(self, db: SqlConnections, sql: Sql) -> None:
        self._db = db
        self._sql = sql
        self.shown = db.shown
        self._tx = db.transaction

    def transaction(self) -> contextlib.AbstractContextManager[Cursor]:
        """One transaction on these connections, its cursor."""
        return self._tx()

    def ready(self) -> None:
        """Connect and make the table if missing; JobStoreError if the store is down."""
        self._db.ready()

    def close(self) -> None:
        """Close every connection; idempotent."""
        self._db.close()

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
    db, sql = open_table(url, Sql, what="dead letters")
    return DeadLetterTable(db, sql)
