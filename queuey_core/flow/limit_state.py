"""Admission under limits, in one transaction of the state store: take all or nothing.

:class:`LimitState` runs each step as one transaction on a :class:`Connector` (an
in-process SQLite database for the in-memory backend, the embedded backend's file, or
the job store's SQLite file or PostgreSQL schema), so the same statements decide on
every backend and across every process that shares the store.

A job asks once, after its payload is decoded:

* it was parked and not yet let go: it is a second delivery of a parked job (a crash
  between the park and the ack), and is only acked (``PARKED``);
* it holds a slot that another live worker holds for it: that worker still runs it (it
  lost the broker, which delivered the job again), and this copy waits until the slot's
  lease would run out (it takes the slot over then, or after that run gave it back);
* it holds a rate reservation not yet due: it came back early, and waits for it again;
* a concurrency limit of its key is full (a slot reserved for this job counts as its
  own): it is *parked* (its envelope kept here, ordered by priority then arrival) and
  takes nothing; a settle that frees a slot of that key lets the first parked job go,
  reserving the slot for it;
* a rate limit of its key is not due: it is booked for the time it will be (GCRA on
  starts, with bookings: :mod:`.rate`) and waits in the broker until then (``WAIT``),
  taking no slot;
* else it takes a slot of each concurrency limit (leased to its worker, renewed while it
  runs) and its reserved or current rate tokens: ``ADMITTED``.

Owns: those statements and the order of parked jobs. Must never: publish or settle (the
gate in :mod:`.limit_gate` does, after the transaction commits: park first, ack second;
let go first, publish second, forget third), or let a job start when a limit of its
key is full.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from queuey_core.flow.limit_spec import LimitBook, LimitSpec
from queuey_core.flow.rate import Cell, Meter, Step, decide

#: A statement run in a transaction: rows it returns (none for a write).
Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]

#: How long a slot stays taken after its holder's last renewal: a worker killed with
#: ``kill -9`` gives its slots back this long after its last heartbeat at most.
SLOT_LEASE_MS = 15_000
#: How often a worker renews its slots and looks for slots others gave back or lost.
SWEEP_EVERY_MS = 1_000
#: How long a slot reserved for a parked job that was let go waits for that job to come
#: back through its queue (behind whatever the queue holds) before others may take it.
RELEASE_HOLD_MS = 300_000
#: A parked job let go whose publish was not confirmed this long after is published
#: again (the worker that let it go died, or its broker refused).
REPUBLISH_AFTER_MS = 30_000
#: A rate reservation whose job never came back is forgotten this long after it was due.
RESERVATION_KEPT_MS = 3_600_000
#: Parked jobs read past the next ones let go, to let go in the order they were
#: enqueued: job threads park at once in any order, so park order is arrival order but
#: for jobs parked in the same instant (a worker's concurrency, several workers').
PARK_ORDER_WINDOW = 32


class Connector(Protocol):
    """Where the state is: one transaction at a time, exclusive for writing."""

    #: Where the tables' names start (a PostgreSQL schema), and the placeholder.
    prefix: str
    placeholder: str

    def transaction(self) -> contextlib.AbstractContextManager[Execute]:
        """A write transaction; raises :class:`~queuey_core.errors.LimitStateError`."""

    def close(self) -> None:
        """Close the connections; idempotent."""


class Verdict(enum.Enum):
    """What a job asking to start is told."""

    ADMITTED = "admitted"  # run it; release() at its settle
    WAIT = "wait"  # defer it until ``until_ms``: its rate tokens are reserved
    PARKED = "parked"  # ack it: its envelope is kept here until a slot frees


@dataclass(frozen=True, slots=True)
class Claim:
    """One limit a job counts against, and its key."""

    spec: LimitSpec
    key: str


@dataclass(frozen=True, slots=True)
class LetGo:
    """A parked job let go: to be published to ``queue`` again, then forgotten."""

    job_id: str
    queue: str
    body: bytes
    limit: str = ""  # the concurrency limit it was parked behind


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to :meth:`LimitState.acquire`, and the parked jobs it let go."""

    verdict: Verdict
    until_ms: int = 0
    limit: str = ""
    let_go: tuple[LetGo, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyCount:
    """What ``queuey limits`` shows of one limit and key."""

    limit: str
    key: str
    running: int = 0
    reserved: int = 0  # slots held for parked jobs let go, not yet back
    parked: int = 0
    next_due_ms: int | None = None  # when the next job may start under the rate


@dataclass
class _Job:
    """A job asking: what :meth:`LimitState.acquire` needs to know of it."""

    job_id: str
    queue: str
    priority: int
    enqueued_at: int
    body: Callable[[], bytes]
    claims: tuple[Claim, ...] = field(default=())


class LimitState:
    """The limits' state on one :class:`Connector` (see the module docstring)."""

    def __init__(self, connector: Connector, book: LimitBook) -> None:
        self._c = connector
        self._book = book
        self._q = self._statements(connector.prefix, connector.placeholder)

    @staticmethod
    def _statements(p: str, ph: str) -> dict[str, str]:
        s = {
            "parked": f"SELECT released_at FROM {p}queuey_limit_parked WHERE job_id = ?",
            "unpark": f"DELETE FROM {p}queuey_limit_parked WHERE job_id = ?",
            "reservation": f"SELECT at_ms FROM {p}queuey_limit_reservations WHERE job_id = ?",
            "unreserve": f"DELETE FROM {p}queuey_limit_reservations WHERE job_id = ?",
            "reserve": f"INSERT INTO {p}queuey_limit_reservations (job_id, at_ms) VALUES (?, ?) "
            "ON CONFLICT (job_id) DO UPDATE SET at_ms = excluded.at_ms",
            "holders": f"SELECT job_id FROM {p}queuey_limit_slots WHERE limit_name = ? AND key = ?",
            "own_slots": f"SELECT limit_name, key FROM {p}queuey_limit_slots WHERE job_id = ?",
            "own_slot": f"SELECT holder, expires FROM {p}queuey_limit_slots "
            "WHERE limit_name = ? AND job_id = ?",
            "free_own": f"DELETE FROM {p}queuey_limit_slots WHERE job_id = ?",
            "take": f"INSERT INTO {p}queuey_limit_slots "
            "(limit_name, key, job_id, holder, expires) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (limit_name, job_id) DO UPDATE "
            "SET key = excluded.key, holder = excluded.holder, expires = excluded.expires",
            "park": f"INSERT INTO {p}queuey_limit_parked "
            "(job_id, limit_name, key, queue, priority, enqueued_at, seq, body) "
            "SELECT ?, ?, ?, ?, ?, ?, COALESCE(MAX(seq), 0) + 1, ? "
            # (WHERE: SQLite's upsert after a SELECT needs one to parse.)
            f"FROM {p}queuey_limit_parked WHERE 1 = 1 ON CONFLICT (job_id) DO NOTHING",
            "meter": f"SELECT tat, book FROM {p}queuey_limit_rates "
            "WHERE limit_name = ? AND key = ?",
            "set_meter": f"INSERT INTO {p}queuey_limit_rates (limit_name, key, tat, book) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (limit_name, key) "
            "DO UPDATE SET tat = excluded.tat, book = excluded.book",
            "next_parked": f"SELECT job_id, queue, body, priority, enqueued_at, seq "
            f"FROM {p}queuey_limit_parked "
            "WHERE limit_name = ? AND key = ? AND released_at IS NULL "
            "ORDER BY priority DESC, seq LIMIT ?",
            "let_go": f"UPDATE {p}queuey_limit_parked SET released_at = ? WHERE job_id = ?",
            "renew": f"UPDATE {p}queuey_limit_slots SET expires = ? WHERE holder = ?",
            "expired": f"SELECT DISTINCT limit_name, key FROM {p}queuey_limit_slots "
            "WHERE expires < ?",
            "drop_expired": f"DELETE FROM {p}queuey_limit_slots WHERE expires < ?",
            "stale": f"SELECT job_id, queue, body, limit_name FROM {p}queuey_limit_parked "
            "WHERE released_at IS NOT NULL AND released_at < ?",
            "waiting_keys": f"SELECT DISTINCT limit_name, key FROM {p}queuey_limit_parked "
            "WHERE released_at IS NULL",
            "old_tats": f"DELETE FROM {p}queuey_limit_rates "
            "WHERE tat < ? AND (book IS NULL OR book < ?)",
            "old_reservations": f"DELETE FROM {p}queuey_limit_reservations WHERE at_ms < ?",
            "count_slots": f"SELECT limit_name, key, holder = '', COUNT(*) "
            f"FROM {p}queuey_limit_slots GROUP BY limit_name, key, holder = ''",
            "count_parked": f"SELECT limit_name, key, COUNT(*) FROM {p}queuey_limit_parked "
            "WHERE released_at IS NULL GROUP BY limit_name, key",
            "all_tats": f"SELECT limit_name, key, tat, book FROM {p}queuey_limit_rates",
            "count_parked_queues": f"SELECT queue, limit_name, COUNT(*) "
            f"FROM {p}queuey_limit_parked WHERE released_at IS NULL GROUP BY queue, limit_name",
        }
        return {name: text.replace("?", ph) for name, text in s.items()}

    def _run(self, execute: Execute, name: str, *params: Any) -> list[tuple[Any, ...]]:
        return execute(self._q[name], params)

    # -- a job asks, a job ends -------------------------------------------------------

    def acquire(
        self,
        job_id: str,
        claims: tuple[Claim, ...],
        *,
        holder: str,
        now_ms: int,
        queue: str,
        priority: int,
        enqueued_at: int,
        body: Callable[[], bytes],
    ) -> Admission:
        """Decide whether the job may start now (see the module docstring), in one
        transaction. Raises :class:`~queuey_core.errors.LimitStateError`."""
        with self._c.transaction() as execute:
            return self._acquire(
                execute, _Job(job_id, queue, priority, enqueued_at, body, claims), holder, now_ms
            )

    def _acquire(self, execute: Execute, job: _Job, holder: str, now: int) -> Admission:
        run = _bind(self._run, execute)
        parked = run("parked", job.job_id)
        if parked:
            if parked[0][0] is None:
                return Admission(Verdict.PARKED)  # a second delivery of a parked job
            run("unpark", job.job_id)  # let go, and back
        reserved = run("reservation", job.job_id)
        if reserved and reserved[0][0] > now:
            return Admission(Verdict.WAIT, until_ms=int(reserved[0][0]))
        for claim in job.claims:
            limit = claim.spec.concurrency
            if limit is None:
                continue
            holders = [row[0] for row in run("holders", claim.spec.name, claim.key)]
            if job.job_id in holders:
                owner, expires = run("own_slot", claim.spec.name, job.job_id)[0]
                if owner not in ("", holder) and expires > now:
                    # Another live worker runs this job (it lost the broker, which
                    # delivered the job again): this copy waits for that run to end, or
                    # for its lease to run out if that worker died, never runs beside it.
                    return Admission(Verdict.WAIT, until_ms=int(expires), limit=claim.spec.name)
            elif len(holders) >= limit:
                # Waits for this one: a slot reserved for it under another is given back.
                freed = run("own_slots", job.job_id)
                run("free_own", job.job_id)
                let_go = self._let_go(execute, freed, now)
                run(
                    "park",
                    job.job_id,
                    claim.spec.name,
                    claim.key,
                    job.queue,
                    job.priority,
                    job.enqueued_at,
                    job.body(),
                )
                return Admission(Verdict.PARKED, limit=claim.spec.name, let_go=let_go)
        rated = [c for c in job.claims if c.spec.rate is not None]
        if rated:
            booking = int(reserved[0][0]) if reserved else None
            meters = [_meter(run("meter", c.spec.name, c.key)) for c in rated]
            decision = decide(meters, [_cell(c.spec) for c in rated], now, booking)
            if decision.step is not Step.WAIT:
                for claim, meter in zip(rated, decision.meters, strict=True):
                    run("set_meter", claim.spec.name, claim.key, meter.tat or now, meter.book)
            names = ",".join(c.spec.name for c in rated)
            if decision.step is Step.BOOK:
                run("reserve", job.job_id, decision.at)
            if decision.step is not Step.START:
                return Admission(Verdict.WAIT, until_ms=decision.at, limit=names)
        if reserved:
            run("unreserve", job.job_id)
        for claim in job.claims:
            if claim.spec.concurrency is not None:
                run("take", claim.spec.name, claim.key, job.job_id, holder, now + SLOT_LEASE_MS)
        return Admission(Verdict.ADMITTED)

    def release(self, job_id: str, *, now_ms: int) -> tuple[LetGo, ...]:
        """Give back the slots ``job_id`` holds; the parked jobs that lets go."""
        with self._c.transaction() as execute:
            freed = self._run(execute, "own_slots", job_id)
            if not freed:
                return ()
            self._run(execute, "free_own", job_id)
            return self._let_go(execute, freed, now_ms)

    def _let_go(
        self, execute: Execute, keys: Iterable[tuple[Any, ...]], now: int
    ) -> tuple[LetGo, ...]:
        """Let go the first parked jobs of each (limit, key) that has a free slot,
        reserving the slot for each."""
        out: list[LetGo] = []
        for name, key in sorted({(row[0], row[1]) for row in keys}):
            spec = self._book.by_name.get(name)
            if spec is None or spec.concurrency is None:
                continue
            free = spec.concurrency - len(self._run(execute, "holders", name, key))
            if free <= 0:
                continue
            window = self._run(execute, "next_parked", name, key, free + PARK_ORDER_WINDOW)
            # By priority (the index's order), then when each job was enqueued.
            window.sort(key=lambda row: (-row[3], row[4], row[5]))
            for job_id, queue, body, *_ in window[:free]:
                self._run(execute, "take", name, key, job_id, "", now + RELEASE_HOLD_MS)
                self._run(execute, "let_go", now, job_id)
                out.append(LetGo(job_id, queue, bytes(body), name))
        return tuple(out)

    def forget(self, job_ids: Iterable[str]) -> None:
        """Forget parked jobs that were let go and published again."""
        with self._c.transaction() as execute:
            for job_id in job_ids:
                self._run(execute, "unpark", job_id)

    def sweep(self, holder: str, *, now_ms: int) -> tuple[LetGo, ...]:
        """A worker's heartbeat: renew its slots, take back expired ones, let go the
        parked jobs they free (and those a raised limit frees), and return the let-go
        jobs whose publish was never confirmed."""
        with self._c.transaction() as execute:
            run = _bind(self._run, execute)
            run("renew", now_ms + SLOT_LEASE_MS, holder)
            expired = run("expired", now_ms)
            run("drop_expired", now_ms)
            stale = run("stale", now_ms - REPUBLISH_AFTER_MS)
            for row in stale:
                run("let_go", now_ms, row[0])
            waiting = run("waiting_keys")
            let_go = self._let_go(execute, [*expired, *waiting], now_ms)
            run("old_tats", now_ms, now_ms)
            run("old_reservations", now_ms - RESERVATION_KEPT_MS)
        return (*let_go, *(LetGo(r[0], r[1], bytes(r[2]), r[3]) for r in stale))

    def counts(self, *, now_ms: int) -> list[KeyCount]:
        """Every limit and key with anything running, reserved, parked or rated."""
        with self._c.transaction() as execute:
            slots = self._run(execute, "count_slots")
            parked = self._run(execute, "count_parked")
            tats = self._run(execute, "all_tats")
        table: dict[tuple[str, str], dict[str, Any]] = {}
        for name, key, is_reserved, n in slots:
            table.setdefault((name, key), {})["reserved" if is_reserved else "running"] = n
        for name, key, n in parked:
            table.setdefault((name, key), {})["parked"] = n
        for name, key, tat, book in tats:
            spec = self._book.by_name.get(name)
            if spec is not None and spec.rate is not None:
                due = max(now_ms, int(tat - _cell(spec).tolerance), int(book or 0))
                table.setdefault((name, key), {})["next_due_ms"] = due
        return [KeyCount(name, key, **values) for (name, key), values in sorted(table.items())]

    def parked_by_queue(self) -> dict[tuple[str, str], int]:
        """Jobs parked now, by (queue, limit): what a limit holds out of each queue."""
        with self._c.transaction() as execute:
            rows = self._run(execute, "count_parked_queues")
        return {(queue, name): int(n) for queue, name, n in rows}

    def close(self) -> None:
        """Close the store's connections."""
        self._c.close()


def _cell(spec: LimitSpec) -> Cell:
    assert spec.rate is not None
    interval = spec.rate.interval_ms
    return Cell(interval=interval, tolerance=interval * spec.burst)


def _meter(rows: list[tuple[Any, ...]]) -> Meter:
    if not rows:
        return Meter()
    tat, book = rows[0]
    return Meter(int(tat), None if book is None else int(book))


def _bind(
    run: Callable[..., list[tuple[Any, ...]]], execute: Execute
) -> Callable[..., list[tuple[Any, ...]]]:
    """``run`` with the transaction's ``execute`` bound."""

    def bound(name: str, *params: Any) -> list[tuple[Any, ...]]:
        return run(execute, name, *params)

    return bound
