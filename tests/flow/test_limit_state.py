"""Admission on every store of limits' state: all or nothing, parking in priority order,
leases that a dead worker's slots run out of, and reservations that do not spin."""

from __future__ import annotations

from queuey_core.flow.limit_spec import LimitBook
from queuey_core.flow.limit_spec import spec_from_table
from queuey_core.flow.limit_state import RELEASE_HOLD_MS
from queuey_core.flow.limit_state import SLOT_LEASE_MS
from queuey_core.flow.limit_state import Admission
from queuey_core.flow.limit_state import Claim
from queuey_core.flow.limit_state import LimitState
from queuey_core.flow.limit_state import Verdict
from tests.flow.conftest import MakeState

T0 = 1_700_000_000_000


def _book(**tables: dict[str, object]) -> LimitBook:
    return LimitBook(spec_from_table(name, {"jobs": ["x"], **t}) for name, t in tables.items())


def _ask(
    state: LimitState,
    book: LimitBook,
    job: str,
    key: str,
    now: int,
    *,
    priority: int = 0,
    holder: str = "w1",
    enqueued_at: int | None = None,
) -> Admission:

    claims = tuple(Claim(spec, key) for spec in book.specs)
    return state.acquire(
        job,
        claims,
        holder=holder,
        now_ms=now,
        queue="q",
        priority=priority,
        enqueued_at=now if enqueued_at is None else enqueued_at,
        body=f"body-{job}".encode,
    )


def test_a_full_key_parks_the_job_and_another_key_is_not_held_up(make_state: MakeState) -> None:
    book = _book(tenant={"concurrency": 1, "key": "tenant"})
    state = make_state(book)
    assert _ask(state, book, "a1", "a", T0).verdict is Verdict.ADMITTED
    parked = _ask(state, book, "a2", "a", T0)
    assert parked.verdict is Verdict.PARKED, "the key's one slot is taken"
    assert _ask(state, book, "b1", "b", T0).verdict is Verdict.ADMITTED, "other keys run"
    assert _ask(state, book, "a2", "a", T0).verdict is Verdict.PARKED, (
        "a second delivery of a parked job is only parked again (acked), never run"
    )
    let_go = state.release("a1", now_ms=T0 + 5)
    assert [g.job_id for g in let_go] == ["a2"], "the freed slot lets the parked job go"
    assert let_go[0].body == b"body-a2"
    assert let_go[0].queue == "q"
    assert _ask(state, book, "a3", "a", T0 + 6).verdict is Verdict.PARKED, (
        "the slot is reserved for the job let go, not taken by a newcomer"
    )
    assert _ask(state, book, "a2", "a", T0 + 7).verdict is Verdict.ADMITTED, (
        "back from its queue, the job let go finds its slot"
    )


def test_parked_jobs_are_let_go_by_priority_then_arrival(make_state: MakeState) -> None:
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "run", "", T0).verdict is Verdict.ADMITTED
    for i, (job, priority) in enumerate([("low1", 0), ("high", 9), ("mid", 5), ("low2", 0)]):
        assert _ask(state, book, job, "", T0 + i, priority=priority).verdict is Verdict.PARKED
    order = []
    current = "run"
    for step in range(4):
        (released,) = state.release(current, now_ms=T0 + 100 + step)
        order.append(released.job_id)
        current = released.job_id
        state.forget([current])
        assert _ask(state, book, current, "", T0 + 100 + step).verdict is Verdict.ADMITTED
    assert order == ["high", "mid", "low1", "low2"]


def test_jobs_parked_out_of_their_order_are_let_go_in_the_order_they_were_enqueued(
    make_state: MakeState,
) -> None:
    """Two job threads park at once in either order: the one enqueued first goes first."""
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "run", "", T0).verdict is Verdict.ADMITTED
    for job, enqueued in [("second", T0 + 2), ("first", T0 + 1), ("third", T0 + 3)]:
        assert _ask(state, book, job, "", T0 + 10, enqueued_at=enqueued).verdict is Verdict.PARKED
    (released,) = state.release("run", now_ms=T0 + 20)
    assert released.job_id == "first"


def test_a_rate_limited_job_gets_a_reservation_and_comes_back_once(
    make_state: MakeState,
) -> None:
    book = _book(api={"rate": "1/s"})
    state = make_state(book)
    assert _ask(state, book, "j1", "", T0).verdict is Verdict.ADMITTED
    waits = [_ask(state, book, f"j{i}", "", T0) for i in range(2, 5)]
    assert [w.verdict for w in waits] == [Verdict.WAIT] * 3
    assert [w.until_ms for w in waits] == [T0 + 1000, T0 + 2000, T0 + 3000], (
        "each waiting job is given its own time, one interval apart: none comes back to spin"
    )
    early = _ask(state, book, "j3", "", T0 + 1500)
    assert (early.verdict, early.until_ms) == (Verdict.WAIT, T0 + 2000), "early: waits again"
    assert _ask(state, book, "j2", "", T0 + 1200).verdict is Verdict.ADMITTED, (
        "late, and nobody took its turn: it starts"
    )
    held = _ask(state, book, "j3", "", T0 + 2000)
    assert (held.verdict, held.until_ms) == (Verdict.WAIT, T0 + 2200), (
        "a second apart from j2's late start, not from its booking: it waits a moment"
    )
    assert _ask(state, book, "j3", "", T0 + 2200).verdict is Verdict.ADMITTED
    later = _ask(state, book, "j5", "", T0 + 2202)
    assert (later.verdict, later.until_ms) == (Verdict.WAIT, T0 + 4000), (
        "a newcomer is booked behind every booking"
    )


def test_a_late_job_whose_turn_was_taken_is_booked_again_not_run(make_state: MakeState) -> None:
    book = _book(api={"rate": "1/s"})
    state = make_state(book)
    _ask(state, book, "j1", "", T0)
    _ask(state, book, "j2", "", T0)  # booked for +1000
    _ask(state, book, "j3", "", T0)  # booked for +2000
    assert _ask(state, book, "j3", "", T0 + 2500).verdict is Verdict.ADMITTED
    again = _ask(state, book, "j2", "", T0 + 2500)
    assert (again.verdict, again.until_ms) == (Verdict.WAIT, T0 + 3500), (
        "two starts in one interval would break the rate: it is booked again"
    )


def test_all_or_nothing_a_parked_job_takes_no_rate_token(make_state: MakeState) -> None:
    book = _book(api={"rate": "1/s"}, one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "j1", "", T0).verdict is Verdict.ADMITTED
    assert _ask(state, book, "j2", "", T0 + 2000).verdict is Verdict.PARKED
    state.release("j1", now_ms=T0 + 3000)
    assert _ask(state, book, "j2", "", T0 + 3000).verdict is Verdict.ADMITTED, (
        "parking took no token: the rate is free when it comes back"
    )


def test_a_dead_workers_slot_is_taken_back_after_its_lease_not_before(
    make_state: MakeState,
) -> None:
    book = _book(one={"concurrency": 1})
    dead = alive = make_state(book)  # two workers on one store: the holder tells them apart
    assert _ask(dead, book, "j1", "", T0, holder="dead").verdict is Verdict.ADMITTED
    assert _ask(alive, book, "j2", "", T0, holder="alive").verdict is Verdict.PARKED
    assert alive.sweep("alive", now_ms=T0 + SLOT_LEASE_MS - 1) == (), "still leased"
    let_go = alive.sweep("alive", now_ms=T0 + SLOT_LEASE_MS + 1)
    assert [g.job_id for g in let_go] == ["j2"], "the lease ran out: the slot is given back"


def test_a_live_workers_heartbeat_keeps_its_slots(make_state: MakeState) -> None:
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "j1", "", T0, holder="w1").verdict is Verdict.ADMITTED
    for beat in range(1, 40):
        assert state.sweep("w1", now_ms=T0 + beat * 1000) == ()
    assert _ask(state, book, "j2", "", T0 + 40_000, holder="w2").verdict is Verdict.PARKED


def test_a_let_go_job_whose_publish_was_lost_is_let_go_again(make_state: MakeState) -> None:
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    _ask(state, book, "j1", "", T0)
    _ask(state, book, "j2", "", T0)
    assert [g.job_id for g in state.release("j1", now_ms=T0)] == ["j2"]
    # Never published, never forgotten: the worker that let it go died.
    later = state.sweep("w", now_ms=T0 + 60_000)
    assert [g.job_id for g in later] == ["j2"], "published again rather than lost"
    assert RELEASE_HOLD_MS > 60_000, "and its slot is still held for it"


def test_counts_show_running_parked_and_reserved_per_key(make_state: MakeState) -> None:
    book = _book(tenant={"concurrency": 1, "key": "tenant"})
    state = make_state(book)
    _ask(state, book, "a1", "a", T0)
    _ask(state, book, "a2", "a", T0)
    _ask(state, book, "b1", "b", T0)
    counts = {(c.limit, c.key): c for c in state.counts(now_ms=T0)}
    assert counts["tenant", "a"].running == 1
    assert counts["tenant", "a"].parked == 1
    assert counts["tenant", "b"].running == 1
    assert counts["tenant", "b"].parked == 0


def test_a_copy_of_a_job_another_live_worker_runs_waits_and_never_runs_beside_it(
    make_state: MakeState,
) -> None:
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "j1", "", T0, holder="w1").verdict is Verdict.ADMITTED
    # w1 lost the broker, which delivered j1 again, to w2, while w1 still runs it.
    copy = _ask(state, book, "j1", "", T0 + 1000, holder="w2")
    assert copy.verdict is Verdict.WAIT, "never two runs of the key at once"
    assert copy.until_ms == T0 + SLOT_LEASE_MS, "until w1's lease would run out"
    state.sweep("w1", now_ms=T0 + 10_000)  # w1 is alive: it renews
    again = _ask(state, book, "j1", "", T0 + SLOT_LEASE_MS + 1, holder="w2")
    assert again.verdict is Verdict.WAIT, "still running on w1, whose lease was renewed"
    state.release("j1", now_ms=T0 + 20_000)
    assert _ask(state, book, "j1", "", T0 + 21_000, holder="w2").verdict is Verdict.ADMITTED, (
        "once w1's run gave the slot back, the copy runs"
    )


def test_a_copy_of_a_dead_workers_job_takes_its_slot_over_once_the_lease_ran_out(
    make_state: MakeState,
) -> None:
    book = _book(one={"concurrency": 1})
    state = make_state(book)
    assert _ask(state, book, "j1", "", T0, holder="dead").verdict is Verdict.ADMITTED
    assert _ask(state, book, "j1", "", T0 + 1000, holder="w2").verdict is Verdict.WAIT
    late = _ask(state, book, "j1", "", T0 + SLOT_LEASE_MS + 1, holder="w2")
    assert late.verdict is Verdict.ADMITTED, "the dead worker's lease ran out: taken over"
    assert [(c.running, c.parked) for c in state.counts(now_ms=T0 + SLOT_LEASE_MS + 1)] == [(1, 0)]
