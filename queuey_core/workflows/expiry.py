"""Finished workflows leave: their rows deleted after a retention, in batches.

Owns: the statement that deletes the oldest finished workflows (succeeded, failed,
cancelled) with their members and edges (:func:`expire`, in a transaction the caller
opened, as :mod:`.sql`'s transitions are), so that a store of workflows does not grow
without bound. Must never: delete a running workflow, however old (its members may
still end), nor a member of a workflow that stays.
"""

from __future__ import annotations

from typing import Any

from queuey_core.workflows.tables import CANCELLED, FAILED, SUCCEEDED, Sql


def expire(cur: Any, sql: Sql, before: int, limit: int) -> int:
    """Delete up to ``limit`` finished workflows (succeeded, failed, cancelled) last
    changed before ``before`` (ms), with their members and edges; how many. A running
    workflow is never expired, however old."""
    cur.execute(
        sql(
            "SELECT workflow_id FROM {w} WHERE updated_at < ? AND state IN (?, ?, ?) "
            "ORDER BY updated_at LIMIT ?"
        ),
        [before, SUCCEEDED, FAILED, CANCELLED, limit],
    )
    ids = [str(r[0]) for r in cur.fetchall()]
    if not ids:
        return 0
    marks = ", ".join("?" * len(ids))
    cur.execute(
        sql(
            f"DELETE FROM {{e}} WHERE child IN "
            f"(SELECT job_id FROM {{m}} WHERE workflow_id IN ({marks}))"
        ),
        ids,
    )
    cur.execute(sql(f"DELETE FROM {{m}} WHERE workflow_id IN ({marks})"), ids)
    cur.execute(sql(f"DELETE FROM {{w}} WHERE workflow_id IN ({marks})"), ids)
    return len(ids)
