"""Where unique keys are held: one table (or one dict), claimed atomically.

Owns: :class:`UniqueKeys` (the protocol the producer and the worker use), its
statements written once for SQLite and PostgreSQL (:class:`UniqueSql`,
:class:`SqlUniqueKeys` over any transaction that yields a cursor: the embedded file's
own, or a job store's), and :class:`MemoryUniqueKeys` (in process, for the in-memory
backend). A claim is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` on the key's
primary key: of two producers racing for a key, exactly one gets it, on either
database. Must never: let a claim take a key another job holds and has not let go of
(expired or released), or a release let go of a key another job holds.

A row's ``expires_at`` (ms) is when it stops holding: :data:`CLAIM_HOLD` after the
claim until the producer knows the job is published (a producer killed in between
holds the key no longer), then the end of a timed period, or :data:`FOREVER` for a key
held until the worker lets it go. On the embedded file (:class:`FileUniqueKeys`) the
claim, the publish and the keep are one transaction (:class:`ClaimsWithJobs`), so
:data:`CLAIM_HOLD` only ever shows inside it.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: Seconds a claim holds its key before its job is known to be published: longer than
#: any publish can take (RabbitMQ's ``publish_timeout`` and recovery, a file's lock),
#: short enough that a producer killed between claim and publish frees the key soon.
CLAIM_HOLD = 300.0
#: The ``expires_at`` of a key held until a worker lets it go.
FOREVER = 2**62
#: The table, in the embedded file and in a job store.
TABLE = "queuey_unique_keys"
#: Rows past their time deleted every this many claims.
SWEEP_EVERY = 1000


@dataclass(frozen=True, slots=True)
class Claim:
    """One job's claim of one key.

    ``expires_at``: when the key frees itself once the job is published, in ms (None:
    when a worker lets it go). ``retry_ok``: a claim by the job that already holds the key
    succeeds (a retry after an unknown outcome); false for a job-id key, whose second
    enqueue is the duplicate it guards against.
    """

    key: str
    job_id: str
    expires_at: int | None
    retry_ok: bool = True


@dataclass(frozen=True, slots=True)
class HeldKey:
    """A key held now: by ``job_id``, until ``expires_at`` (ms; None: until a worker
    lets it go)."""

    key: str
    job_id: str
    expires_at: int | None

    @classmethod
    def of_row(cls, key: str, job_id: str, expires_at: int) -> HeldKey:
        """A held key from its stored row (:data:`FOREVER`: until let go)."""
        return cls(str(key), str(job_id), None if expires_at >= FOREVER else int(expires_at))


@runtime_checkable
class UniqueKeys(Protocol):
    """Claims, keeps and lets go of unique keys; every method is one transaction."""

    def claim(self, claims: Sequence[Claim], now_ms: int) -> dict[int, str]:
        """Claim every key, in order, for :data:`CLAIM_HOLD`; the refused ones: index
        in ``claims`` -> the id of the job that holds the key."""

    def keep(self, claims: Sequence[Claim], now_ms: int) -> None:
        """The jobs are (or may be) published: hold their keys for their period."""

    def give_back(self, claims: Sequence[Claim]) -> None:
        """The jobs were surely not published: let go of the keys they hold."""

    def release(self, keys: Sequence[tuple[str, str]]) -> None:
        """Let go of each ``(key, job_id)`` if that job still holds it."""

    def held(self, now_ms: int) -> int:
        """How many keys are held now."""

    def holding(self, now_ms: int, *, job_id: str | None = None, limit: int = 100) -> list[HeldKey]:
        """The keys held now (by ``job_id`` only, if given), at most ``limit``, by key."""

    def let_go(self, job_id: str) -> list[str]:
        """Let go of every key ``job_id`` holds, whatever its period (an operator's
        act, for a job that is gone); the keys let go."""


class _Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> Any: ...


class UniqueSql:
    """The statements of one dialect (the constructor of
    :class:`~queuey_core.results.dead_letter_sql.Sql`, so a job store's connections
    can be opened for it)."""

    def __init__(self, *, prefix: str = "", placeholder: str = "?", postgres: bool = False) -> None:
        self.table = f"{prefix}{TABLE}"
        self.postgres = postgres
        p = placeholder
        self.upsert = (
            f"INSERT INTO {self.table} AS t (key, job_id, expires_at) VALUES ({p}, {p}, {p}) "
            "ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, "
            f"expires_at = excluded.expires_at WHERE t.expires_at <= {p} "
            f"OR ({p} = 1 AND t.job_id = excluded.job_id) RETURNING job_id"
        )
        self.holder = f"SELECT job_id FROM {self.table} WHERE key = {p}"
        self.keep = f"UPDATE {self.table} SET expires_at = {p} WHERE key = {p} AND job_id = {p}"
        self.release = f"DELETE FROM {self.table} WHERE key = {p} AND job_id = {p}"
        self.sweep = f"DELETE FROM {self.table} WHERE expires_at <= {p}"
        self.count = f"SELECT COUNT(*) FROM {self.table} WHERE expires_at > {p}"
        held = f"SELECT key, job_id, expires_at FROM {self.table} WHERE expires_at > {p}"
        self.holding = f"{held} ORDER BY key LIMIT {p}"
        self.holding_of = f"{held} AND job_id = {p} ORDER BY key LIMIT {p}"
        self.let_go = f"DELETE FROM {self.table} WHERE job_id = {p} RETURNING key"

    def ddl(self) -> list[str]:
        """The table, made if missing (a job store's; the file's is :data:`SCHEMA`)."""
        return [_create(self.table, if_missing=True)]


def _create(table: str, *, if_missing: bool) -> str:
    exists = "IF NOT EXISTS " if if_missing else ""
    return (
        f"CREATE TABLE {exists}{table} (key TEXT PRIMARY KEY, job_id TEXT NOT NULL, "
        "expires_at BIGINT NOT NULL)"
    )


#: The embedded file's table (schema version 4: queuey_core/backends/sqlite/schema.py).
SCHEMA: tuple[str, ...] = (_create(TABLE, if_missing=False),)


class SqlUniqueKeys:
    """:class:`UniqueKeys` on SQL: ``transaction`` opens one transaction and yields a
    cursor (a DB-API one, or a sqlite3 connection, which executes the same way)."""

    def __init__(
        self,
        transaction: Callable[[], contextlib.AbstractContextManager[Any]],
        sql: UniqueSql,
        *,
        close: Callable[[], None] | None = None,
        reading: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self._transaction = transaction
        # What only reads (a listing, a count): the file's read transactions, which take
        # no write lock (a file another process holds locked can still be listed).
        self._reading = reading or transaction
        self._sql = sql
        self._close = close
        self._claims = 0

    @classmethod
    def of_file(
        cls,
        write: Callable[[], contextlib.AbstractContextManager[Any]],
        closed: Callable[[], bool],
        together: Callable[[Sequence[uuid.UUID]], contextlib.AbstractContextManager[object]],
        read: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> FileUniqueKeys:
        """The embedded backend's: its file's ``write`` transactions, refused as a
        publish is (NotEnqueuedError, ``closed``) once the backend is ``closed()``;
        ``together``: see :class:`ClaimsWithJobs`; ``read``: its read transactions."""

        def transaction() -> contextlib.AbstractContextManager[Any]:
            if closed():
                from queuey_core.errors import NotEnqueuedError, PublishFailure  # noqa: PLC0415

                raise NotEnqueuedError("the backend is closed", reason=PublishFailure.CLOSED)
            return write()

        return FileUniqueKeys(transaction, UniqueSql(), together=together, reading=read)

    def claim(self, claims: Sequence[Claim], now_ms: int) -> dict[int, str]:
        refused: dict[int, str] = {}
        if not claims:
            return refused
        sql = self._sql
        expires = now_ms + int(CLAIM_HOLD * 1000)
        with self._transaction() as cur:
            if self._claims // SWEEP_EVERY != (self._claims + len(claims)) // SWEEP_EVERY:
                cur.execute(sql.sweep, (now_ms,))
            # In the keys' order: two batches claiming the same keys in other orders
            # would each hold a row the other waits for (PostgreSQL: a deadlock).
            for i, c in sorted(enumerate(claims), key=lambda ic: (ic[1].key, ic[0])):
                got = cur.execute(sql.upsert, (c.key, c.job_id, expires, now_ms, int(c.retry_ok)))
                row = (got if got is not None else cur).fetchone()
                if row is None:
                    held = cur.execute(sql.holder, (c.key,))
                    refused[i] = str((held if held is not None else cur).fetchone()[0])
        self._claims += len(claims)
        return refused

    def keep(self, claims: Sequence[Claim], now_ms: int) -> None:
        if claims:
            with self._transaction() as cur:
                for c in sorted(claims, key=lambda c: c.key):  # see claim()
                    cur.execute(self._sql.keep, (_expiry(c, now_ms), c.key, c.job_id))

    def give_back(self, claims: Sequence[Claim]) -> None:
        self.release([(c.key, c.job_id) for c in claims])

    def release(self, keys: Sequence[tuple[str, str]]) -> None:
        if keys:
            with self._transaction() as cur:
                for key, job_id in sorted(keys):  # see claim()
                    cur.execute(self._sql.release, (key, job_id))

    def held(self, now_ms: int) -> int:
        with self._reading() as cur:
            got = cur.execute(self._sql.count, (now_ms,))
            return int((got if got is not None else cur).fetchone()[0])

    def holding(self, now_ms: int, *, job_id: str | None = None, limit: int = 100) -> list[HeldKey]:
        sql = self._sql
        with self._reading() as cur:
            if job_id is None:
                got = cur.execute(sql.holding, (now_ms, limit))
            else:
                got = cur.execute(sql.holding_of, (now_ms, job_id, limit))
            rows = (got if got is not None else cur).fetchall()
        return [HeldKey.of_row(*row) for row in rows]

    def let_go(self, job_id: str) -> list[str]:
        with self._transaction() as cur:
            got = cur.execute(self._sql.let_go, (job_id,))
            return sorted(str(row[0]) for row in (got if got is not None else cur).fetchall())

    def close(self) -> None:
        """Close the connections this store opened itself (a job store's)."""
        if self._close is not None:
            self._close()


@runtime_checkable
class ClaimsWithJobs(Protocol):
    """Keys kept in the jobs' own database (the embedded file): the claims of a
    publish, the publish and the keeping of its keys are one transaction, so that no key
    is held by a job that is not there, whatever interrupts the producer."""

    def together(self, job_ids: Sequence[uuid.UUID]) -> contextlib.AbstractContextManager[object]:
        """One transaction around claiming, publishing the jobs ``job_ids`` (synchronously:
        their rows are written in it) and keeping their keys: anything raised in it rolls
        it all back; its end raises what a publish's commit would (NotEnqueuedError, or
        EnqueueUnknownError when the commit may have happened)."""


class FileUniqueKeys(SqlUniqueKeys):
    """The embedded file's keys: :class:`SqlUniqueKeys` and :class:`ClaimsWithJobs`."""

    def __init__(
        self,
        transaction: Callable[[], contextlib.AbstractContextManager[Any]],
        sql: UniqueSql,
        *,
        together: Callable[[Sequence[uuid.UUID]], contextlib.AbstractContextManager[object]],
        reading: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> None:
        super().__init__(transaction, sql, reading=reading)
        self._together = together

    def together(self, job_ids: Sequence[uuid.UUID]) -> contextlib.AbstractContextManager[object]:
        """See :class:`ClaimsWithJobs`."""
        return self._together(job_ids)


class MemoryUniqueKeys:
    """:class:`UniqueKeys` in a dict, under a lock: the in-memory backend's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[str, int]] = {}

    def claim(self, claims: Sequence[Claim], now_ms: int) -> dict[int, str]:
        refused: dict[int, str] = {}
        expires = now_ms + int(CLAIM_HOLD * 1000)
        with self._lock:
            for i, c in enumerate(claims):
                row = self._rows.get(c.key)
                if row is None or row[1] <= now_ms or (c.retry_ok and row[0] == c.job_id):
                    self._rows[c.key] = (c.job_id, expires)
                else:
                    refused[i] = row[0]
        return refused

    def keep(self, claims: Sequence[Claim], now_ms: int) -> None:
        with self._lock:
            for c in claims:
                if self._rows.get(c.key, ("", 0))[0] == c.job_id:
                    self._rows[c.key] = (c.job_id, _expiry(c, now_ms))

    def give_back(self, claims: Sequence[Claim]) -> None:
        self.release([(c.key, c.job_id) for c in claims])

    def release(self, keys: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            for key, job_id in keys:
                if self._rows.get(key, ("", 0))[0] == job_id:
                    del self._rows[key]

    def held(self, now_ms: int) -> int:
        with self._lock:
            return sum(1 for _, expires in self._rows.values() if expires > now_ms)

    def holding(self, now_ms: int, *, job_id: str | None = None, limit: int = 100) -> list[HeldKey]:
        with self._lock:
            rows = sorted(
                (key, holder, expires)
                for key, (holder, expires) in self._rows.items()
                if expires > now_ms and job_id in (None, holder)
            )
        return [HeldKey.of_row(*row) for row in rows[:limit]]

    def let_go(self, job_id: str) -> list[str]:
        with self._lock:
            keys = sorted(k for k, (holder, _) in self._rows.items() if holder == job_id)
            for key in keys:
                del self._rows[key]
        return keys


def _expiry(claim: Claim, now_ms: int) -> int:
    return FOREVER if claim.expires_at is None else claim.expires_at
