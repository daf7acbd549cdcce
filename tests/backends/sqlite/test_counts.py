"""The counts of the embedded backend: equal to a ``count(*)`` of every row after any
sequence of writes, and read without reading the rows.

The writes are the backend's own (publish, deferral, raw body, claim, renewal, release,
ack, retry, dead letter, requeue and purge of dead letters) and SQL from elsewhere (a
tool deleting or moving rows), with time moving on between them: delays end and leases
expire by the clock alone.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import counts
from queuey_core.backends.sqlite import dead
from queuey_core.backends.sqlite import messages
from queuey_core.clock import ManualClock

from .files import job_envelope

PLAIN = QueueConfig("plain", prefetch=4)
URGENT = QueueConfig("urgent", prefetch=4, max_priority=3)
QUEUES = (PLAIN, URGENT)
OWNERS = ("first", "second")
LEASE_MS = 2000


@dataclass(frozen=True)
class Held:
    """A leased row as :meth:`Writer.settle` sees a delivery."""

    row_id: int
    queue: str
    envelope: Envelope


queue_names = st.sampled_from([q.name for q in QUEUES])
owners = st.sampled_from(OWNERS)
delays = st.one_of(st.none(), st.sampled_from([0.5, 1.0, 3.0, 10.0]))
operations = st.one_of(
    st.tuples(st.just("publish"), queue_names, st.integers(0, 5), delays, st.integers(1, 6)),
    st.tuples(st.just("defer"), queue_names, st.sampled_from([0.5, 4.0])),
    st.tuples(st.just("raw"), queue_names),
    st.tuples(st.just("claim"), queue_names, owners, st.integers(1, 5)),
    st.tuples(st.just("renew"), owners),
    st.tuples(st.just("release"), owners),
    st.tuples(st.just("settle"), owners, st.sampled_from(["ack", "retry", "defer", "dead"])),
    st.tuples(st.just("advance"), st.sampled_from([0.3, 1.0, 2.5, 6.0])),
    st.tuples(st.just("requeue_dead"), queue_names),
    st.tuples(st.just("purge_dead"), queue_names),
    st.tuples(st.just("sql_delete"), queue_names),
    st.tuples(st.just("sql_move"), queue_names),
)


@contextlib.contextmanager
def fresh_backend(clock: ManualClock) -> Iterator[SqliteBackend]:
    """A backend on a file of its own (one per example: hypothesis runs many in a test)."""
    with tempfile.TemporaryDirectory() as where:
        backend = SqliteBackend(f"sqlite:///{where}/q.db?lease={LEASE_MS / 1000}", clock=clock)
        backend.declare(list(QUEUES))
        try:
            yield backend
        finally:
            backend.close()


def run(backend: SqliteBackend, clock: ManualClock, op: tuple[object, ...]) -> None:
    """Apply one operation of :data:`operations` to ``backend``."""
    kind, *args = op
    now = clock.wall_ms()
    db = backend._db
    if kind == "publish":
        queue, priority, delay, many = args
        envelope = job_envelope(str(queue)).model_copy(update={"priority": priority})
        wait = None if delay is None else float(str(delay))
        backend.publish_many([(envelope, wait)] * int(str(many)))
    elif kind == "defer":
        backend.defer(job_envelope(str(args[0])), float(str(args[1])))
    elif kind == "raw":
        backend.publish_raw(str(args[0]), b"not an envelope")
    elif kind == "claim":
        queue, owner, limit = args
        with db.write() as conn:
            messages.claim(
                conn,
                str(queue),
                owner=str(owner),
                now=now,
                until=now + LEASE_MS,
                limit=int(str(limit)),
            )
    elif kind == "renew":
        with db.write() as conn:
            messages.renew(conn, owner=str(args[0]), until=now + LEASE_MS)
    elif kind == "release":
        with db.write() as conn:
            messages.release(conn, owner=str(args[0]))
    elif kind == "settle":
        settle(backend, str(args[0]), str(args[1]))
    elif kind == "advance":
        clock.advance(float(str(args[0])))
    elif kind == "requeue_dead":
        backend._writer.requeue_dead(str(args[0]), None)
    elif kind == "purge_dead":
        with db.write() as conn:
            dead.purge(conn, str(args[0]))
    elif kind == "sql_delete":  # a tool's SQL, not the backend's
        with db.write() as conn:
            conn.execute("DELETE FROM queuey_messages WHERE queue = ? AND id % 3 = 0", args)
    elif kind == "sql_move":
        with db.write() as conn:
            conn.execute(
                "UPDATE queuey_messages SET queue = 'plain', priority = 0 "
                "WHERE queue = ? AND id % 2 = 0",
                args,
            )


def settle(backend: SqliteBackend, owner: str, how: str) -> None:
    """Settle the oldest row ``owner`` holds (whether its lease expired or not)."""
    with backend._db.read() as conn:
        row = conn.execute(
            "SELECT id, queue, body FROM queuey_messages WHERE lease_owner = ? ORDER BY id",
            (owner,),
        ).fetchone()
    if row is None:
        return
    try:
        envelope = Envelope.decode(row[2])
    except Exception:  # a raw body: only an ack settles it
        with backend._db.write() as conn:
            messages.take(conn, row[0], owner=owner)
        return
    held = Held(row[0], row[1], envelope)
    if how == "ack":
        with backend._db.write() as conn:
            messages.take(conn, held.row_id, owner=owner)
    elif how == "dead":
        backend._writer.settle(held, owner=owner, dead="failed", replacement=None)
    else:
        replacement = envelope.deferred(0) if how == "defer" else envelope.next_attempt()
        backend._writer.settle(
            held, owner=owner, dead=None, replacement=(replacement, 1.0, how == "defer")
        )


def assert_counts_are_exact(backend: SqliteBackend, clock: ManualClock) -> None:
    """Every count the backend gives equals a ``count(*)`` of the rows, at this time."""
    now = clock.wall_ms()
    with backend._db.read() as conn:
        found = counts.counted(conn, now=now)
        names = {row[0] for row in conn.execute("SELECT queue FROM queuey_messages")}
        for name in names | {q.name for q in QUEUES}:
            expected = counts.brute_force(conn, name, now=now)
            assert found.get(name, counts.Counts(0, 0, 0)) == expected, f"queue {name}"
            deferrals = conn.execute(
                "SELECT count(*) FROM queuey_messages WHERE queue = ? AND available_at > ? "
                "AND lease_owner IS NULL AND deferral",
                (name, now),
            ).fetchone()[0]
            assert counts.held_deferrals(conn, name, now=now) == deferrals, f"queue {name}"
            dead_rows = conn.execute(
                "SELECT count(*) FROM queuey_dead WHERE queue = ?", (name,)
            ).fetchone()[0]
            assert counts.dead_letters(conn, name) == dead_rows, f"dead letters of {name}"
        held = conn.execute(
            "SELECT count(*) FROM queuey_messages WHERE available_at > ? AND lease_owner IS NULL",
            (now,),
        ).fetchone()[0]
    inspection = backend.inspect([q.name for q in QUEUES])
    assert inspection.held == held
    for q in QUEUES:
        seen = inspection.queues[q.name]
        assert seen is not None
        assert seen.ready == found.get(q.name, counts.Counts(0, 0, 0)).ready
        assert seen.dead_letters == counts_dead(backend, q.name)
        assert backend.dead_letter_page(q.name, limit=1).total == seen.dead_letters


def counts_dead(backend: SqliteBackend, queue: str) -> int:
    with backend._db.read() as conn:
        return int(
            conn.execute("SELECT count(*) FROM queuey_dead WHERE queue = ?", (queue,)).fetchone()[0]
        )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(operations, min_size=3, max_size=40))
def test_counts_equal_a_count_of_every_row_after_any_writes(
    ops: list[tuple[object, ...]],
) -> None:
    clock = ManualClock()
    with fresh_backend(clock) as backend:
        for op in ops:
            run(backend, clock, op)
            assert_counts_are_exact(backend, clock)


def test_a_lease_that_expires_counts_as_ready_again() -> None:
    clock = ManualClock()
    with fresh_backend(clock) as backend:
        run(backend, clock, ("publish", PLAIN.name, 0, None, 3))
        run(backend, clock, ("claim", PLAIN.name, "first", 2))
        assert backend.counts([PLAIN.name])[PLAIN.name][0] == (1, 2, 0)
        clock.advance(LEASE_MS / 1000 + 0.001)  # the owner died: nobody renews
        assert backend.counts([PLAIN.name])[PLAIN.name][0] == (3, 0, 0), (
            "an expired lease is ready again, by the clock alone"
        )
        assert_counts_are_exact(backend, clock)
        run(backend, clock, ("claim", PLAIN.name, "second", 3))
        assert backend.counts([PLAIN.name])[PLAIN.name][0] == (0, 3, 0)
        assert_counts_are_exact(backend, clock)


def test_a_delay_that_ends_counts_as_ready_by_the_clock_alone() -> None:
    clock = ManualClock()
    with fresh_backend(clock) as backend:
        run(backend, clock, ("publish", URGENT.name, 2, 3.0, 2))
        run(backend, clock, ("defer", URGENT.name, 1.0))
        assert backend.counts([URGENT.name])[URGENT.name][0] == (0, 0, 3)
        assert backend.held_deferrals(URGENT.name) == 1
        assert backend.inspect([URGENT.name]).held == 3
        clock.advance(1.5)
        assert backend.counts([URGENT.name])[URGENT.name][0] == (1, 0, 2)
        assert backend.held_deferrals(URGENT.name) == 0
        clock.advance(2.0)
        assert backend.counts([URGENT.name])[URGENT.name][0] == (3, 0, 0)
        assert backend.inspect([URGENT.name]).held == 0


def fill(backend: SqliteBackend, queue: str, jobs: int, dead_letters: int) -> None:
    """Add ``jobs`` ready jobs to ``queue`` in batches, and ``dead_letters`` dead ones."""
    for start in range(0, jobs, 1000):
        backend.publish_many([(job_envelope(queue), None)] * min(1000, jobs - start))
    with backend._db.write() as conn:
        for _ in range(dead_letters):
            dead.add(conn, dead.Dead(queue, "h", "failed", 0, 1, queue, True, b"{}"))


def steps_to_count(backend: SqliteBackend, queue: str) -> int:
    """SQLite's virtual-machine steps (in tens) of every count the CLI, the dashboard and
    the metrics ask for: a measure of work that no load on the machine changes."""
    taken = 0

    def step() -> int:
        nonlocal taken
        taken += 1
        return 0

    conn = backend._db._conn
    conn.set_progress_handler(step, 10)
    try:
        backend.inspect([queue])
        backend.counts([queue])
        backend.dead_letter_page(queue, limit=1)
    finally:
        conn.set_progress_handler(None, 0)
    return taken


def test_counting_reads_no_row_of_a_long_queue() -> None:
    """The counts of a queue cost the same at 500 jobs and at 20,000 (they read the
    counts tables, not the rows), with a few jobs held and running beside them."""
    clock = ManualClock()
    with fresh_backend(clock) as backend:
        run(backend, clock, ("publish", URGENT.name, 1, 5.0, 5))
        fill(backend, URGENT.name, 500, 100)
        run(backend, clock, ("claim", URGENT.name, "first", 3))
        short = steps_to_count(backend, URGENT.name)
        fill(backend, URGENT.name, 19_500, 3900)
        long = steps_to_count(backend, URGENT.name)
        assert backend.counts([URGENT.name])[URGENT.name][0][:3] == (20_000 - 3, 3, 5)
    assert long <= short * 1.2 + 50, f"{short} steps at 500 jobs, {long} at 20,000"
