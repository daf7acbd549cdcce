"""What a job store on SQL does the same on every database: :class:`SqlJobStore`.

Owns: the retention and when to expire (every :data:`~.sql.EXPIRE_EVERY` events
written), and ``get``, ``search``, ``write`` and ``expire_now`` in terms of the
statements of :mod:`.sql`. A store on one database (:mod:`.sqlite_store`,
:mod:`.postgres_store`) answers only what differs: how a write's transaction and a read
run on its connections, and how its driver's errors become a one-line
:class:`~queuey_core.errors.JobStoreError`.
"""

from __future__ import annotations

import abc
import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from queuey_core.results import sql
from queuey_core.results.records import JobEvent, JobRecord, JobState

T = TypeVar("T")


class SqlJobStore(abc.ABC):
    """The part of a :class:`~queuey_core.results.JobStore` on SQL that is the same on
    every database (see the module docstring)."""

    def __init__(self, dialect: sql.Dialect, *, retention: float) -> None:
        self._dialect = dialect
        self._retention_ms = int(retention * 1000)
        self._written = 0

    # -- what a database answers ------------------------------------------------------

    @abc.abstractmethod
    def _writing(
        self, events: Sequence[JobEvent]
    ) -> contextlib.AbstractContextManager[sql.Execute]:
        """A write transaction with ``events`` applied in it: what else runs in the
        block commits with them. Raises JobStoreError, the batch not written."""

    @abc.abstractmethod
    def _read(self, query: Callable[[sql.Execute], T]) -> T:
        """``query`` run on a connection for reading. Raises JobStoreError."""

    # -- the same on every database ---------------------------------------------------

    def write(self, events: Sequence[JobEvent]) -> None:
        """Apply a batch in one transaction; expire old records every so often."""
        if not events:
            return
        with self._writing(events) as execute:
            if sql.expiry_due(self._written, len(events)):
                sql.expire(execute, self._dialect, _now_ms() - self._retention_ms)
        self._written += len(events)

    def expire_now(self) -> None:
        """Delete what is past the retention now (expiry otherwise runs with writes)."""
        with self._writing(()) as execute:
            sql.expire(execute, self._dialect, _now_ms() - self._retention_ms)

    def get(self, job_id: uuid.UUID | str) -> JobRecord | None:
        """The record of ``job_id``, or None."""
        return self._read(lambda execute: sql.get(execute, self._dialect, str(job_id)))

    def search(
        self,
        *,
        state: JobState | None = None,
        job_type: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """Records matching every filter, most recently updated first."""
        return self._read(
            lambda execute: sql.search(
                execute,
                self._dialect,
                state=state,
                job_type=job_type,
                queue=queue,
                since=since,
                until=until,
                limit=limit,
                offset=offset,
            )
        )


def _now_ms() -> int:
    return int(time.time() * 1000)
