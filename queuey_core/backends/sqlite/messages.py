"""The SQL of ``queuey_messages``: insert, claim, renew, release, settle.

Every function runs inside a transaction the caller opened (:meth:`Database.write` or
:meth:`Database.read`); none commits. Owns: a row's way from insert to delete (what
"ready", "leased" and "held" mean, and their counts, belong to :mod:`.counts`). Must
never: claim a row leased by a live owner (a lease not yet expired), or claim back a row
of the claimer's own (its process still holds that delivery).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Row(NamedTuple):
    """A row to insert: where, how urgent, from when, the envelope's bytes, and the
    trace context it carries beside them (None: untraced)."""

    queue: str
    priority: int
    available_at: int
    deferral: bool
    job_id: str | None
    attempt: int | None
    body: bytes
    traceparent: str | None = None
    tracestate: str | None = None


class Claimed(NamedTuple):
    """A row just leased: ``claims`` counts this claim too (more than 1: redelivered)."""

    id: int
    priority: int
    available_at: int
    claims: int
    job_id: str | None
    body: bytes
    traceparent: str | None
    tracestate: str | None


def insert(conn: sqlite3.Connection, rows: Iterable[Row]) -> None:
    """Insert ``rows``, ready at their ``available_at``."""
    conn.executemany(
        "INSERT INTO queuey_messages "
        "(queue, priority, available_at, deferral, job_id, attempt, body, traceparent, "
        "tracestate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


#: The best claimable rows of a queue: highest priority, then first available, then
#: first inserted; free, or leased by another owner whose lease expired; none of a paused
#: queue (:mod:`.pauses`), whoever claims.
_CLAIM = """
UPDATE queuey_messages
   SET lease_owner = :owner, lease_expires = :until, claims = claims + 1
 WHERE id IN (
    SELECT id FROM queuey_messages
     WHERE queue = :queue AND available_at <= :now
       AND (lease_owner IS NULL OR (lease_expires < :now AND lease_owner <> :owner))
       AND NOT EXISTS (SELECT 1 FROM queuey_paused WHERE queue = :queue)
     ORDER BY priority DESC, available_at, id
     LIMIT :limit)
RETURNING id, priority, available_at, claims, job_id, body, traceparent, tracestate
"""


def claim(
    conn: sqlite3.Connection, queue: str, *, owner: str, now: int, until: int, limit: int
) -> list[Claimed]:
    """Lease up to ``limit`` of the best rows of ``queue`` to ``owner``, best first."""
    found = [
        Claimed(*row)
        for row in conn.execute(
            _CLAIM, {"owner": owner, "until": until, "queue": queue, "now": now, "limit": limit}
        )
    ]
    # RETURNING does not keep the subquery's order.
    found.sort(key=lambda c: (-c.priority, c.available_at, c.id))
    return found


def next_due(conn: sqlite3.Connection, queue: str, *, owner: str, now: int) -> int | None:
    """When (ms) something of ``queue`` next becomes claimable: a delay ending, or
    another owner's lease expiring; None when nothing waits."""
    held = conn.execute(
        "SELECT min(available_at) FROM queuey_messages "
        "WHERE queue = ? AND available_at > ? AND lease_owner IS NULL",
        (queue, now),
    ).fetchone()[0]
    leased = conn.execute(
        "SELECT min(max(lease_expires, available_at)) FROM queuey_messages "
        "WHERE queue = ? AND lease_owner IS NOT NULL AND lease_owner <> ?",
        (queue, owner),
    ).fetchone()[0]
    due = [t for t in (held, leased) if t is not None]
    return min(due) if due else None


def renew(conn: sqlite3.Connection, *, owner: str, until: int) -> set[int]:
    """Extend every lease ``owner`` holds to ``until``; the ids it still holds."""
    return {
        row[0]
        for row in conn.execute(
            "UPDATE queuey_messages SET lease_expires = ? WHERE lease_owner = ? RETURNING id",
            (until, owner),
        )
    }


def release(conn: sqlite3.Connection, *, owner: str, ids: Sequence[int] | None = None) -> int:
    """Give rows back unsettled (all of ``owner``'s, or those ``ids``); they keep their
    place in line. How many."""
    if ids is None:
        cur = conn.execute(
            "UPDATE queuey_messages SET lease_owner = NULL, lease_expires = NULL "
            "WHERE lease_owner = ?",
            (owner,),
        )
        return cur.rowcount
    released = 0
    for chunk in _chunks(ids):
        cur = conn.execute(
            "UPDATE queuey_messages SET lease_owner = NULL, lease_expires = NULL "
            f"WHERE lease_owner = ? AND id IN ({','.join('?' * len(chunk))})",
            (owner, *chunk),
        )
        released += cur.rowcount
    return released


def take(conn: sqlite3.Connection, row_id: int, *, owner: str) -> bool:
    """Delete a row ``owner`` still holds (a settle); False if its lease was lost."""
    cur = conn.execute(
        "DELETE FROM queuey_messages WHERE id = ? AND lease_owner = ?", (row_id, owner)
    )
    return cur.rowcount == 1


def take_many(conn: sqlite3.Connection, row_ids: Sequence[int], *, owner: str) -> int:
    """Delete the rows of ``row_ids`` ``owner`` still holds; how many."""
    taken = 0
    for chunk in _chunks(row_ids):
        cur = conn.execute(
            f"DELETE FROM queuey_messages WHERE lease_owner = ? "
            f"AND id IN ({','.join('?' * len(chunk))})",
            (owner, *chunk),
        )
        taken += cur.rowcount
    return taken


def _chunks(ids: Sequence[int], size: int = 500) -> Iterable[Sequence[int]]:
    # SQLite limits the number of parameters of one statement.
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
