"""What the embedded backend does beyond the shared contract: leases between processes,
the redelivery count kept in the file, the producer's three outcomes, millisecond delays,
dead letters' information, and the control channel and election through the file.

Two backends on one file stand for two processes; time is a ManualClock.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import BackendError
from queuey_core import DuplicateJobError
from queuey_core import EnqueueUnknownError
from queuey_core import Envelope
from queuey_core import Job
from queuey_core import ManualClock
from queuey_core import NotEnqueuedError
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import UnroutableError
from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.capabilities import SupportsControl
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import parse_url
from queuey_core.backends.sqlite import pump
from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.options import DEFAULT_POLL
from queuey_core.errors import ConfigError
from queuey_core.errors import PublishFailure
from queuey_core.queues import QueueKind
from queuey_core.worker.redelivery import MAX_REDELIVERIES
from tests.backends.sqlite.files import WrappedConnection
from tests.backends.sqlite.files import rows_in_file
from tests.backends.sqlite.files import value_in_file
from tests.support import Got

Q = QueueConfig("jobs", prefetch=2, max_priority=5)


class Line(Job):
    NAME: ClassVar[str] = "test.line"
    QUEUE: ClassVar[str] = "jobs"
    text: str


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db?lease=2"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make(url: str, clock: ManualClock) -> Iterator[Callable[[], SqliteBackend]]:
    made: list[SqliteBackend] = []

    def new() -> SqliteBackend:
        b = SqliteBackend(url, clock=clock)
        b.declare([Q])
        made.append(b)
        return b

    yield new
    for b in made:
        b.close()


def envelope(name: str = "x", priority: int = 0, attempt: int = 1) -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="t.job",
        queue=Q.name,
        priority=priority,
        attempt=attempt,
        enqueued_at=int(time.time() * 1000),
        payload={"name": name},
    )


def wait(cond: Callable[[], bool], clock: ManualClock | None = None, step: float = 0.0) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "condition was never met"
        if clock is not None and step:
            clock.advance(step)
        time.sleep(0.005)


def test_a_dead_workers_lease_expires_and_another_claims_it_flagged_redelivered(
    make: Callable[[], SqliteBackend], clock: ManualClock
) -> None:
    first, second = make(), make()
    first.publish(envelope("lonely"))
    got_first, got_second = Got(), Got()
    first.consume(Q, got_first)
    wait(lambda: len(got_first) == 1)
    assert not got_first.items[0].redelivered
    first._pump.stop()  # the process freezes: no more renewals

    second.consume(Q, got_second)
    clock.advance(1.0)
    time.sleep(0.2)
    assert len(got_second) == 0, "a lease still running is never claimed by another"
    wait(lambda: len(got_second) == 1, clock, 0.2)
    again = got_second.items[0]
    assert again.redelivered, "a claim of a row whose lease expired is a redelivery"
    assert again.envelope == got_first.items[0].envelope

    with pytest.raises(BackendError, match="lease was lost"):
        got_first.items[0].ack()
    assert got_first.items[0].is_stale()
    again.ack()
    assert second.counts([Q.name])[Q.name][0] == (0, 0, 0)
    assert second.held_deferrals(Q.name) == 0


def test_a_live_worker_renews_its_leases(
    make: Callable[[], SqliteBackend], clock: ManualClock, url: str
) -> None:
    first, second = make(), make()
    first.publish(envelope())
    got_first, got_second = Got(), Got()
    first.consume(Q, got_first)
    wait(lambda: len(got_first) == 1)
    second.consume(Q, got_second)
    for _ in range(20):  # 10 s of the clock, 5 leases, each step renewed before the next
        clock.advance(0.5)
        first._pump.renew_soon()
        wait(lambda: lease_expires(url) >= clock.wall_ms() + 1500)
    assert len(got_second) == 0
    got_first.items[0].ack()


def test_giving_back_at_once_frees_the_jobs_held_or_says_how_long_they_stay_leased(
    make: Callable[[], SqliteBackend], url: str
) -> None:
    # What a worker stopped at once asks of the file (HoldsLeases), before os._exit.
    backend = make()
    backend.publish(envelope())
    got = Got()
    backend.consume(Q, got)
    wait(lambda: len(got) == 1)
    holder = sqlite3.connect(parse_url(url).path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        said = backend.give_back_now(timeout=0.3)
        # Read while the lock is still held: the give-back that timed out may still be
        # waiting for the lock (the process it serves exits at once), and once the lock
        # is let go it can land before a later read.
        assert leased(url) == 1, "the file was locked: the lease runs out on its own"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert said.startswith("stay leased in the file for up to 2s ("), said
    said = backend.give_back_now(timeout=5)
    assert said == "were given back to the file: any worker can take them at once"
    assert leased(url) == 0
    other = make()
    again = Got()
    other.consume(Q, again)
    wait(lambda: len(again) == 1)
    assert again.items[0].redelivered
    again.items[0].ack()


def leased(url: str) -> int:
    return value_in_file(url, "SELECT count(*) FROM queuey_messages WHERE lease_owner IS NOT NULL")


def lease_expires(url: str) -> int:
    return value_in_file(url, "SELECT max(lease_expires) FROM queuey_messages")


def test_a_dead_letter_never_died_before_it_was_enqueued(
    make: Callable[[], SqliteBackend], clock: ManualClock
) -> None:
    # The backend's clock (a ManualClock in 2023) is behind the producer's (now).
    backend = make()
    sent = envelope()
    assert clock.wall_ms() < sent.enqueued_at
    backend.publish(sent)
    got = Got()
    backend.consume(Q, got)
    wait(lambda: len(got) == 1)
    got.items[0].dead_letter("why")
    [dead] = backend.list_dead_letters(Q.name)
    assert dead.dead_at == sent.enqueued_at, "at the earliest, its enqueue"


def test_a_second_enqueue_under_the_same_job_id_is_a_duplicate_on_the_file(
    make: Callable[[], SqliteBackend], url: str
) -> None:
    # docs/enqueueing.md: on the file, a job id the caller chose is a unique key, held
    # while the job is queued or running, so the same --file enqueued twice with
    # --ids-from-lines runs each line once. The backend itself moves what it is given:
    # the producer is what claims the key.
    backend = make()
    producer = Producer(backend, QueueSet([Q]))
    first = producer.enqueue(Line(text="ada"), job_id="line-1")
    with pytest.raises(DuplicateJobError) as caught:
        producer.enqueue(Line(text="ada"), job_id="line-1")
    assert caught.value.existing == first
    assert rows_in_file(url) == 1
    sent = envelope()
    backend.publish(sent)
    backend.publish(sent)
    assert rows_in_file(url) == 3, "publish, below the producer, claims nothing"


@pytest.mark.parametrize(
    "claims_before", [MAX_REDELIVERIES - 1, MAX_REDELIVERIES, MAX_REDELIVERIES + 1]
)
def test_a_row_claimed_too_often_is_dead_lettered_from_the_count_in_the_file(
    make: Callable[[], SqliteBackend], url: str, claims_before: int
) -> None:
    # Claimed claims_before times by processes that each died unsettled: the count lives
    # in the row. The dispatcher dead-letters a message's MAX_REDELIVERIES-th redelivery
    # unrun (tests/worker/test_hostile_values.py); the row's count stops the same one.
    backend = make()
    sent = envelope()
    backend.publish(sent)
    db = Database(parse_url(url))
    with db.write() as conn:
        conn.execute("UPDATE queuey_messages SET claims = ?", (claims_before,))
    db.close()
    got = Got()
    backend.consume(Q, got)
    if claims_before < MAX_REDELIVERIES:
        wait(lambda: len(got) == 1)
        assert got.items[0].redelivered, "a redelivery still short of the count runs"
        return
    wait(lambda: len(backend.list_dead_letters(Q.name)) == 1)
    [dead] = backend.list_dead_letters(Q.name)
    assert isinstance(dead, DeadLetter)
    assert dead.reason == f"redelivered {claims_before} times without being settled"
    assert dead.envelope == sent
    assert len(got) == 0, "its last claim never reached a handler"


def test_delays_are_held_to_the_millisecond(
    make: Callable[[], SqliteBackend], clock: ManualClock
) -> None:
    backend = make()
    backend.publish(envelope("later"), delay=0.250)
    got = Got()
    backend.consume(Q, got)
    clock.advance(0.249)
    time.sleep(0.15)
    assert len(got) == 0, "not a millisecond early"
    assert backend.inspect([Q.name]).held == 1
    clock.advance(0.001)
    wait(lambda: len(got) == 1)


def test_a_dead_letter_keeps_reason_time_attempt_and_queue(
    make: Callable[[], SqliteBackend], clock: ManualClock, url: str
) -> None:
    backend = make()
    backend.publish(envelope(attempt=3))
    got = Got()
    backend.consume(Q, got)
    wait(lambda: len(got) == 1)
    got.items[0].dead_letter("fatal error: no")
    conn = sqlite3.connect(parse_url(url).path)
    row = conn.execute("SELECT queue, reason, dead_at, attempt, delivered_from FROM queuey_dead")
    assert row.fetchone() == (Q.name, "fatal error: no", clock.wall_ms(), 3, Q.name)
    conn.close()


def test_publish_outcomes_unroutable_not_enqueued_and_unknown(
    make: Callable[[], SqliteBackend], monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    backend = make()
    with pytest.raises(UnroutableError):
        backend.publish(envelope().model_copy(update={"queue": "nowhere"}))

    short = SqliteBackend(url.replace("lease=2", "lease=2&busy_timeout=0.05"))
    holder = sqlite3.connect(parse_url(url).path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(NotEnqueuedError, match="locked by another process"):
            short.publish(envelope())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        short.close()

    monkeypatch.setattr(backend._db, "_conn", InterruptedCommit(backend._db._conn))
    sent = envelope()
    with pytest.raises(EnqueueUnknownError) as caught:
        backend.publish(sent)
    assert caught.value.unknown == (sent.job_id,)


def test_a_publish_that_meets_the_file_closing_is_not_enqueued_because_closed(
    make: Callable[[], SqliteBackend],
) -> None:
    # The backend's check passed, then its file closed before the write: the same
    # outcome as a publish on a closed backend, not a refusal of the file's.
    backend = make()
    backend._db.close()
    sent = envelope()
    with pytest.raises(NotEnqueuedError, match="closed") as caught:
        backend.publish(sent)
    assert caught.value.reason is PublishFailure.CLOSED
    assert caught.value.not_enqueued == (sent.job_id,)


class InterruptedCommit(WrappedConnection):
    """A connection on which a signal lands while COMMIT runs: it ran, nobody can tell."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = super().execute(sql, *args)
        if sql == "COMMIT":
            raise KeyboardInterrupt
        return cursor


def test_control_requests_reach_every_live_worker_through_the_file(
    make: Callable[[], SqliteBackend],
) -> None:
    one, two, asker = make(), make(), make()
    assert isinstance(one, SupportsControl)
    one.serve_control(lambda body: b"one:" + body)
    server = two.serve_control(lambda body: b"two:" + body)
    replies = asker.broadcast_control(b"status", timeout=5)
    assert sorted(replies) == [b"one:status", b"two:status"]
    server.close()
    assert asker.broadcast_control(b"again", timeout=5) == [b"one:again"]


def test_one_scheduler_leads_and_another_takes_over_when_it_leaves(
    make: Callable[[], SqliteBackend],
) -> None:
    backend = make()
    changed = threading.Event()
    first = backend.election(heartbeat=0.2)
    second = backend.election(heartbeat=0.2)
    first.start(changed.set)
    second.start(changed.set)
    try:
        assert first.is_leader()
        assert first.confirm()
        assert not second.is_leader()
        assert not second.confirm()
        first.close()
        wait(second.is_leader)
    finally:
        second.close()
    state = backend.schedule_state()
    state.record("nightly", 1000)
    state.record("nightly", 500)
    assert state.last_fired(["nightly", "never"]) == {"nightly": 1000}
    state.close()


def test_a_queues_kind_means_nothing_on_a_file_and_changing_it_is_not_refused(
    make: Callable[[], SqliteBackend], url: str
) -> None:
    # docs/embedded.md: a quorum queue means nothing on a file (it has no replicas),
    # so a queue set that only changes a queue's kind still opens it.
    first = make()
    first.publish(envelope("before"))
    other = SqliteBackend(url)
    try:
        other.declare([dataclasses.replace(Q, kind=QueueKind.QUORUM)])
        other.publish(envelope("after"))
        with pytest.raises(ConfigError, match="max_priority=5"):
            other.declare([dataclasses.replace(Q, name="jobs", max_priority=9)])
    finally:
        other.close()
    assert value_in_file(url, "SELECT count(*) FROM queuey_messages") == 2


def test_bad_urls_are_config_errors() -> None:
    for bad in ("sqlite://host/x.db", "sqlite:///", "sqlite:///x.db?lease=0", "sqlite:///x?bad=1"):
        with pytest.raises(ConfigError):
            parse_url(bad)
    assert parse_url("sqlite:////abs/q.db?lease=3").path == "/abs/q.db"
    assert parse_url("sqlite:///rel/q.db").lease == 5.0


def test_a_full_file_refuses_the_job_it_cannot_hold_and_keeps_the_others(
    make: Callable[[], SqliteBackend],
) -> None:
    backend = make()
    backend._db._conn.execute("PRAGMA max_page_count = 40")  # a disk of 160 kB
    said_yes = 0
    refused: NotEnqueuedError | None = None
    for _ in range(10_000):
        try:
            backend.publish(envelope("x" * 2000))
        except NotEnqueuedError as exc:
            refused = exc
            break
        said_yes += 1
    assert refused is not None, "the file never filled"
    assert "disk is full" in str(refused)
    assert backend.counts([Q.name])[Q.name][0].ready == said_yes


def test_a_worker_that_claims_looks_at_the_file_often_and_an_idle_one_seldom(
    make: Callable[[], SqliteBackend],
) -> None:
    worker, other, producer = make(), make(), make()
    got, nothing = Got(), Got()
    worker.consume(Q, got)
    elsewhere = QueueConfig("elsewhere", prefetch=1)
    other.declare([elsewhere])
    other.consume(elsewhere, nothing)
    poll = DEFAULT_POLL  # the URL sets none
    now = time.monotonic()
    assert worker._pump.interval(now) == poll
    other._pump.renew_soon()  # another worker's commits are not work for this one
    time.sleep(0.1)
    assert worker._pump.interval(time.monotonic()) == poll

    producer.publish(envelope("from another process"))
    wait(lambda: len(got) == 1)
    claimed = time.monotonic()
    assert worker._pump.interval(claimed) == pump.BUSY_POLL
    assert worker._pump.interval(claimed + pump.BUSY_FOR + 0.1) == poll
