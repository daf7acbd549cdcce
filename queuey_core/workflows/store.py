"""Where workflows are kept: the embedded file, or the job store (SQLite or PostgreSQL).

Owns: :class:`WorkflowStore` and :func:`open_workflow_store`. Every transition is
:mod:`.sql`'s, in one transaction of the store's connections
(:mod:`queuey_core.results.sql_connections`: every database error a one-line
:class:`~queuey_core.errors.JobStoreError` with no password in it). Must never: hold
a transaction across a publish (the outbox is written in one, published after it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queuey_core.errors import ConfigError
from queuey_core.results.sql_connections import SqlConnections, open_sql
from queuey_core.workflows import expiry, sql
from queuey_core.workflows.sql import Ending, NewMember
from queuey_core.workflows.tables import Sql, tables


class WorkflowStore:
    """The workflows of one job store; thread-safe. Connected on first use."""

    def __init__(self, db: SqlConnections) -> None:
        self._db = db
        self._sql = Sql(prefix=db.prefix, postgres=db.postgres)
        #: How this store's database spells a statement on the tables (for readers).
        self.sql = self._sql
        self.shown = db.shown
        self.transaction = db.transaction

    def close(self) -> None:
        """Close every connection; idempotent."""
        self._db.close()

    # -- operations --------------------------------------------------------------------

    def create(
        self,
        workflow_id: str,
        name: str,
        on_failure: str,
        members: Sequence[NewMember],
        now: int,
    ) -> list[tuple[str, str]]:
        """Write a workflow; the envelopes of its first members, now in the outbox."""
        with self.transaction() as cur:
            return sql.create(cur, self._sql, workflow_id, name, on_failure, members, now)

    def started(self, job_id: str, now: int) -> tuple[int, bool] | None:
        """Count a member's start (:func:`.sql.started`)."""
        with self.transaction() as cur:
            return sql.started(cur, self._sql, job_id, now)

    def ended(
        self, job_id: str, *, outcome: str, result: str | None, error: str, now: int
    ) -> Ending:
        """Record a member's end in one transaction (:func:`.sql.ended`)."""
        with self.transaction() as cur:
            return sql.ended(
                cur, self._sql, job_id, outcome=outcome, result=result, error=error, now=now
            )

    def mark_sent(self, job_ids: Sequence[str]) -> None:
        """Outbox rows published."""
        if job_ids:
            with self.transaction() as cur:
                sql.mark_sent(cur, self._sql, job_ids)

    def unsent(self, before: int, limit: int = 1000) -> list[tuple[str, str]]:
        """Outbox rows made ready before ``before`` (ms), not yet marked sent."""
        with self.transaction() as cur:
            return sql.unsent(cur, self._sql, before, limit)

    def cancel(self, workflow_id: str, now: int) -> list[str] | None:
        """Cancel a workflow; the job ids published and not started (None: unknown)."""
        with self.transaction() as cur:
            return sql.cancel(cur, self._sql, workflow_id, now)

    def expire(self, before: int, *, batch: int = 100, batches: int = 50) -> int:
        """Delete finished workflows last changed before ``before`` (ms), ``batch`` in
        each transaction, at most ``batches`` transactions; how many went."""
        gone = 0
        for _ in range(batches):
            with self.transaction() as cur:
                went = expiry.expire(cur, self._sql, before, batch)
            gone += went
            if went < batch:
                break
        return gone

    def read(self, workflow_id: str) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]] | None:
        """The workflow row and its member rows (:func:`.sql.workflow`, :func:`.sql.members`)."""
        with self.transaction() as cur:
            found = sql.workflow(cur, self._sql, workflow_id)
            if found is None:
                return None
            return found, sql.members(cur, self._sql, workflow_id)


def open_workflow_store(url: str) -> WorkflowStore:
    """The workflows of the job store ``url`` names (``sqlite:///path``, the embedded
    backend's own file included, or ``postgresql://...?schema=NAME``), connected on
    first use.

    Raises:
        ConfigError: a store that cannot hold workflows (``memory://``), or a
            postgresql:// URL without psycopg installed.
    """
    scheme = url.partition("://")[0].lower()
    if scheme not in ("sqlite", "postgresql", "postgres"):
        raise ConfigError(
            f"workflows cannot be kept in a {scheme}:// job store: use sqlite:/// or postgresql://"
        )
    return WorkflowStore(
        open_sql(url, _ddl, application_name="queuey workflows", label="workflow store")
    )


def _ddl(prefix: str, postgres: bool) -> tuple[str, ...]:
    # A SQLite store is a queuey file: its schema (4) holds the tables already.
    return tables(prefix) if postgres else ()
