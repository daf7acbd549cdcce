"""What a queuey file holds, counted without reading every row.

``queuey queues``, the dashboard and the metrics ask for the ready, running (leased)
and held (delayed) jobs of each queue, and its dead letters; counted with ``count(*)``
over ``queuey_messages`` that read every row of the queue (half a second at 500,000
jobs). Here, the rows of each (queue, priority level) and the dead letters of each
queue are kept in tables of their own by triggers, so they stay right whoever writes
(every path of this package, :mod:`.migrate`, a test or a tool writing SQL), in the
transaction of the write itself, and survive any crash with it.

What changes with time alone is not stored: a held job becomes ready when its
``available_at`` passes, a lease expires. Those are counted when asked, from indexes:
the held jobs by one range of ``queuey_messages_next`` per priority level that has rows
(O(log n) plus the held jobs of the queue, read from the index alone), the leased ones
from the partial index of owned rows (O(jobs leased), bounded by the workers' credit).
So a count costs O(levels x log n + held + leased), never O(ready).

Owns: the counts tables, their triggers, filling them in for a file of an older
version, and the counts read from them. Must never: count a row in two states, or
differ from a ``count(*)`` of the same snapshot (tests/backends/sqlite/test_counts*.py
check it against one).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import NamedTuple

#: The tables and triggers (schema version 3). A level's row stays at 0 when its last
#: job goes: it is a few bytes, and a queue's levels come and go with its traffic.
SCHEMA: tuple[str, ...] = (
    """CREATE TABLE queuey_counts (
        queue TEXT NOT NULL,
        priority INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (queue, priority)
    ) WITHOUT ROWID""",
    """CREATE TABLE queuey_dead_counts (
        queue TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TRIGGER queuey_messages_added AFTER INSERT ON queuey_messages BEGIN
        INSERT INTO queuey_counts (queue, priority, n) VALUES (new.queue, new.priority, 1)
            ON CONFLICT (queue, priority) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER queuey_messages_removed AFTER DELETE ON queuey_messages BEGIN
        UPDATE queuey_counts SET n = n - 1
         WHERE queue = old.queue AND priority = old.priority;
    END""",
    # No code of queuey moves a row to another queue or level, but SQL from elsewhere
    # may; a claim, a renewal or a release names neither column, so this never runs
    # for them (a trigger "OF" columns costs nothing to an UPDATE of others).
    """CREATE TRIGGER queuey_messages_moved AFTER UPDATE OF queue, priority ON queuey_messages
      WHEN old.queue IS NOT new.queue OR old.priority IS NOT new.priority BEGIN
        UPDATE queuey_counts SET n = n - 1
         WHERE queue = old.queue AND priority = old.priority;
        INSERT INTO queuey_counts (queue, priority, n) VALUES (new.queue, new.priority, 1)
            ON CONFLICT (queue, priority) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER queuey_dead_added AFTER INSERT ON queuey_dead BEGIN
        INSERT INTO queuey_dead_counts (queue, n) VALUES (new.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER queuey_dead_removed AFTER DELETE ON queuey_dead BEGIN
        UPDATE queuey_dead_counts SET n = n - 1 WHERE queue = old.queue;
    END""",
    """CREATE TRIGGER queuey_dead_moved AFTER UPDATE OF queue ON queuey_dead
      WHEN old.queue IS NOT new.queue BEGIN
        UPDATE queuey_dead_counts SET n = n - 1 WHERE queue = old.queue;
        INSERT INTO queuey_dead_counts (queue, n) VALUES (new.queue, 1)
            ON CONFLICT (queue) DO UPDATE SET n = n + 1;
    END""",
)

#: Counts the rows a file of version 2 already holds, once, in the upgrade's
#: transaction (read from the indexes, not the rows: about a second at 1,000,000 jobs).
FILL: tuple[str, ...] = (
    "INSERT INTO queuey_counts (queue, priority, n) "
    "SELECT queue, priority, count(*) FROM queuey_messages GROUP BY queue, priority",
    "INSERT INTO queuey_dead_counts (queue, n) "
    "SELECT queue, count(*) FROM queuey_dead GROUP BY queue",
)


class Counts(NamedTuple):
    """What one queue holds now: ready, leased (running), held (delayed)."""

    ready: int
    leased: int
    held: int


class _Leased(NamedTuple):
    """The owned rows of one queue, by what time has made of them."""

    live: int  # lease not expired: running
    expired_due: int  # lease expired, available: ready again
    due: int  # available_at passed (live or not)
    waiting: int  # available_at to come (a claim made under a later clock)


def counted(conn: sqlite3.Connection, *, now: int) -> dict[str, Counts]:
    """The counts of every queue that holds or held a job, at ``now`` (ms).

    Every state is exactly as :func:`brute_force` counts it; see the module docstring
    for the cost.
    """
    leased = _leased(conn, now)
    result: dict[str, Counts] = {}
    for queue, levels in _levels(conn).items():
        rows = sum(n for _, n in levels)
        later = sum(_later(conn, queue, level, now) for level, _ in levels)
        mine = leased.get(queue, _Leased(0, 0, 0, 0))
        # Free and available: every row available, less the owned ones.
        free_due = rows - later - mine.due
        result[queue] = Counts(free_due + mine.expired_due, mine.live, later - mine.waiting)
    return result


def dead_letters(conn: sqlite3.Connection, queue: str) -> int:
    """How many dead letters ``queue`` has: one row read."""
    row = conn.execute("SELECT n FROM queuey_dead_counts WHERE queue = ?", (queue,)).fetchone()
    return 0 if row is None else int(row[0])


def held_deferrals(conn: sqlite3.Connection, queue: str, *, now: int) -> int:
    """How many of the held jobs of ``queue`` are deferrals: O(held) (each held row is
    read, for its flag), so no count the CLI or the dashboard shows asks for it."""
    return sum(
        int(
            conn.execute(
                "SELECT count(*) FROM queuey_messages WHERE queue = ? AND priority = ? "
                "AND available_at > ? AND lease_owner IS NULL AND deferral",
                (queue, level, now),
            ).fetchone()[0]
        )
        for level, _ in _levels(conn, queue).get(queue, [])
    )


def brute_force(conn: sqlite3.Connection, queue: str, *, now: int) -> Counts:
    """The counts of ``queue`` from every one of its rows: what :func:`counted` must
    equal (the tests' reference, and the definition of each state)."""
    row = conn.execute(
        """SELECT
             coalesce(sum(available_at <= :now
                          AND (lease_owner IS NULL OR lease_expires < :now)), 0),
             coalesce(sum(lease_owner IS NOT NULL AND lease_expires >= :now), 0),
             coalesce(sum(available_at > :now AND lease_owner IS NULL), 0)
           FROM queuey_messages WHERE queue = :queue""",
        {"now": now, "queue": queue},
    ).fetchone()
    return Counts(*(int(v) for v in row))


def _levels(conn: sqlite3.Connection, queue: str | None = None) -> dict[str, list[tuple[int, int]]]:
    """The priority levels that hold rows, with how many, by queue."""
    if queue is None:
        found: Iterable[tuple[str, int, int]] = conn.execute(
            "SELECT queue, priority, n FROM queuey_counts WHERE n > 0"
        )
    else:
        found = conn.execute(
            "SELECT queue, priority, n FROM queuey_counts WHERE queue = ? AND n > 0", (queue,)
        )
    levels: dict[str, list[tuple[int, int]]] = {}
    for name, level, n in found:
        levels.setdefault(name, []).append((int(level), int(n)))
    return levels


def _later(conn: sqlite3.Connection, queue: str, level: int, now: int) -> int:
    # One range of queuey_messages_next (queue, priority, available_at): the index alone.
    return int(
        conn.execute(
            "SELECT count(*) FROM queuey_messages "
            "WHERE queue = ? AND priority = ? AND available_at > ?",
            (queue, level, now),
        ).fetchone()[0]
    )


def _leased(conn: sqlite3.Connection, now: int) -> dict[str, _Leased]:
    # The partial index queuey_messages_owner holds the owned rows only.
    found: dict[str, _Leased] = {}
    for queue, live, expired_due, due, waiting in conn.execute(
        """SELECT queue,
                  coalesce(sum(lease_expires >= :now), 0),
                  coalesce(sum(lease_expires < :now AND available_at <= :now), 0),
                  coalesce(sum(available_at <= :now), 0),
                  coalesce(sum(available_at > :now), 0)
             FROM queuey_messages INDEXED BY queuey_messages_owner
            WHERE lease_owner IS NOT NULL GROUP BY queue""",
        {"now": now},
    ):
        found[queue] = _Leased(int(live), int(expired_due), int(due), int(waiting))
    return found
