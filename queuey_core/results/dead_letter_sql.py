"""The dead-letter table of a job store, as SQL: the rows RabbitMQ's dead letters become
when a store is configured (issue 28), and every query the dead-letter tools make.

One text for SQLite and PostgreSQL: a :class:`Sql` fills in the table's schema prefix,
the placeholder and the column types. The table is ``queuey_dead_letters``; a reader
that is not Python reads it as ``docs/protocol.md`` describes. Its rows are never
expired with the job records: a dead letter stays until it is requeued or deleted.

Order is oldest first, by ``(dead_at, seq)``: ``dead_at`` (ms since the epoch, 0 when
unknown) says when the job died, ``seq`` (never reused) breaks ties in arrival order.
``(queue, digest)`` is unique: an import cut between its commit and its acks reads the
same messages again, and inserting them again changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

#: The table (with the schema prefix of its store, on PostgreSQL).
TABLE = "queuey_dead_letters"

#: The columns a row is written with, in order.
COLUMNS = (
    "queue",
    "handle",
    "job_type",
    "reason",
    "dead_at",
    "attempt",
    "digest",
    "body",
    "headers",
)

#: What a read returns, in order (the body and headers only where a letter is built).
READ = "seq, queue, handle, job_type, reason, dead_at, attempt, digest, body, headers"


class Row(NamedTuple):
    """One dead letter as the table keeps it.

    ``handle`` is its job id (or the printable message id of a body that is not an
    envelope, else None: it is then listed as ``#<seq>``); ``job_type`` is None for a
    body that is not an envelope (never requeued); ``dead_at`` is 0 when unknown;
    ``body`` is the message body as it was dead-lettered; ``headers`` a JSON object of
    the AMQP headers a requeue keeps (the trace context) and the message id.
    """

    queue: str
    handle: str | None
    job_type: str | None
    reason: str
    dead_at: int
    attempt: int | None
    digest: str
    body: bytes
    headers: str


class Stored(NamedTuple):
    """A row read back, with its ``seq``."""

    seq: int
    row: Row


class Sql:
    """The statements of one dialect: ``prefix`` (a quoted schema and a dot, or ""),
    ``placeholder`` (``?`` or ``%s``), ``serial`` and ``blob`` (column types)."""

    def __init__(self, *, prefix: str = "", placeholder: str = "?", postgres: bool = False) -> None:
        self.table = f"{prefix}{TABLE}"
        self.p = placeholder
        self.postgres = postgres

    def ddl(self) -> list[str]:
        """The table and its indexes, made if missing."""
        serial = "BIGSERIAL PRIMARY KEY" if self.postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        blob = "BYTEA" if self.postgres else "BLOB"
        name = TABLE
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            f"seq {serial}, queue TEXT NOT NULL, handle TEXT, job_type TEXT, "
            "reason TEXT NOT NULL, dead_at BIGINT NOT NULL, attempt INTEGER, "
            f"digest TEXT NOT NULL, body {blob} NOT NULL, headers TEXT NOT NULL, "
            "claim TEXT)",
            f"CREATE UNIQUE INDEX IF NOT EXISTS {name}_digest ON {self.table} (queue, digest)",
            f"CREATE INDEX IF NOT EXISTS {name}_order ON {self.table} (queue, dead_at, seq)",
            f"CREATE INDEX IF NOT EXISTS {name}_handle ON {self.table} (queue, handle)",
            f"CREATE INDEX IF NOT EXISTS {name}_type ON {self.table} "
            "(queue, job_type, dead_at, seq)",
            f"CREATE INDEX IF NOT EXISTS {name}_claim ON {self.table} (claim)",
        ]

    def insert(self) -> str:
        """One row; a row already there (same queue and digest) is left alone."""
        marks = ", ".join([self.p] * len(COLUMNS))
        return (
            f"INSERT INTO {self.table} ({', '.join(COLUMNS)}) VALUES ({marks}) "
            "ON CONFLICT (queue, digest) DO NOTHING"
        )

    def where(
        self, queue: str, job_type: str | None, reason: str | None
    ) -> tuple[str, list[object]]:
        """The WHERE clause of a filter, and its parameters. The reason matches when it
        contains ``reason``, ignoring ASCII case (reasons are ASCII: ``lower`` is enough)."""
        clause = f"queue = {self.p}"
        params: list[object] = [queue]
        if job_type is not None:
            clause += f" AND job_type = {self.p}"
            params.append(job_type)
        if reason is not None:
            find = "strpos" if self.postgres else "instr"
            clause += f" AND {find}(lower(reason), lower({self.p})) > 0"
            params.append(reason)
        return clause, params

    def count(self, clause: str) -> str:
        """How many rows a filter keeps."""
        return f"SELECT count(*) FROM {self.table} WHERE {clause}"

    def page(self, clause: str) -> str:
        """A page of what a filter keeps (parameters: the filter's, limit, offset).

        The offset is walked on keys alone, then only the page's rows are read: a deep
        page of 100,000 on PostgreSQL takes 90 ms instead of 270 before the planner has
        statistics of a freshly imported table, 17 instead of 50 after."""
        return (
            f"SELECT {READ} FROM {self.table} WHERE seq IN ("
            f"SELECT seq FROM {self.table} WHERE {clause} "
            f"ORDER BY dead_at, seq LIMIT {self.p} OFFSET {self.p}) "
            "ORDER BY dead_at, seq"
        )

    def after(self, clause: str) -> str:
        """The next chunk after a (dead_at, seq) key (parameters: the filter's, dead_at,
        dead_at, seq, limit): keyset paging, so a stream holds no transaction open."""
        return (
            f"SELECT {READ} FROM {self.table} WHERE {clause} "
            f"AND (dead_at > {self.p} OR (dead_at = {self.p} AND seq > {self.p})) "
            f"ORDER BY dead_at, seq LIMIT {self.p}"
        )

    def by_handle(self) -> str:
        """The oldest row of a queue with a handle."""
        return (
            f"SELECT {READ} FROM {self.table} WHERE queue = {self.p} AND handle = {self.p} "
            "ORDER BY dead_at, seq LIMIT 1"
        )

    def by_seq(self) -> str:
        """The row of a queue with a ``seq`` (a ``#N`` handle)."""
        return f"SELECT {READ} FROM {self.table} WHERE queue = {self.p} AND seq = {self.p}"

    def claim(self, handles: int | None) -> str:
        """Mark the oldest unclaimed envelopes of a queue (those of ``handles`` handles,
        or any) with a token, at most a limit (parameters: token, queue, handles...,
        limit)."""
        chosen = ""
        if handles is not None:
            chosen = f" AND handle IN ({', '.join([self.p] * handles)})"
        return (
            f"UPDATE {self.table} SET claim = {self.p} WHERE seq IN ("
            f"SELECT seq FROM {self.table} WHERE queue = {self.p} AND claim IS NULL "
            f"AND job_type IS NOT NULL{chosen} ORDER BY dead_at, seq LIMIT {self.p})"
        )

    def claimed(self) -> str:
        """The rows a token holds, oldest first."""
        return f"SELECT {READ} FROM {self.table} WHERE claim = {self.p} ORDER BY dead_at, seq"

    def release(self) -> str:
        """Let go of a token's rows: they are dead letters again."""
        return f"UPDATE {self.table} SET claim = NULL WHERE claim = {self.p}"

    def move_claim(self) -> str:
        """Hand one row to another token (parameters: token, seq)."""
        return f"UPDATE {self.table} SET claim = {self.p} WHERE seq = {self.p}"

    def delete_claimed(self) -> str:
        """Delete a token's rows (their requeue was committed on the broker)."""
        return f"DELETE FROM {self.table} WHERE claim = {self.p}"

    def stale(self) -> str:
        """How many rows of a queue a command that is gone left claimed."""
        return f"SELECT count(*) FROM {self.table} WHERE queue = {self.p} AND claim IS NOT NULL"

    def release_queue(self) -> str:
        """Let go of every claim on a queue's rows."""
        return f"UPDATE {self.table} SET claim = NULL WHERE queue = {self.p} AND claim IS NOT NULL"

    def delete(self, handles: int, seqs: int) -> str:
        """Delete the rows of a queue with those handles or seqs (parameters: queue,
        handles..., seqs...)."""
        chosen = [f"handle IN ({', '.join([self.p] * handles)})"] if handles else []
        if seqs:
            chosen.append(f"seq IN ({', '.join([self.p] * seqs)})")
        return f"DELETE FROM {self.table} WHERE queue = {self.p} AND ({' OR '.join(chosen)})"

    def purge(self) -> str:
        """Delete every row of a queue."""
        return f"DELETE FROM {self.table} WHERE queue = {self.p}"

    def queues(self) -> str:
        """How many dead letters each queue has."""
        return f"SELECT queue, count(*) FROM {self.table} GROUP BY queue"
