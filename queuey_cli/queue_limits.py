"""What ``queuey queues`` shows of rate and concurrency limits: per queue, the limits
that bind its jobs, the jobs they hold out of it (parked), and their keys in use
(:func:`queuey_core.flow.limit_listing.read_queue_limits`).

A listing of queues must not fail because of limits: a state that cannot be read (no
store on RabbitMQ, the store out of reach, a plugin that does not load) is one note,
and the queues' counts are shown all the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queuey_cli.output import Column

if TYPE_CHECKING:
    from queuey_core.flow.limit_listing import QueueLimits
    from queuey_core.settings import Settings

#: The queues table's column of jobs parked behind a limit (only when limits exist).
HELD_COLUMN = Column("held by limits", "held_by_limits")

KEY_COLUMNS = [
    Column("queue", "queue"),
    Column("limit", "limit"),
    Column("key", "key"),
    Column("running", "running"),
    Column("let go", "reserved"),
    Column("parked", "parked"),
    Column("next start in", "next_start_in"),
]


def read_limits(settings: Settings, names: list[str]) -> tuple[dict[str, QueueLimits], str | None]:
    """The limits of each queue of ``names`` ({} when none is declared), or why they
    cannot be read."""
    # Here, not at the top: `queuey queues --help` loads neither flow nor the plugins.
    from queuey_core.errors import QueueyError  # noqa: PLC0415
    from queuey_core.flow.limit_listing import read_queue_limits  # noqa: PLC0415
    from queuey_core.handlers import discover  # noqa: PLC0415

    try:
        # With the job types plugins register: limits declared on a job class count too.
        job_types = [d.handler.job_type for d in discover()]
        return read_queue_limits(settings, names, job_types), None
    except QueueyError as exc:
        return {}, str(exc)


def limit_fields(limited: dict[str, QueueLimits], error: str | None, queue: str) -> dict[str, Any]:
    """A queue's ``--json`` fields of limits (null counts when they cannot be read)."""
    if error is not None:
        return {"limits": None, "held_by_limits": None, "limited_keys": None}
    found = limited.get(queue)
    if found is None:
        return {"limits": [], "held_by_limits": 0, "limited_keys": []}
    return found.record()


def key_cells(records: list[dict[str, Any]]) -> list[list[object]]:
    """A row a queue, limit and key in use, for the "limited keys" table."""
    rows: list[list[object]] = []
    for record in records:
        for key in record["limited_keys"] or ():
            row = {**key, "queue": record["name"]}
            rows.append([row[c.name] for c in KEY_COLUMNS])
    return rows


def key_notes(rows: list[list[object]]) -> list[str]:
    """The same rows as lines of text (under a listing that is not a terminal's)."""
    return [
        f"limited key: queue {queue}, limit {limit}, key {key!r}: {running} running, "
        f"{let_go} let go, {parked} parked, next start in {due or '-'}"
        for queue, limit, key, running, let_go, parked, due in rows
    ]
