"""The SQL both relational stores run: applying events, reading records, expiring.

Owns: the statements and the rows <-> records mapping, written once with ``?``
placeholders (:class:`Dialect` turns them into psycopg's ``%s``). Each store brings a
connection and a transaction; this module never opens one.

Tables: ``queuey_jobs`` (a row per job: state, result, last error, created and updated
times in ms) and ``queuey_job_attempts`` (a row per run of a handler, in the order they
started). A state is only replaced by an event at least as recent, so a batch that
arrives late never moves a job back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from queuey_core.results.batch import fold
from queuey_core.results.records import Attempt, JobEvent, JobRecord, JobState, from_ms, to_ms

#: Records deleted for age every this many events written (and on the first write).
EXPIRE_EVERY = 1000


class Cursor(Protocol):
    """What a DB-API cursor gives (sqlite3's and psycopg's both do)."""

    def fetchall(self) -> list[Any]: ...


#: Runs one statement with its parameters; returns the cursor.
Execute = Callable[[str, Sequence[Any]], Cursor]
#: Runs one statement once for each row of parameters.
ExecuteMany = Callable[[str, Sequence[Sequence[Any]]], object]


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells the tables and placeholders."""

    prefix: str = ""
    """Before each table name: ``"schema."`` on PostgreSQL, nothing on SQLite."""
    placeholder: str = "?"

    def sql(self, text: str) -> str:
        """``text`` with its tables qualified and its placeholders this dialect's."""
        text = (
            text.replace("{jobs}", f"{self.prefix}queuey_jobs")
            .replace("{attempts}", f"{self.prefix}queuey_job_attempts")
            .replace("{prefix}", self.prefix)
        )
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)


#: The one state the index on states leaves out: most jobs end in it, so a no-op job's
#: row costs one index entry less, and listing it scans the index on updated_at.
_COMMON = "succeeded"


def ddl(dialect: Dialect, *, serial: str) -> list[str]:
    """The tables and indexes, made or brought up to date; ``serial`` is the attempt
    id's column type.

    Stores made by earlier versions had an index on every state (``queuey_jobs_state``):
    it is replaced by one on the states other than succeeded (a partial index), which
    :func:`search` names in its query so that both databases use it."""
    return [
        dialect.sql(s)
        for s in (
            """CREATE TABLE IF NOT EXISTS {jobs} (
                job_id TEXT PRIMARY KEY,
                job_type TEXT NOT NULL,
                queue TEXT NOT NULL,
                state TEXT NOT NULL,
                result TEXT,
                error TEXT NOT NULL DEFAULT '',
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL
            )""",
            f"""CREATE TABLE IF NOT EXISTS {{attempts}} (
                id {serial},
                job_id TEXT NOT NULL,
                number INTEGER NOT NULL,
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                started_at BIGINT NOT NULL,
                ended_at BIGINT,
                outcome TEXT,
                error TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX IF NOT EXISTS queuey_jobs_updated ON {jobs} (updated_at)",
            "DROP INDEX IF EXISTS {prefix}queuey_jobs_state",
            "CREATE INDEX IF NOT EXISTS queuey_jobs_unsucceeded ON {jobs} (state, updated_at) "
            f"WHERE state <> '{_COMMON}'",
            "CREATE INDEX IF NOT EXISTS queuey_job_attempts_job ON {attempts} (job_id, id)",
        )
    ]


_INSERT_JOB = (
    "INSERT INTO {jobs} (job_id, job_type, queue, state, result, error, created_at, updated_at) "
)
_KEEP = "ON CONFLICT (job_id) DO NOTHING"
_UPSERT = (
    "ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, "
    "result = COALESCE(excluded.result, {jobs}.result), error = excluded.error, "
    "updated_at = excluded.updated_at "
    # A producer records "queued" after its publish, so its clock may read later than a
    # worker that already took the job: a worker's event always replaces "queued",
    # whatever the two clocks say.
    "WHERE {jobs}.state = 'queued' OR {jobs}.updated_at <= excluded.updated_at"
)
_INSERT_ATTEMPT = (
    "INSERT INTO {attempts} (job_id, number, host, pid, started_at, ended_at, outcome, error) "
)
_CLOSE = (
    "UPDATE {attempts} SET ended_at = ?, outcome = ?, error = ? WHERE id = "
    "(SELECT max(id) FROM {attempts} WHERE job_id = ? AND host = ? AND pid = ? "
    "AND ended_at IS NULL)"
)
# PostgreSQL: a whole column per parameter, one statement per table and batch.
_UNNEST_JOBS = "SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], "
_UNNEST_JOBS += "?::text[], ?::bigint[], ?::bigint[]) "
_UNNEST_ATTEMPTS = "SELECT * FROM unnest(?::text[], ?::int[], ?::text[], ?::int[], "
_UNNEST_ATTEMPTS += "?::bigint[], ?::bigint[], ?::text[], ?::text[]) "


#: One statement of a write: its text, its parameters, and whether they are rows for
#: ``executemany`` (one run each) rather than one run's.
Statement = tuple[str, Sequence[Any], bool]


def planned(dialect: Dialect, events: Sequence[JobEvent]) -> list[Statement]:
    """The statements that write ``events``, folded (:func:`~.batch.fold`): each row of a
    table in multi-row INSERTs (SQLite, where a statement costs little). Made before the
    transaction, so that the file's write lock, which a store in the embedded backend's
    file shares with it, is held only while they run (folding was a quarter of that)."""
    q = dialect.sql
    folded = fold(events)
    out: list[Statement] = []
    if folded.queued:
        # A worker's event may be in first: the producer's never overwrites it.
        out += _rows(q(_INSERT_JOB), q(_KEEP), folded.queued)
    if folded.jobs:
        out += _rows(q(_INSERT_JOB), q(_UPSERT), folded.jobs)
    if folded.closings:
        # Before the inserts: a closing ends the attempt its host and pid left open in an
        # earlier batch, not one this batch opens (a retry's next run on the same worker).
        out.append((q(_CLOSE), folded.closings, True))
    if folded.attempts:
        out += _rows(q(_INSERT_ATTEMPT), "", folded.attempts)
    return out


def run(execute: Execute, executemany: ExecuteMany, statements: Sequence[Statement]) -> None:
    """Run ``statements`` (from :func:`planned`) inside the caller's transaction."""
    for text, params, many in statements:
        if many:
            executemany(text, params)
        else:
            execute(text, params)


#: Rows one INSERT carries at most (8 parameters each: within SQLite's oldest limit of
#: 999), and the smaller statements the rest is split into (powers of two: a handful of
#: statements for the connection's cache, whatever the batch's size).
_CHUNKS = (64, 32, 16, 8, 4, 2, 1)
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"


def _rows(head: str, tail: str, rows: Sequence[Sequence[Any]]) -> list[Statement]:
    """``head VALUES (...), (...) tail`` for ``rows``, in order: many rows a statement,
    rather than ``executemany``'s statement a row (9 k instructions a job less)."""
    out: list[Statement] = []
    i, n = 0, len(rows)
    for size in _CHUNKS:
        text = f"{head}VALUES {', '.join([_ROW] * size)} {tail}"
        while n - i >= size:
            out.append((text, [value for row in rows[i : i + size] for value in row], False))
            i += size
    return out


def apply_columns(
    execute: Execute, executemany: ExecuteMany, dialect: Dialect, events: Sequence[JobEvent]
) -> None:
    """:func:`planned` for PostgreSQL: each table's rows in one statement, as arrays a
    column each (``unnest``), rather than a statement a row: a round trip and the
    client's work of a statement per row were most of what recording cost there."""

    def q(text: str) -> str:
        # Binary parameters: psycopg dumps a text array in text form element by element
        # with a regular expression each, in binary form it does not.
        return dialect.sql(text).replace("%s", "%b")

    folded = fold(events)
    if folded.queued:
        execute(q(_INSERT_JOB + _UNNEST_JOBS + _KEEP), _columns(folded.queued))
    if folded.jobs:
        # fold gives each job one row, as one INSERT ... ON CONFLICT needs.
        execute(q(_INSERT_JOB + _UNNEST_JOBS + _UPSERT), _columns(folded.jobs))
    if folded.closings:
        # Rare (an end whose start was written in an earlier batch), and before the
        # inserts, as in planned.
        executemany(dialect.sql(_CLOSE), folded.closings)
    if folded.attempts:
        # unnest yields its rows in order, so the attempts' ids keep their order.
        execute(q(_INSERT_ATTEMPT + _UNNEST_ATTEMPTS), _columns(folded.attempts))


def _columns(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)]


def expiry_due(written: int, adding: int) -> bool:
    """Whether a write of ``adding`` events after ``written`` ones should expire too: the
    first write, then once every :data:`EXPIRE_EVERY` events."""
    return written == 0 or written // EXPIRE_EVERY != (written + adding) // EXPIRE_EVERY


def expire(execute: Execute, dialect: Dialect, before_ms: int) -> None:
    """Delete the records last updated before ``before_ms``, with their attempts."""
    execute(
        dialect.sql(
            "DELETE FROM {attempts} WHERE job_id IN "
            "(SELECT job_id FROM {jobs} WHERE updated_at < ?)"
        ),
        (before_ms,),
    )
    execute(dialect.sql("DELETE FROM {jobs} WHERE updated_at < ?"), (before_ms,))


_COLUMNS = "job_id, job_type, queue, state, result, error, created_at, updated_at"


def get(execute: Execute, dialect: Dialect, job_id: str) -> JobRecord | None:
    """The record of ``job_id``, or None."""
    rows = execute(dialect.sql(f"SELECT {_COLUMNS} FROM {{jobs}} WHERE job_id = ?"), (job_id,))
    found = rows.fetchall()
    return _records(execute, dialect, found)[0] if found else None


def search(
    execute: Execute,
    dialect: Dialect,
    *,
    state: JobState | None,
    job_type: str | None,
    queue: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    offset: int,
) -> list[JobRecord]:
    """The records matching every filter, most recently updated first."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("state", state), ("job_type", job_type), ("queue", queue)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value.value if isinstance(value, JobState) else value)
    if state is not None and state.value != _COMMON:
        # Implied by the state asked for, but spelled out: SQLite uses a partial index
        # only when the query holds its condition word for word.
        where.append(f"state <> '{_COMMON}'")
    if since is not None:
        where.append("updated_at >= ?")
        args.append(to_ms(since))
    if until is not None:
        where.append("updated_at < ?")
        args.append(to_ms(until))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = execute(
        dialect.sql(
            f"SELECT {_COLUMNS} FROM {{jobs}}{clause} "
            "ORDER BY updated_at DESC, job_id LIMIT ? OFFSET ?"
        ),
        (*args, max(0, limit), max(0, offset)),
    ).fetchall()
    return _records(execute, dialect, rows)


def _records(execute: Execute, dialect: Dialect, rows: list[Any]) -> list[JobRecord]:
    if not rows:
        return []
    ids = [row[0] for row in rows]
    marks = ", ".join("?" for _ in ids)
    attempts: dict[str, list[Attempt]] = {job_id: [] for job_id in ids}
    for a in execute(
        dialect.sql(
            "SELECT job_id, number, host, pid, started_at, ended_at, outcome, error "
            f"FROM {{attempts}} WHERE job_id IN ({marks}) ORDER BY id"
        ),
        ids,
    ).fetchall():
        attempts[a[0]].append(
            Attempt(
                number=a[1],
                host=a[2],
                pid=a[3],
                started_at=from_ms(a[4]),
                ended_at=None if a[5] is None else from_ms(a[5]),
                outcome=None if a[6] is None else JobState(a[6]),
                error=a[7],
            )
        )
    return [
        JobRecord(
            job_id=uuid.UUID(row[0]),
            job_type=row[1],
            queue=row[2],
            state=JobState(row[3]),
            attempts=tuple(attempts[row[0]]),
            result=None if row[4] is None else json.loads(row[4]),
            created_at=from_ms(row[6]),
            updated_at=from_ms(row[7]),
            error=row[5],
        )
        for row in rows
    ]
