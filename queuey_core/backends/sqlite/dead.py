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


def listed(
    conn: sqlite3.Connection, queue: str, *, limit: int | None = None
) -> list[tuple[int, AnyDeadLetter]]:
    """The dead letters of ``queue``, oldest first, with their row ids."""
    rows = conn.execute(
        "SELECT id, handle, reason, dead_at, body, traceparent, tracestate "
        "FROM queuey_dead WHERE queue = ? "
        "ORDER BY id LIMIT ?",
        (queue, -1 if limit is None else limit),
    ).fetchall()
    return [(row[0], _dead_letter(n, *row[1:])) for n, row in enumerate(rows, 1)]


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
    return DeadLetter(envelope, reason, dead_at, handle)


def requeue(
    conn: sqlite3.Connection,
    queue: str,
    job_ids: Sequence[str] | None,
    put_back: Callable[[Envelope], None],
) -> int:
    """Hand the decodable dead letters of ``queue`` (all, or those ids) to
    ``put_back`` at attempt 1, and delete them; how many."""
    wanted = None if job_ids is None else set(job_ids)
    moved: list[int] = []
    for row_id, dead in listed(conn, queue):
        if isinstance(dead, DeadLetter) and (wanted is None or dead.handle in wanted):
            put_back(dead.envelope.fresh())
            moved.append(row_id)
    _delete_ids(conn, moved)
    return len(moved)


def delete(conn: sqlite3.Connection, queue: str, handles: Sequence[str]) -> int:
    """Delete the dead letters of ``queue`` listed under ``handles``; how many."""
    wanted = set(handles)
    gone = [row_id for row_id, dead in listed(conn, queue) if dead.handle in wanted]
    _delete_ids(conn, gone)
    return len(gone)


def purge(conn: sqlite3.Connection, queue: str) -> int:
    """Delete every dead letter of ``queue``; how many."""
    return conn.execute("DELETE FROM queuey_dead WHERE queue = ?", (queue,)).rowcount


def count(conn: sqlite3.Connection, queue: str) -> int:
    """How many dead letters ``queue`` has."""
    return int(
        conn.execute("SELECT count(*) FROM queuey_dead WHERE queue = ?", (queue,)).fetchone()[0]
    )


def _delete_ids(conn: sqlite3.Connection, ids: list[int]) -> None:
    conn.executemany("DELETE FROM queuey_dead WHERE id = ?", [(i,) for i in ids])
