"""The tables of a queuey file, and their version.

Owns: the DDL and :data:`SCHEMA_VERSION`. A change to a table is a new version and a
step of :data:`UPGRADES` that :mod:`.database` runs on an older file, in place; a file
of a newer version is refused, never guessed at.

Tables: ``queuey_messages`` (every job waiting, held or leased: a delay is an
``available_at`` in the future, a claim is a lease owner and expiry), ``queuey_dead``
(dead letters, with the information RabbitMQ's ``x-queuey-*`` headers carry),
``queuey_queues`` (declared queues), ``queuey_consumers`` (who consumes what, for
counts), the counts of jobs and dead letters (``queuey_counts``, ``queuey_dead_counts``:
kept by triggers, see :mod:`.counts`), the control channel (``queuey_control_*``) and
the scheduler's (``queuey_schedule_ticks``, ``queuey_leader``), workflows'
(``queuey_workflow*``: :mod:`queuey_core.workflows.tables`), paused queues
(``queuey_paused``: :mod:`.pause_table`), the unique keys jobs hold
(``queuey_unique_keys``, :mod:`queuey_core.flow.unique_keys`) and the limits' state
(``queuey_limit_*``: :mod:`queuey_core.flow.limit_schema`). A job's W3C trace
context is kept beside its body (``traceparent``, ``tracestate``: NULL when untraced),
never in it.
"""

from __future__ import annotations

from queuey_core.backends.sqlite import counts, pause_table
from queuey_core.flow import limit_schema, unique_keys
from queuey_core.workflows.tables import TABLES as WORKFLOW_TABLES

SCHEMA_VERSION = 4

SCHEMA: tuple[str, ...] = (
    "CREATE TABLE queuey_schema (version INTEGER NOT NULL)",
    """CREATE TABLE queuey_queues (
        name TEXT PRIMARY KEY,
        max_priority INTEGER,
        kind TEXT NOT NULL
    )""",
    # id orders FIFO within a priority level and available_at (AUTOINCREMENT: never
    # reused, so a new row never jumps ahead of an old one).
    """CREATE TABLE queuey_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        priority INTEGER NOT NULL,
        available_at INTEGER NOT NULL,
        lease_owner TEXT,
        lease_expires INTEGER,
        claims INTEGER NOT NULL DEFAULT 0,
        deferral INTEGER NOT NULL DEFAULT 0,
        job_id TEXT,
        attempt INTEGER,
        body BLOB NOT NULL,
        traceparent TEXT,
        tracestate TEXT
    )""",
    "CREATE INDEX queuey_messages_next ON queuey_messages (queue, priority DESC, available_at, id)",
    # Partial: a new row (no owner yet) does not touch it, one page less per enqueue.
    "CREATE INDEX queuey_messages_owner ON queuey_messages (lease_owner) "
    "WHERE lease_owner IS NOT NULL",
    """CREATE TABLE queuey_dead (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        handle TEXT NOT NULL,
        reason TEXT NOT NULL,
        dead_at INTEGER NOT NULL,
        attempt INTEGER,
        delivered_from TEXT NOT NULL,
        decodable INTEGER NOT NULL,
        body BLOB NOT NULL,
        traceparent TEXT,
        tracestate TEXT
    )""",
    "CREATE INDEX queuey_dead_queue ON queuey_dead (queue, id)",
    """CREATE TABLE queuey_consumers (
        owner TEXT NOT NULL,
        queue TEXT NOT NULL,
        seen_at INTEGER NOT NULL,
        PRIMARY KEY (owner, queue)
    )""",
    """CREATE TABLE queuey_control_requests (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        body BLOB NOT NULL,
        expires_at INTEGER NOT NULL
    )""",
    """CREATE TABLE queuey_control_replies (
        request_id INTEGER NOT NULL,
        server TEXT NOT NULL,
        body BLOB NOT NULL
    )""",
    "CREATE INDEX queuey_control_replies_request ON queuey_control_replies (request_id)",
    """CREATE TABLE queuey_control_servers (
        server TEXT PRIMARY KEY,
        seen_at INTEGER NOT NULL
    )""",
    """CREATE TABLE queuey_schedule_ticks (
        name TEXT PRIMARY KEY,
        tick_ms INTEGER NOT NULL
    )""",
    """CREATE TABLE queuey_leader (
        name TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    )""",
    # Before the counts: a test of the version-2 upgrade takes SCHEMA less its tail.
    *WORKFLOW_TABLES,
    *counts.SCHEMA,
    *pause_table.SCHEMA,
    *unique_keys.SCHEMA,
    *limit_schema.SCHEMA,
)

#: What turns a file of version ``v - 1`` into version ``v``: the statements of key ``v``.
#: A new file gets :data:`SCHEMA` at once; an older one runs the steps past its version.
UPGRADES: dict[int, tuple[str, ...]] = {
    # Version 2: the trace context beside the body (issue 24). Nullable, so every row
    # of a version-1 file stays as it was: untraced.
    2: tuple(
        f"ALTER TABLE {table} ADD COLUMN {column} TEXT"
        for table in ("queuey_messages", "queuey_dead")
        for column in ("traceparent", "tracestate")
    ),
    # Version 3: counts kept by triggers (issue 41), filled in once from the rows.
    3: counts.SCHEMA + counts.FILL,
    # Version 4: flow control (issue 43) and workflows (issue 44), each part's tables
    # of its own, nothing else touched: paused queues (``queuey_paused``,
    # .pause_table), unique keys, limits, and workflows' rows, members and edges.
    4: (*pause_table.SCHEMA, *unique_keys.SCHEMA, *limit_schema.SCHEMA, *WORKFLOW_TABLES),
}
