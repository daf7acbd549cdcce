"""The scheduler: stands for election, and while it leads, fires each schedule's ticks.

Owns: the loop (wait for leadership, read the last fired ticks, fire what is due,
sleep until the next tick), and the order of a firing: confirm leadership, enqueue
(confirmed by the broker), then record the tick. A crash between the enqueue and the
record makes the next leader fire that tick again under the same job id: duplicates
are possible around a hand-over, and a handler can tell them by id; losses are not.
Must never: fire while another scheduler leads, as far as a round trip to the
election can tell; sleep on real time in tests (time comes from the injected clock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuey_core.backends.base import Backend
from queuey_core.clock import Clock, SystemClock, Timer
from queuey_core.errors import ConfigError, DuplicateJobError, QueueyError
from queuey_core.producer import Producer
from queuey_core.queues import QueueSet
from queuey_core.schedules.election import Election
from queuey_core.schedules.schedule import Schedule
from queuey_core.schedules.state import ScheduleState
from queuey_core.schedules.ticks import due, firing_id

if TYPE_CHECKING:
    from queuey_core.flow.unique import Unique
    from queuey_core.flow.unique_keys import UniqueKeys

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Firing:
    """One tick of one schedule, enqueued."""

    schedule: str
    tick_ms: int
    job_id: str


class Scheduler:
    """Fires ``schedules`` while ``election`` says this scheduler leads.

    Args:
        backend: where the jobs are published.
        queues: the queue set the jobs' queues belong to.
        schedules: what to fire.
        election: decides which of several schedulers fires.
        state: where the last fired tick of each schedule is kept.
        clock: wall time and timers (a ManualClock in tests).
        grace: a tick at most this many seconds late is on time; later ones were
            missed and each schedule's ``catch_up`` decides.
        max_catch_up: ``catch_up = "all"`` fires at most this many missed ticks.
        retry_after: seconds before trying again after the broker refused something.
        max_wait: the longest sleep, so a wall clock that jumps is noticed.
        on_fire: called after each firing (tests, metrics).
        on_fire_failed: called with the schedule's name and the error when a firing
            fails (the broker did not take it; it is tried again after ``retry_after``).
        unique_keys, unique: the producer's (:class:`~queuey_core.producer.Producer`):
            a tick whose job is a duplicate is fired, by the job that holds the key.

    The scheduler owns ``election`` and ``state``: both are closed when :meth:`run` ends.
    After :meth:`run` raised, ``lost_the_broker`` tells whether the election failed for
    good (the broker stayed away longer than recovery allows) rather than at the start.
    """

    def __init__(
        self,
        backend: Backend,
        queues: QueueSet,
        schedules: Sequence[Schedule],
        *,
        election: Election,
        state: ScheduleState,
        clock: Clock | None = None,
        grace: float = 10.0,
        max_catch_up: int = 1000,
        retry_after: float = 1.0,
        max_wait: float = 60.0,
        on_fire: Callable[[Firing], None] | None = None,
        on_fire_failed: Callable[[str, QueueyError], None] | None = None,
        unique_keys: UniqueKeys | None = None,
        unique: Mapping[str, Unique] | None = None,
    ) -> None:
        names = [s.name for s in schedules]
        if len(set(names)) != len(names):
            raise ConfigError("two schedules share a name")
        for s in schedules:
            s.check(queues)
        self._backend = backend
        self._queues = queues
        self._unique_keys = unique_keys
        self._unique = unique
        self._schedules = list(schedules)
        self._election = election
        self._state = state
        self._clock: Clock = clock or SystemClock()
        self._grace_ms = round(grace * 1000)
        self._max_catch_up = max_catch_up
        self._retry_after = retry_after
        self._max_wait = max_wait
        self._on_fire = on_fire
        self._on_fire_failed = on_fire_failed
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._cursors: dict[str, int | None] | None = None
        self._producer: Producer | None = None
        self.lost_the_broker = False

    @property
    def schedules(self) -> list[Schedule]:
        """What this scheduler fires."""
        return list(self._schedules)

    def is_leader(self) -> bool:
        """Whether this scheduler is the one firing."""
        return self._cursors is not None

    def run(self) -> None:
        """Stand for election and fire while leading, until :meth:`stop`.

        Raises:
            BackendError: the broker cannot be reached, or the election failed for good
                (the broker stayed away longer than recovery allows).
        """
        self._election.start(self._wake.set)
        logger.info(
            "scheduler started: %d schedules; standing for election",
            len(self._schedules),
            extra={"schedules": [s.name for s in self._schedules]},
        )
        try:
            while not self._stopped.is_set():
                self._wake.clear()
                error = self._election.error
                if error is not None:
                    self.lost_the_broker = True
                    raise error
                started = self._clock.wall_ms()
                self._wait(self.step(), started)
        finally:
            self._election.close()
            self._state.close()
            if self._cursors is not None:
                logger.info("stepped down as the active scheduler")
            self._cursors = None

    def stop(self) -> None:
        """Make :meth:`run` return (from any thread); another scheduler takes over."""
        self._stopped.set()
        self._wake.set()

    def step(self) -> float | None:
        """Fire whatever is due now, if leading; seconds until the next look.

        None means: nothing to do until leadership changes.
        """
        if not self._election.is_leader():
            if self._cursors is not None:
                logger.warning("no longer the active scheduler")
            self._cursors = None
            return None
        now = self._clock.wall_ms()
        if self._cursors is None:
            try:
                queues = sorted({s.job.QUEUE for s in self._schedules})
                # A producer of the schedules' queues only: it declares them, as taking
                # over must, and fires through the same checks as any enqueue.
                self._producer = Producer(
                    self._backend,
                    QueueSet(self._queues[q] for q in queues),
                    clock=self._clock,
                    unique_keys=self._unique_keys,
                    unique=self._unique,
                )
                last = self._state.last_fired([s.name for s in self._schedules])
            except ConfigError:
                raise  # a queue declared elsewhere with other settings: no retry fixes it
            except QueueyError as exc:
                logger.error("cannot take over as the active scheduler: %s", exc)
                return self._retry_after
            self._cursors = {s.name: last.get(s.name) for s in self._schedules}
            logger.info("became the active scheduler", extra={"last_fired": last})
        return self._fire_due(self._cursors, now)

    def _fire_due(self, cursors: dict[str, int | None], now: int) -> float:
        plans = {
            s.name: due(
                s.trigger,
                cursors[s.name],
                now,
                catch_up=s.catch_up,
                grace_ms=self._grace_ms,
                limit=self._max_catch_up,
            )
            for s in self._schedules
        }
        for s in self._schedules:
            if plans[s.name].skipped:
                logger.warning(
                    "schedule %s: skipped %d missed ticks (catch_up = %s)",
                    s.name,
                    plans[s.name].skipped,
                    s.catch_up.value,
                    extra={"schedule": s.name},
                )
        by_name = {s.name: s for s in self._schedules}
        order = sorted((tick, name) for name, plan in plans.items() for tick in plan.ticks)
        if order and not self._election.confirm():
            logger.warning("lost the election before firing; firing nothing")
            self._cursors = None
            return self._retry_after
        for tick, name in order:
            if self._stopped.is_set() or not self._election.is_leader():
                return 0.0
            try:
                self._fire(by_name[name], tick)
            except QueueyError as exc:
                logger.error(
                    "schedule %s: firing failed; trying again in %gs: %s",
                    name,
                    self._retry_after,
                    exc,
                    extra={"schedule": name},
                )
                if self._on_fire_failed is not None:
                    self._on_fire_failed(name, exc)
                return self._retry_after
            cursors[name] = tick
        for name, plan in plans.items():
            cursors[name] = plan.cursor
        return self._until_next(cursors, now)

    def _fire(self, schedule: Schedule, tick: int) -> None:
        assert self._producer is not None, "set when this scheduler took over"
        try:
            job_id = self._producer.enqueue(
                schedule.job, priority=schedule.priority, job_id=firing_id(schedule.name, tick)
            )
        except DuplicateJobError as exc:
            # The tick's job is already enqueued (fired by a leader that could not record
            # it: its job id is held), or the job's unique key is held by another: the
            # tick is fired, by that job. Firing it again would be the duplicate.
            job_id = exc.existing
            logger.info(
                "schedule %s: tick already enqueued as job %s",
                schedule.name,
                job_id,
                extra={"schedule": schedule.name, "job_id": str(job_id)},
            )
        try:
            self._state.record(schedule.name, tick)
        except QueueyError as exc:
            # Enqueued but not recorded: a later leader fires this tick again under the
            # same job id. Go on: this scheduler remembers it fired.
            logger.warning(
                "schedule %s: fired, but could not record it: %s",
                schedule.name,
                exc,
                extra={"schedule": schedule.name},
            )
        logger.info(
            "schedule %s fired",
            schedule.name,
            extra={
                "schedule": schedule.name,
                "tick": tick,
                "job_id": str(job_id),
                "job_type": schedule.job_type,
                "queue": schedule.job.QUEUE,
            },
        )
        if self._on_fire is not None:
            self._on_fire(Firing(schedule.name, tick, str(job_id)))

    def duplicates(self) -> dict[str, int]:
        """Firings that were duplicates (their job already enqueued), by job type."""
        return {} if self._producer is None else self._producer.unique.duplicates()

    def _until_next(self, cursors: dict[str, int | None], now: int) -> float:
        upcoming = min(
            s.trigger.next_after(c if (c := cursors[s.name]) is not None else now)
            for s in self._schedules
        )
        return max(0.0, (upcoming - now) / 1000)

    def _wait(self, delay: float | None, since_ms: int) -> None:
        """Sleep until ``delay`` seconds after ``since_ms`` (wall), or a wake-up.

        Counted from when the step began, not from now: time the step took (a slow
        broker, or a test advancing the clock meanwhile) does not push the tick back.
        """
        if self._stopped.is_set():
            return
        seconds = self._max_wait if delay is None else min(delay, self._max_wait)
        due_ms = since_ms + seconds * 1000
        timer: Timer = self._clock.call_later(
            max(0.0, (due_ms - self._clock.wall_ms()) / 1000), self._wake.set
        )
        if self._clock.wall_ms() >= due_ms:  # it came while the timer was being set
            self._wake.set()
        try:
            self._wake.wait()
        finally:
            timer.cancel()
