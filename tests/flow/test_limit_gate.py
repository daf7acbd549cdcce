"""The gate of one worker: a copy of a job it runs itself (delivered again after its
connection to the broker was lost) waits for that run, never runs beside it; a parked
job let go while the broker is out of reach goes out at the next heartbeat."""

from __future__ import annotations

from queuey_core import BackendError
from queuey_core import Envelope
from queuey_core import ManualClock
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import REPUBLISH_AFTER_MS
from queuey_core.flow.limit_state import SLOT_LEASE_MS
from queuey_core.flow.limit_state import SWEEP_EVERY_MS
from queuey_core.flow.limit_state import Verdict
from tests.support import Greet


def test_a_copy_of_a_job_this_worker_runs_waits_until_that_run_gave_its_slot_back(
    clock: ManualClock,
) -> None:
    book = LimitBook([spec_from_table("mutex", {"concurrency": 1, "jobs": [Greet.NAME]})])
    gate = LimitGate(book, limit_state_for("memory:", book), clock=clock)
    job = Greet(name="ada")
    env = Envelope.for_job(job, enqueued_at=clock.wall_ms())
    try:
        assert gate.ask(env, book.specs, job).verdict is Verdict.ADMITTED
        copy = gate.ask(env, book.specs, job)
        assert copy.verdict is Verdict.WAIT, "the same job runs here already"
        assert copy.until_ms == clock.wall_ms() + SLOT_LEASE_MS
        assert gate.counted().by_limit["mutex"]["waited"] == 1
        gate.release(str(env.job_id))
        assert gate.ask(env, book.specs, job).verdict is Verdict.ADMITTED, (
            "once that run ended, the copy runs (at least once)"
        )
    finally:
        gate.close()


def test_a_parked_job_whose_publish_failed_goes_out_at_the_next_heartbeat(
    clock: ManualClock,
) -> None:
    book = LimitBook([spec_from_table("mutex", {"concurrency": 1, "jobs": [Greet.NAME]})])
    gate = LimitGate(book, limit_state_for("memory:", book), clock=clock)
    published: list[Envelope] = []
    broker_down = True

    def publish(envelope: Envelope) -> None:
        if broker_down:
            raise BackendError("the broker is out of reach (test)")
        published.append(envelope)

    gate.bind(publish)
    first, second = Greet(name="ada"), Greet(name="bob")
    runs = Envelope.for_job(first, enqueued_at=clock.wall_ms())
    waits = Envelope.for_job(second, enqueued_at=clock.wall_ms())
    try:
        assert gate.ask(runs, book.specs, first).verdict is Verdict.ADMITTED
        assert gate.ask(waits, book.specs, second).verdict is Verdict.PARKED
        gate.release(str(runs.job_id))  # lets the parked job go: its publish fails
        assert published == []
        gate.sweep()
        assert published == [], "still out of reach"
        broker_down = False
        clock.advance(SWEEP_EVERY_MS / 1000)
        gate.sweep()
        assert [e.job_id for e in published] == [waits.job_id], (
            "published at the next heartbeat, not after the store's republish delay"
        )
        clock.advance(REPUBLISH_AFTER_MS / 1000 + 1)
        gate.sweep()
        assert len(published) == 1, "once"
        assert gate.counted().let_go == 1
    finally:
        gate.close()
