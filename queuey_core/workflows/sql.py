"""A workflow's state in SQL, and every change to it: the same on SQLite and PostgreSQL.

Owns: the transitions of the tables of :mod:`.tables`, each run inside one transaction
the caller opened on a DB-API cursor: :func:`create`, :func:`started`, :func:`ended`,
:func:`cancel`, the outbox (:func:`unsent`, :func:`mark_sent`) and the reads
(:func:`workflow`, :func:`members`).

A member's end is one transaction, idempotent by its job id: it marks the member, takes
one from the counter of unfinished dependencies of each member that waits for it, and
writes every dependant whose counter reaches 0 into the outbox (its envelope, results
filled in, state ``ready``) in that same transaction. Only the transaction that takes a
counter to 0 can do that, so a callback is created once; publishing it is the caller's,
after the commit, and a crash before it is marked ``sent`` leaves it in the outbox for
the next sweep. Must never: scan a workflow's members to find out whether it finished
(a counter on the workflow row says it), nor move a member back from succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queuey_core.workflows.tables import (
    CANCELLED,
    FAILED,
    HALTED,
    MEMBER,
    ON_ERROR,
    READY,
    RUNNING,
    SENT,
    STARTED,
    SUCCEEDED,
    WAITING,
    Sql,
)


@dataclass(frozen=True, slots=True)
class NewMember:
    """A member row to create: the first-attempt envelope's JSON (without its results)."""

    job_id: str
    position: int
    role: str
    job_type: str
    after: tuple[str, ...]
    receives: str | None
    takes: str
    envelope: str


@dataclass(frozen=True, slots=True)
class Ending:
    """What a member's end changed: the envelopes now in the outbox (job id, JSON), and
    the workflow's new state when it changed (``succeeded``, ``failed``, ``running``)."""

    ready: tuple[tuple[str, str], ...] = ()
    workflow: str | None = None


Cursor = Any


def create(
    cur: Cursor,
    sql: Sql,
    workflow_id: str,
    name: str,
    on_failure: str,
    members: Sequence[NewMember],
    now: int,
) -> list[tuple[str, str]]:
    """Write a workflow and its members; those without dependencies go in the outbox."""
    counted = sum(1 for m in members if m.role == MEMBER)
    cur.execute(
        sql(
            "INSERT INTO {w} (workflow_id, name, state, on_failure, members, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        ),
        [workflow_id, name, RUNNING, on_failure, counted, now, now],
    )
    rows, ready = [], []
    for m in members:
        root = m.role == MEMBER and not m.after
        state = READY if root else WAITING
        envelope = _filled(m.envelope, m.receives, None, now) if root else m.envelope
        rows.append(
            (
                *(m.job_id, workflow_id, m.position, m.role, m.job_type, state),
                *(len(m.after), m.receives, m.takes, envelope, now if root else None),
            )
        )
        if root:
            ready.append((m.job_id, envelope))
    cur.executemany(
        sql(
            "INSERT INTO {m} (job_id, workflow_id, position, role, job_type, state, waiting, "
            "receives, takes, envelope, ready_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        rows,
    )
    edges = [(dep, m.job_id, i) for m in members for i, dep in enumerate(m.after)]
    if edges:
        cur.executemany(sql("INSERT INTO {e} (parent, child, position) VALUES (?, ?, ?)"), edges)
    return ready


def started(cur: Cursor, sql: Sql, job_id: str, now: int) -> tuple[int, bool] | None:
    """Count a start of member ``job_id``: how many it has had, this one included, and
    whether it is the first start of any member of its workflow (None: no such member)."""
    cur.execute(
        sql(
            "UPDATE {m} SET starts = starts + 1, state = CASE WHEN state IN (?, ?) "
            "THEN ? ELSE state END WHERE job_id = ?"
        ),
        [READY, SENT, STARTED, job_id],
    )
    cur.execute(sql("SELECT starts, workflow_id FROM {m} WHERE job_id = ?"), [job_id])
    row = cur.fetchone()
    if row is None:
        return None
    first = False
    if int(row[0]) == 1:
        cur.execute(
            sql("UPDATE {w} SET started_at = ? WHERE workflow_id = ? AND started_at IS NULL"),
            [now, row[1]],
        )
        first = cur.rowcount == 1
    return int(row[0]), first


def ended(
    cur: Cursor,
    sql: Sql,
    job_id: str,
    *,
    outcome: str,
    result: str | None,
    error: str,
    now: int,
) -> Ending:
    """Record member ``job_id``'s end (``outcome``: succeeded, failed or cancelled) and
    everything it makes happen. A second end of the same outcome changes nothing and
    returns the dependants it made ready that are not marked sent yet."""
    cur.execute(sql("SELECT workflow_id, state, role FROM {m} WHERE job_id = ?{lock}"), [job_id])
    row = cur.fetchone()
    if row is None:
        return Ending()
    workflow_id, state, role = row
    if state in (SUCCEEDED, CANCELLED) or (state == FAILED and outcome != SUCCEEDED):
        return Ending(ready=tuple(_ready_children(cur, sql, job_id)))
    cur.execute(
        sql(
            "SELECT state, on_failure, members, succeeded, dead FROM {w} "
            "WHERE workflow_id = ?{lock}"
        ),
        [workflow_id],
    )
    wstate, on_failure, members, succeeded, dead = cur.fetchone()
    was = wstate
    ready: list[tuple[str, str]] = []
    cur.execute(
        sql("UPDATE {m} SET state = ?, result = ?, error = ? WHERE job_id = ?"),
        [outcome, result, error, job_id],
    )
    if outcome == SUCCEEDED:
        dead -= state == FAILED
        if role == MEMBER:
            succeeded += 1
            cur.execute(
                sql(
                    "UPDATE {m} SET waiting = waiting - 1 "
                    "WHERE job_id IN (SELECT child FROM {e} WHERE parent = ?)"
                ),
                [job_id],
            )
            if wstate == FAILED and dead == 0:
                wstate = RUNNING  # the failed member came back (a requeued dead letter)
                cur.execute(
                    sql("UPDATE {m} SET state = ? WHERE workflow_id = ? AND state = ?"),
                    [WAITING, workflow_id, HALTED],
                )
                ready += _promote(cur, sql, _ALL_WAITING, [workflow_id, WAITING, MEMBER], now)
            elif wstate != CANCELLED:
                ready += _promote(cur, sql, _CHILDREN_WAITING, [job_id, WAITING], now)
            if succeeded == members and wstate == RUNNING:
                wstate = SUCCEEDED
    elif role == MEMBER:
        dead += 1
        if wstate == RUNNING:
            wstate = FAILED
            if on_failure == "cancel":
                cur.execute(
                    sql(
                        "UPDATE {m} SET state = ? WHERE workflow_id = ? AND role = ? "
                        "AND state IN (?, ?)"
                    ),
                    [HALTED, workflow_id, MEMBER, WAITING, READY],
                )
            ready += _error_callback(cur, sql, workflow_id, job_id, error, now)
    cur.execute(
        sql(
            "UPDATE {w} SET state = ?, succeeded = ?, dead = ?, updated_at = ?, "
            "error = COALESCE(?, error) WHERE workflow_id = ?"
        ),
        # The error is the first failure's: it is set only as the workflow fails.
        [wstate, succeeded, dead, now, error if wstate == FAILED != was else None, workflow_id],
    )
    return Ending(tuple(ready), wstate if wstate != was else None)


_CHILDREN_WAITING = (
    "SELECT m.job_id, m.envelope, m.receives, m.takes FROM {e} e JOIN {m} m "
    "ON m.job_id = e.child WHERE e.parent = ? AND m.state = ? AND m.waiting = 0"
)
_ALL_WAITING = (
    "SELECT job_id, envelope, receives, takes FROM {m} "
    "WHERE workflow_id = ? AND state = ? AND role = ? AND waiting = 0"
)


def _promote(
    cur: Cursor, sql: Sql, query: str, params: list[Any], now: int
) -> list[tuple[str, str]]:
    """Put the members ``query`` finds into the outbox, their results filled in."""
    cur.execute(sql(query), params)
    found = cur.fetchall()
    ready = []
    for job_id, envelope, receives, takes in found:
        value: Any = None
        if receives is not None:
            cur.execute(
                sql(
                    "SELECT p.result FROM {e} e JOIN {m} p ON p.job_id = e.parent "
                    "WHERE e.child = ? ORDER BY e.position"
                ),
                [job_id],
            )
            results = [None if r[0] is None else json.loads(r[0]) for r in cur.fetchall()]
            value = results[0] if takes == "one" and len(results) == 1 else results
        filled = _filled(envelope, receives, value, now)
        ready.append((job_id, filled))
    if ready:
        cur.executemany(
            sql("UPDATE {m} SET state = ?, envelope = ?, ready_at = ? WHERE job_id = ?"),
            [(READY, env, now, job_id) for job_id, env in ready],
        )
    return ready


def _error_callback(
    cur: Cursor, sql: Sql, workflow_id: str, failed: str, error: str, now: int
) -> list[tuple[str, str]]:
    """The workflow's error callback into the outbox, if it has one not enqueued yet."""
    cur.execute(
        sql(
            "SELECT job_id, envelope, receives FROM {m} "
            "WHERE workflow_id = ? AND role = ? AND state = ?"
        ),
        [workflow_id, ON_ERROR, WAITING],
    )
    row = cur.fetchone()
    if row is None:
        return []
    job_id, envelope, receives = row
    cur.execute(sql("SELECT job_type FROM {m} WHERE job_id = ?"), [failed])
    job_type = cur.fetchone()[0]
    what = {"workflow_id": workflow_id, "job_id": failed, "job_type": job_type, "error": error}
    filled = _filled(envelope, receives, what, now)
    cur.execute(
        sql("UPDATE {m} SET state = ?, envelope = ?, ready_at = ? WHERE job_id = ?"),
        [READY, filled, now, job_id],
    )
    return [(job_id, filled)]


def _filled(envelope: str, receives: str | None, value: Any, now: int) -> str:
    """The envelope enqueued now, with ``value`` in its ``receives`` field."""
    body = json.loads(envelope)
    body["enqueued_at"] = now
    if receives is not None and value is not None:
        body["payload"][receives] = value
    return json.dumps(body, separators=(",", ":"))


def _ready_children(cur: Cursor, sql: Sql, job_id: str) -> list[tuple[str, str]]:
    cur.execute(
        sql(
            "SELECT m.job_id, m.envelope FROM {e} e JOIN {m} m ON m.job_id = e.child "
            "WHERE e.parent = ? AND m.state = ?"
        ),
        [job_id, READY],
    )
    return [(str(j), str(env)) for j, env in cur.fetchall()]


def mark_sent(cur: Cursor, sql: Sql, job_ids: Sequence[str]) -> None:
    """The outbox rows of ``job_ids`` were published."""
    cur.executemany(
        sql("UPDATE {m} SET state = ? WHERE job_id = ? AND state = ?"),
        [(SENT, j, READY) for j in job_ids],
    )


def unsent(cur: Cursor, sql: Sql, before: int, limit: int) -> list[tuple[str, str]]:
    """Outbox rows made ready before ``before`` (ms) and not marked sent, oldest first."""
    cur.execute(
        sql(
            "SELECT job_id, envelope FROM {m} WHERE state = ? AND ready_at < ? "
            "ORDER BY ready_at LIMIT ?"
        ),
        [READY, before, limit],
    )
    return [(str(j), str(env)) for j, env in cur.fetchall()]


def cancel(cur: Cursor, sql: Sql, workflow_id: str, now: int) -> list[str] | None:
    """Cancel a workflow: every member not started yet is cancelled. The job ids already
    published but not started (to cancel on the broker too); None: no such workflow."""
    cur.execute(sql("SELECT state FROM {w} WHERE workflow_id = ?{lock}"), [workflow_id])
    if cur.fetchone() is None:
        return None
    cur.execute(
        sql("SELECT job_id FROM {m} WHERE workflow_id = ? AND state = ?"), [workflow_id, SENT]
    )
    published = [str(r[0]) for r in cur.fetchall()]
    cur.execute(
        sql("UPDATE {m} SET state = ? WHERE workflow_id = ? AND state IN (?, ?, ?, ?)"),
        [CANCELLED, workflow_id, WAITING, READY, SENT, HALTED],
    )
    cur.execute(
        sql("UPDATE {w} SET state = ?, updated_at = ? WHERE workflow_id = ? AND state <> ?"),
        [CANCELLED, now, workflow_id, SUCCEEDED],
    )
    return published


def workflow(cur: Cursor, sql: Sql, workflow_id: str) -> tuple[Any, ...] | None:
    """The workflow row: id, name, state, on_failure, members, succeeded, dead, error,
    created_at, started_at, updated_at."""
    cur.execute(
        sql(
            "SELECT workflow_id, name, state, on_failure, members, succeeded, dead, error, "
            "created_at, started_at, updated_at FROM {w} WHERE workflow_id = ?"
        ),
        [workflow_id],
    )
    row = cur.fetchone()
    return None if row is None else tuple(row)


def members(cur: Cursor, sql: Sql, workflow_id: str) -> list[tuple[Any, ...]]:
    """The member rows in order: job id, position, role, job type, state, starts, error,
    result, and the job ids it waits for (comma-separated, in order)."""
    cur.execute(
        sql(
            "SELECT job_id, position, role, job_type, state, starts, error, result "
            "FROM {m} WHERE workflow_id = ? ORDER BY position"
        ),
        [workflow_id],
    )
    rows = [tuple(r) for r in cur.fetchall()]
    cur.execute(
        sql(
            "SELECT e.child, e.parent FROM {e} e JOIN {m} m ON m.job_id = e.child "
            "WHERE m.workflow_id = ? ORDER BY e.child, e.position"
        ),
        [workflow_id],
    )
    after: dict[str, list[str]] = {}
    for child, parent in cur.fetchall():
        after.setdefault(str(child), []).append(str(parent))
    return [(*r, tuple(after.get(str(r[0]), ()))) for r in rows]
