"""Dead letters as rows of ``queuey_dead``: added, listed, requeued, deleted, purged.

A dead letter keeps what RabbitMQ's ``x-queuey-*`` headers carry (reason, when, the
attempt that failed, the queue it was delivered from) beside the envelope's bytes, as
they were, and the job's trace context beside them (as RabbitMQ keeps it in the
headers), so that a requeued dead letter stays in its job's trace. Owns: the SQL of
``queuey_dead`` and turning its rows into :data:`AnyDeadLetter` values. Must never:
requeue a body that is not an envelope (it would only die again), or reorder what it
lists.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import NamedTuple

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetter, UndecodableDeadLetter
from queuey_core.backends.dead_letter_query import EVERYTHING, DeadLetterFilter, ascii_lower
from queuey_core.backends.sqlite import counts
from queuey_core.envelope import Envelope
from queuey_core.errors import DecodeError
from queuey_core.text import ascii_printable, body_preview
from queuey_core.trace_context import TraceContext

#: The longest reason kept, as on RabbitMQ's ``x-queuey-reason`` header.
MAX_REASON = 2000


class Dead(NamedTuple):
    """A dead letter to add."""

    queue: str
    handle: str
    reason: str
    dead_at: int
    attempt: int | None
    delivered_from: str
    decodable: bool
    body: bytes
    traceparent: str | None = None
    tracestate: str | None = None


def add(conn: sqlite3.Connection, dead: Dead) -> None:
    """Add one dead letter, at the end of its queue's list."""
    conn.execute(
        "INSERT INTO queuey_dead "
        "(queue, handle, reason, dead_at, attempt, delivered_from, decodable, body, "
        "traceparent, tracestate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        dead._replace(reason=ascii_printable(dead.reason, MAX_REASON)),
    )


_COLUMNS = "id, handle, reason, dead_at, body, traceparent, tracestate"


def where(queue: str, wanted: DeadLetterFilter) -> tuple[str, list[object]]:
    """The SQL condition (and its parameters) of ``wanted`` on the dead letters of
    ``queue``: the filter runs in SQLite, so nothing it leaves out reaches Python."""
    sql, params = ["queue = ?"], [queue]
    if wanted.job_type is not None:
        # Only a decodable body is JSON: CASE keeps json_extract off the others.
        sql.append(
            "CASE WHEN decodable THEN json_extract(CAST(body AS TEXT), '$.job_type') END = ?"
        )
        params.append(wanted.job_type)
    if wanted.reason is not None:
        sql.append("instr(lower(reason), ?) > 0")  # lower() folds ASCII only, as asked
        params.append(ascii_lower(wanted.reason))
    return " AND ".join(sql), list(params)


def listed(
    conn: sqlite3.Connection,
    queue: str,
    *,
    limit: int | None = None,
    offset: int = 0,
    wanted: DeadLetterFilter = EVERYTHING,
    after: int = 0,
) -> list[tuple[int, AnyDeadLetter]]:
    """The dead letters of ``queue`` that ``wanted`` keeps, oldest first, with their row
    ids: ``limit`` of them after the first ``offset`` of those past row id ``after``."""
    cond, params = where(queue, wanted)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM queuey_dead WHERE {cond} AND id > ? ORDER BY id LIMIT ? OFFSET ?",
        (*params, after, -1 if limit is None else limit, offset),
    ).fetchall()
    return [(row[0], _dead_letter(_position(conn, queue, row), *row[1:])) for row in rows]


def counted(conn: sqlite3.Connection, queue: str, wanted: DeadLetterFilter) -> int:
    """How many dead letters of ``queue`` ``wanted`` keeps: every one is one row of the
    counts (:mod:`.counts`), a filter reads the queue's dead letters."""
    if wanted.everything:
        return counts.dead_letters(conn, queue)
    cond, params = where(queue, wanted)
    return int(conn.execute(f"SELECT count(*) FROM queuey_dead WHERE {cond}", params).fetchone()[0])


def found(conn: sqlite3.Connection, queue: str, handle: str) -> tuple[int, AnyDeadLetter] | None:
    """The dead letter of ``queue`` listed under ``handle`` (``#N``: the N-th, when it has
    no handle of its own), with its row id; None if there is none."""
    if handle.startswith("#") and handle[1:].isdigit() and int(handle[1:]) > 0:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM queuey_dead WHERE queue = ? ORDER BY id LIMIT 1 OFFSET ?",
            (queue, int(handle[1:]) - 1),
        ).fetchall()
        rows = [row for row in rows if not row[1]]
    else:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM queuey_dead WHERE queue = ? AND handle = ? "
            "ORDER BY id LIMIT 1",
            (queue, handle),
        ).fetchall()
    if not rows:
        return None
    return rows[0][0], _dead_letter(_position(conn, queue, rows[0]), *rows[0][1:])


def under(
    conn: sqlite3.Connection, queue: str, handles: Sequence[str]
) -> list[tuple[int, AnyDeadLetter]]:
    """Every dead letter of ``queue`` listed under one of ``handles`` (a job id can be
    there twice), oldest first, with their row ids. Position handles are as now."""
    hits: dict[int, AnyDeadLetter] = {}
    names = [h for h in dict.fromkeys(handles) if not h.startswith("#")]
    for start in range(0, len(names), 500):  # SQLite's limit on parameters is far above
        chunk = names[start : start + 500]
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM queuey_dead WHERE queue = ? "
            f"AND handle IN ({', '.join('?' * len(chunk))}) ORDER BY id",
            (queue, *chunk),
        ).fetchall()
        hits.update((row[0], _dead_letter(0, *row[1:])) for row in rows)
    for handle in handles:
        if handle.startswith("#") and (hit := found(conn, queue, handle)) is not None:
            hits[hit[0]] = hit[1]
    return sorted(hits.items())


def _position(conn: sqlite3.Connection, queue: str, row: tuple[object, ...]) -> int:
    """Where a row without a handle stands (1 for the oldest): its ``#N``. Counted only
    for those, so a page of envelopes costs no count."""
    if row[1]:
        return 0
    return int(
        conn.execute(
            "SELECT count(*) FROM queuey_dead WHERE queue = ? AND id <= ?", (queue, row[0])
        ).fetchone()[0]
    )


def _dead_letter(
    position: int,
    handle: str,
    reason: str,
    dead_at: int,
    body: bytes,
    traceparent: str | None,
    tracestate: str | None,
) -> AnyDeadLetter:
    try:
        envelope = Envelope.decode(body)
        if traceparent is not None:
            envelope = envelope.with_trace(TraceContext.parse(traceparent, tracestate))
    except DecodeError as exc:
        return UndecodableDeadLetter(
            body_preview(bytes(body)), str(exc), reason, dead_at, handle or f"#{position}"
        )
    return DeadLetter.of(envelope, reason, dead_at, handle)


def requeue(
    conn: sqlite3.Connection,
    queue: str,
    job_ids: Sequence[str] | None,
    put_back: Callable[[Envelope], None],
    *,
    after: int = 0,
    limit: int | None = None,
) -> tuple[int, int | None]:
    """Hand the decodable dead letters of ``queue`` (all, or those ids) past row id
    ``after`` to ``put_back`` at attempt 1, and delete them: at most ``limit`` rows
    looked at. Returns how many moved, and the last row id looked at (None: no more)."""
    if job_ids is None:
        rows = listed(conn, queue, limit=limit, after=after)
    else:
        rows = under(conn, queue, job_ids)
    moved: list[int] = []
    for row_id, dead in rows:
        if isinstance(dead, DeadLetter):
            put_back(dead.envelope.fresh())
            moved.append(row_id)
    _delete_ids(conn, moved)
    last = rows[-1][0] if rows and limit is not None and len(rows) == limit else None
    return len(moved), last


def delete(conn: sqlite3.Connection, queue: str, handles: Sequence[str]) -> int:
    """Delete the dead letters of ``queue`` listed under ``handles``; how many."""
    # Positions are looked up before anything goes: "#N" means the N-th at the call.
    gone = [row_id for row_id, _ in under(conn, queue, handles)]
    _delete_ids(conn, gone)
    return len(gone)


def purge(conn: sqlite3.Connection, queue: str) -> int:
    """Delete every dead letter of ``queue``; how many."""
    return conn.execute("DELETE FROM queuey_dead WHERE queue = ?", (queue,)).rowcount


def _delete_ids(conn: sqlite3.Connection, ids: list[int]) -> None:
    conn.executemany("DELETE FROM queuey_dead WHERE id = ?", [(i,) for i in ids])
