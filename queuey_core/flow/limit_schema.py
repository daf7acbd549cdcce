"""The tables that hold limits' state, in a queuey file or beside a job store.

``queuey_limit_rates`` (each rate limit's theoretical arrival time of starts, and its
next free booking, per key: :mod:`.rate`),
``queuey_limit_slots`` (each running or released job's slot of a concurrency limit: its
holder and lease), ``queuey_limit_reservations`` (the time a waiting job was booked
for by its rate limits) and ``queuey_limit_parked`` (jobs waiting for a slot, with their
envelope, in the order they will be let go).

Owns: the DDL, for SQLite and PostgreSQL. Must never: hold statements that run per
job (:mod:`.limit_state` does).
"""

from __future__ import annotations


def ddl(prefix: str = "", blob: str = "BLOB") -> tuple[str, ...]:
    """The statements that create the tables (idempotent), ``prefix`` before each table
    name (a PostgreSQL schema) and ``blob`` the type of bytes."""
    p = prefix
    return (
        f"""CREATE TABLE IF NOT EXISTS {p}queuey_limit_rates (
            limit_name TEXT NOT NULL,
            key TEXT NOT NULL,
            tat BIGINT NOT NULL,
            book BIGINT,
            PRIMARY KEY (limit_name, key)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {p}queuey_limit_slots (
            limit_name TEXT NOT NULL,
            key TEXT NOT NULL,
            job_id TEXT NOT NULL,
            holder TEXT NOT NULL,
            expires BIGINT NOT NULL,
            PRIMARY KEY (limit_name, job_id)
        )""",
        f"CREATE INDEX IF NOT EXISTS queuey_limit_slots_key ON {p}queuey_limit_slots "
        "(limit_name, key)",
        f"CREATE INDEX IF NOT EXISTS queuey_limit_slots_job ON {p}queuey_limit_slots (job_id)",
        f"""CREATE TABLE IF NOT EXISTS {p}queuey_limit_reservations (
            job_id TEXT PRIMARY KEY,
            at_ms BIGINT NOT NULL
        )""",
        # Ordered as the job's queue would have run them: priority, then arrival here
        # (seq: one more than the largest, taken under the store's write lock).
        f"""CREATE TABLE IF NOT EXISTS {p}queuey_limit_parked (
            job_id TEXT PRIMARY KEY,
            limit_name TEXT NOT NULL,
            key TEXT NOT NULL,
            queue TEXT NOT NULL,
            priority INTEGER NOT NULL,
            enqueued_at BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            body {blob} NOT NULL,
            released_at BIGINT
        )""",
        f"CREATE INDEX IF NOT EXISTS queuey_limit_parked_next ON {p}queuey_limit_parked "
        "(limit_name, key, priority DESC, seq)",
        f"CREATE INDEX IF NOT EXISTS queuey_limit_parked_seq ON {p}queuey_limit_parked (seq)",
    )


#: The tables in a queuey file (schema version 4, :mod:`queuey_core.backends.sqlite.schema`).
SCHEMA: tuple[str, ...] = ddl()
