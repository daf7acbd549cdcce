"""The tables that hold workflows, their states, and how each database spells them.

Owns: the DDL (:data:`TABLES`: the embedded file's schema 4 holds it; a PostgreSQL job
store makes it with :func:`tables` under its schema), the names of member and workflow
states, and :class:`Sql`. No statement runs here (:mod:`.sql` has the transitions).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Member states. ``waiting``: dependencies unfinished; ``ready``: in the outbox;
#: ``sent``: published; ``started``: a handler took it; ``halted``: held by a failure
#: (policy ``cancel``); ``failed``: dead-lettered (a requeue can still revive it).
WAITING, READY, SENT, STARTED, SUCCEEDED, FAILED, CANCELLED, HALTED = (
    "waiting",
    "ready",
    "sent",
    "started",
    "succeeded",
    "failed",
    "cancelled",
    "halted",
)
#: Workflow states.
RUNNING = "running"
#: A member's role: one of the workflow's, or its error callback (which never counts
#: towards the workflow's end).
MEMBER, ON_ERROR = "member", "on_error"


def tables(prefix: str = "") -> tuple[str, ...]:
    """The DDL, each table name after ``prefix`` (a PostgreSQL schema's ``"name".``)."""
    w, m, e = (f"{prefix}{t}" for t in ("queuey_workflows", _MEMBERS, _EDGES))
    return (
        f"""CREATE TABLE IF NOT EXISTS {w} (
            workflow_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            state TEXT NOT NULL,
            on_failure TEXT NOT NULL,
            members INTEGER NOT NULL,
            succeeded INTEGER NOT NULL DEFAULT 0,
            dead INTEGER NOT NULL DEFAULT 0,
            error TEXT NOT NULL DEFAULT '',
            created_at BIGINT NOT NULL,
            started_at BIGINT,
            updated_at BIGINT NOT NULL
        )""",
        f"""CREATE TABLE IF NOT EXISTS {m} (
            job_id TEXT PRIMARY KEY,
            workflow_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            job_type TEXT NOT NULL,
            state TEXT NOT NULL,
            waiting INTEGER NOT NULL,
            receives TEXT,
            takes TEXT NOT NULL,
            envelope TEXT NOT NULL,
            result TEXT,
            error TEXT NOT NULL DEFAULT '',
            starts INTEGER NOT NULL DEFAULT 0,
            ready_at BIGINT
        )""",
        # Expiry reads the oldest finished workflows first.
        f"CREATE INDEX IF NOT EXISTS queuey_workflows_updated ON {w} (updated_at)",
        f"CREATE INDEX IF NOT EXISTS queuey_workflow_members_workflow ON {m} "
        "(workflow_id, position)",
        # Partial: the outbox's sweep reads only what is waiting to be published.
        f"CREATE INDEX IF NOT EXISTS queuey_workflow_members_outbox ON {m} (ready_at) "
        f"WHERE state = '{READY}'",
        f"""CREATE TABLE IF NOT EXISTS {e} (
            parent TEXT NOT NULL,
            child TEXT NOT NULL,
            position INTEGER NOT NULL,
            PRIMARY KEY (parent, child)
        )""",
        f"CREATE INDEX IF NOT EXISTS queuey_workflow_edges_child ON {e} (child, position)",
    )


_MEMBERS = "queuey_workflow_members"
_EDGES = "queuey_workflow_edges"

#: The embedded file's tables (schema version 4: queuey_core/backends/sqlite/schema.py).
TABLES = tables()


@dataclass(frozen=True, slots=True)
class Sql:
    """How one database names the tables and spells placeholders and row locks."""

    prefix: str = ""
    postgres: bool = False

    def __call__(self, text: str) -> str:
        text = (
            text.replace("{w}", f"{self.prefix}queuey_workflows")
            .replace("{m}", f"{self.prefix}{_MEMBERS}")
            .replace("{e}", f"{self.prefix}{_EDGES}")
            # SQLite's BEGIN IMMEDIATE already holds the whole file.
            .replace("{lock}", " FOR UPDATE" if self.postgres else "")
        )
        return text.replace("?", "%s") if self.postgres else text

    def ddl(self) -> tuple[str, ...]:
        return tables(self.prefix)
