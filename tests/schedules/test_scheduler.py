"""The scheduler on a manual clock: who fires, when, and what happens around hand-overs.

Several schedulers share one MemoryBallot (the election), one MemoryScheduleState (the
last fired ticks) and one backend; time moves only when a test advances the clock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from datetime import datetime
from typing import ClassVar

import pytest

from queuey_core import BackendError
from queuey_core import Envelope
from queuey_core import Job
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import QueueyError
from queuey_core.schedules import CatchUp
from queuey_core.schedules import Cron
from queuey_core.schedules import Every
from queuey_core.schedules import Firing
from queuey_core.schedules import MemoryBallot
from queuey_core.schedules import MemoryElection
from queuey_core.schedules import MemoryScheduleState
from queuey_core.schedules import Schedule
from queuey_core.schedules import Scheduler
from queuey_core.schedules import firing_id
from tests.support import ALPHA
from tests.support import Greet
from tests.support import OnThread
from tests.support import seed_queues
from tests.support import wait_for

MINUTE = 60.0


def wall(iso: str) -> int:
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


class Ping(Job):
    NAME: ClassVar[str] = "test.sched.ping"
    QUEUE: ClassVar[str] = ALPHA
    n: int


class Published(MemoryBackend):
    """A MemoryBackend that keeps every envelope published, and can be made to refuse."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.envelopes: list[Envelope] = []
        self.refuse = False
        self._record_lock = threading.Lock()

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        if self.refuse:
            raise BackendError("refused (test)")
        super().publish(envelope, delay=delay)
        with self._record_lock:
            self.envelopes.append(envelope)

    def ids(self) -> Counter[str]:
        with self._record_lock:
            return Counter(str(e.job_id) for e in self.envelopes)


class World:
    """Schedulers sharing a ballot, a state and a backend, on one manual clock."""

    def __init__(self, start: str = "2026-01-01T00:00:30+00:00") -> None:
        self.clock = ManualClock(start_wall_ms=wall(start))
        self.ballot = MemoryBallot()
        self.state = MemoryScheduleState()
        self.backend = Published(self.clock)
        self.queues: QueueSet = seed_queues()
        self.firings: list[Firing] = []

    def scheduler(
        self,
        *schedules: Schedule,
        grace: float = 10.0,
        on_fire: Callable[[Firing], None] | None = None,
        on_fire_failed: Callable[[str, QueueyError], None] | None = None,
    ) -> tuple[Scheduler, MemoryElection]:
        """A scheduler of this world; its firings go to ``self.firings`` unless ``on_fire``
        takes them."""
        election = MemoryElection(self.ballot)
        s = Scheduler(
            self.backend,
            self.queues,
            schedules,
            election=election,
            state=self.state,
            clock=self.clock,
            grace=grace,
            on_fire=self.firings.append if on_fire is None else on_fire,
            on_fire_failed=on_fire_failed,
        )
        return s, election

    def two_candidates(self) -> tuple[Scheduler, MemoryElection, Scheduler, MemoryElection]:
        """Two schedulers of ``every_minute()``, both standing for election."""
        first, e1 = self.scheduler(every_minute())
        second, e2 = self.scheduler(every_minute())
        e1.start(lambda: None)
        e2.start(lambda: None)
        return first, e1, second, e2

    def at(self, iso: str) -> None:
        """Move the clock to ``iso`` (forward only)."""
        self.clock.advance((wall(iso) - self.clock.wall_ms()) / 1000)


def every_minute(name: str = "ping", catch_up: CatchUp = CatchUp.LATEST) -> Schedule:
    return Schedule(name, Ping(n=1), Every(MINUTE), catch_up=catch_up)


@pytest.fixture
def world() -> World:
    return World()


def test_only_the_leader_fires(world: World) -> None:
    first, e1, second, _ = world.two_candidates()
    for minute in range(1, 6):
        world.at(f"2026-01-01T00:0{minute}:00+00:00")
        first.step()
        second.step()
    assert first.is_leader()
    assert not second.is_leader()
    assert [f.tick_ms for f in world.firings] == [
        wall(f"2026-01-01T00:0{m}:00+00:00") for m in range(1, 6)
    ]
    ids = world.backend.ids()
    assert len(ids) == 5, ids
    assert set(ids.values()) == {1}, f"one firing per tick: {ids}"
    assert e1.confirms == 5, "leadership is confirmed before each firing"


def test_a_firing_is_an_ordinary_first_attempt_with_the_ticks_job_id(world: World) -> None:
    s, e = world.scheduler(Schedule("greeting", Greet(name="ada"), Every(MINUTE), priority=7))
    e.start(lambda: None)
    world.at("2026-01-01T00:01:00+00:00")
    s.step()
    [env] = world.backend.envelopes
    tick = wall("2026-01-01T00:01:00+00:00")
    assert env.job_id == firing_id("greeting", tick)
    assert (env.job_type, env.queue, env.attempt, env.priority) == ("test.greet", ALPHA, 1, 7)
    assert env.payload == {"name": "ada"}
    assert world.backend.pending(ALPHA) == 1
    assert world.state.last_fired(["greeting"]) == {"greeting": tick}


def test_the_next_leader_takes_over_without_firing_a_tick_twice(world: World) -> None:
    first, e1, second, _ = world.two_candidates()
    world.at("2026-01-01T00:01:00+00:00")
    first.step()
    second.step()
    world.ballot.kill(e1)  # its connection drops
    world.at("2026-01-01T00:01:05+00:00")
    assert first.step() is None, "a dead candidate fires nothing"
    second.step()
    assert second.is_leader()
    world.at("2026-01-01T00:02:00+00:00")
    first.step()
    second.step()
    ids = world.backend.ids()
    assert [f.tick_ms for f in world.firings] == [
        wall("2026-01-01T00:01:00+00:00"),
        wall("2026-01-01T00:02:00+00:00"),
    ]
    assert set(ids.values()) == {1}


def test_a_tick_missed_during_the_hand_over_is_fired_by_the_new_leader(world: World) -> None:
    first, e1, second, _ = world.two_candidates()
    world.at("2026-01-01T00:01:00+00:00")
    first.step()
    world.ballot.kill(e1)
    world.at("2026-01-01T00:02:30+00:00")  # 00:02 passed with nobody leading
    second.step()
    assert [f.tick_ms for f in world.firings] == [
        wall("2026-01-01T00:01:00+00:00"),
        wall("2026-01-01T00:02:00+00:00"),
    ], "catch_up 'latest' fires the missed tick once"


def test_a_hand_over_slower_than_two_ticks_but_within_the_grace_loses_no_tick(
    world: World,
) -> None:
    every_second = Schedule("fast", Ping(n=1), Every(1))
    first, e1 = world.scheduler(every_second)
    second, e2 = world.scheduler(every_second)
    e1.start(lambda: None)
    e2.start(lambda: None)
    world.at("2026-01-01T00:01:00+00:00")
    first.step()
    second.step()
    world.ballot.kill(e1)  # frozen: its connection is closed a few heartbeats later
    world.at("2026-01-01T00:01:04.300000+00:00")
    second.step()
    assert [f.tick_ms for f in world.firings] == [
        wall(f"2026-01-01T00:01:0{s}+00:00") for s in range(5)
    ], "every tick of the 4.3 s gap fires (grace 10 s), whatever the catch_up"
    assert set(world.backend.ids().values()) == {1}


def test_a_leader_that_cannot_confirm_fires_nothing(world: World) -> None:
    s, e = world.scheduler(every_minute())
    e.start(lambda: None)
    world.at("2026-01-01T00:01:00+00:00")
    e.confirm = lambda: False  # type: ignore[method-assign]
    s.step()
    assert world.firings == []
    assert not s.is_leader()


@pytest.mark.parametrize(
    ("catch_up", "fired_minutes"),
    [(CatchUp.NONE, []), (CatchUp.LATEST, [5]), (CatchUp.ALL, [2, 3, 4, 5])],
)
def test_a_restart_catches_up_as_the_schedule_says(
    world: World, catch_up: CatchUp, fired_minutes: list[int]
) -> None:
    world.state.record("ping", wall("2026-01-01T00:01:00+00:00"))  # fired before a restart
    world.at("2026-01-01T00:05:30+00:00")  # 00:02 .. 00:05 were missed
    s, e = world.scheduler(every_minute(catch_up=catch_up))
    e.start(lambda: None)
    delay = s.step()
    assert [f.tick_ms for f in world.firings] == [
        wall(f"2026-01-01T00:0{m}:00+00:00") for m in fired_minutes
    ]
    assert delay == 30.0, "then it sleeps until the next tick"
    world.at("2026-01-01T00:06:00+00:00")
    s.step()
    assert world.firings[-1].tick_ms == wall("2026-01-01T00:06:00+00:00")


def test_a_new_schedule_starts_at_its_next_tick(world: World) -> None:
    s, e = world.scheduler(every_minute())
    e.start(lambda: None)
    assert s.step() == 30.0
    assert world.firings == []


def test_a_refused_firing_is_tried_again_not_lost(world: World) -> None:
    s, e = world.scheduler(every_minute())
    e.start(lambda: None)
    world.at("2026-01-01T00:01:00+00:00")
    world.backend.refuse = True
    assert s.step() == 1.0, "retry after a second"
    assert world.firings == []
    world.backend.refuse = False
    world.at("2026-01-01T00:01:01+00:00")
    s.step()
    assert [f.tick_ms for f in world.firings] == [wall("2026-01-01T00:01:00+00:00")]


def test_several_schedules_fire_in_tick_order() -> None:
    world = World(start="2026-01-01T00:00:00+00:00")
    s, e = world.scheduler(
        Schedule("fast", Ping(n=1), Every(MINUTE)),
        Schedule("slow", Ping(n=2), Cron("*/2 * * * *")),
    )
    e.start(lambda: None)
    for minute in range(1, 5):
        world.at(f"2026-01-01T00:0{minute}:00+00:00")
        s.step()
    assert [
        (f.schedule, (f.tick_ms - wall("2026-01-01T00:00:00+00:00")) // 60_000)
        for f in world.firings
    ] == [
        ("fast", 1),
        ("fast", 2),
        ("slow", 2),
        ("fast", 3),
        ("fast", 4),
        ("slow", 4),
    ]


def nightly_in_paris(start: str, *, step: float, steps: int) -> World:
    """A scheduler of "30 2 * * *" in Europe/Paris from ``start``, stepped ``steps`` times
    ``step`` seconds apart."""
    world = World(start=start)
    s, e = world.scheduler(Schedule("nightly", Ping(n=1), Cron("30 2 * * *", "Europe/Paris")))
    e.start(lambda: None)
    for _ in range(steps):
        world.clock.advance(step)
        s.step()
    return world


def test_a_cron_in_a_time_zone_fires_through_spring_forward() -> None:
    # Europe/Paris, 2026-03-29: 02:00 becomes 03:00; "30 2 * * *" fires at 03:00 that day.
    world = nightly_in_paris("2026-03-28T12:00:00+01:00", step=3600, steps=3 * 24)
    assert [f.tick_ms for f in world.firings] == [
        wall("2026-03-29T03:00:00+02:00"),
        wall("2026-03-30T02:30:00+02:00"),
        wall("2026-03-31T02:30:00+02:00"),
    ]


def test_a_cron_in_a_time_zone_fires_both_instants_of_a_repeated_hour() -> None:
    world = nightly_in_paris("2026-10-24T12:00:00+02:00", step=900, steps=2 * 24 * 4)
    assert [f.tick_ms for f in world.firings] == [
        wall("2026-10-25T02:30:00+02:00"),
        wall("2026-10-25T02:30:00+01:00"),
        wall("2026-10-26T02:30:00+01:00"),
    ]
    assert len(world.backend.ids()) == 3


# -- the loop, on its own thread -------------------------------------------------------


class Running(OnThread):
    """A scheduler's loop on its own thread."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        super().__init__(scheduler.run, "test-scheduler")

    def stop(self) -> None:
        self.scheduler.stop()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        r.scheduler.stop()


def test_the_loop_wakes_at_each_tick_and_hands_over_when_stopped(
    world: World, running: list[Running]
) -> None:
    a = Running(world.scheduler(every_minute())[0])
    running.append(a)
    wait_for(a.scheduler.is_leader)
    b = Running(world.scheduler(every_minute())[0])
    running.append(b)
    world.at("2026-01-01T00:01:00+00:00")
    wait_for(lambda: len(world.firings) == 1)
    a.stop()
    wait_for(b.scheduler.is_leader)
    world.at("2026-01-01T00:02:00+00:00")
    wait_for(lambda: len(world.firings) == 2)
    world.at("2026-01-01T00:03:00+00:00")
    wait_for(lambda: len(world.firings) == 3)
    b.stop()
    assert set(world.backend.ids().values()) == {1}
    assert world.ballot.leader() is None


def test_the_loop_ends_with_the_error_when_the_election_fails_for_good(
    world: World, running: list[Running]
) -> None:
    scheduler, election = world.scheduler(every_minute())
    r = Running(scheduler)
    running.append(r)
    wait_for(scheduler.is_leader)
    world.ballot.kill(election, "lost the broker")
    r.thread.join(5)
    assert isinstance(r.error, BackendError)
    assert "lost the broker" in str(r.error)


def test_a_tick_whose_job_is_already_enqueued_is_fired_by_that_job_not_twice(
    world: World,
) -> None:
    # A leader fired a tick and could not record it; the next leader fires it again
    # under the same job id. On a backend that keeps job ids unique, that is a duplicate
    # of the job already waiting: the tick counts as fired, and is not tried again.
    first, e1 = world.scheduler(every_minute())
    e1.start(lambda: None)
    world.at("2026-01-01T00:01:00+00:00")
    first.step()
    forgot = World()  # the same broker, a state that lost the record
    forgot.backend = world.backend
    again, e2 = forgot.scheduler(every_minute())
    e2.start(lambda: None)
    forgot.at("2026-01-01T00:01:00+00:00")
    again.step()
    tick = wall("2026-01-01T00:01:00+00:00")
    assert world.backend.ids() == {str(firing_id("ping", tick)): 1}, "published once"
    assert [f.job_id for f in forgot.firings] == [str(firing_id("ping", tick))]
    assert forgot.state.last_fired(["ping"]) == {"ping": tick}, "recorded as fired"
