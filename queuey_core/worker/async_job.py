"""One async job on the worker's event loop: its handler awaited, its timeout, its end.

A coroutine, unlike a thread, can be cancelled for real: a job that outlives its timeout
gets its cancellation flag set and its task cancelled, so ``CancelledError`` is raised
at the ``await`` it waits on and its ``finally`` blocks run. A coroutine that ignores it
(catches ``CancelledError`` and goes on, or blocks the loop) is handled as a thread that
ignores its timeout (:mod:`.timeout`): ``grace`` seconds later it is reported as stuck
and its delivery settled as timed out without it, its permit kept until it ends.

Owns: the race between the coroutine ending and its timer firing (:class:`AsyncRun`),
refereed under one lock, on the clock's thread and the loop's. Must never: settle a
delivery twice, or settle one whose coroutine a forced stop cancelled (the broker gets
it back with the connection).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol

from queuey_core.backends.base import Delivery
from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job
from queuey_core.worker.outcome import SUCCESS, Kind, Outcome, format_traceback, outcome_of
from queuey_core.worker.timeout import RunState as State

logger = logging.getLogger(__name__)


class AsyncSettler(Protocol):
    """Settles async jobs' deliveries (the dispatcher): one for every job, so that a job
    in flight carries no callbacks (closures) of its own."""

    def settle_async(self, item: AsyncJob, outcome: Outcome) -> None:
        """Settle ``item``'s delivery for ``outcome`` (hooks, logs, the broker; a timeout
        is told to the hooks first); may block."""


class AsyncJob(NamedTuple):
    """Everything the loop needs to run one async job and hand back its outcome.

    A NamedTuple, and no closures: a thousand jobs in flight are a thousand of each
    object a job holds, which the cyclic garbage collector scans over and over (it
    cost more than the jobs themselves before they were cut down).
    """

    handler: JobHandler
    job: Job
    ctx: JobContext
    queue: str
    timeout: float | None
    fields: dict[str, Any]
    #: The delivery, and the dispatcher's route for it (opaque here): for ``settler``.
    delivery: Delivery
    route: Any
    settler: AsyncSettler
    #: The outcome of a timeout (a retryable failure).
    timed_out: Outcome
    #: Its delivery acks without waiting (an early ack, or a settle in process): a
    #: success is settled on the loop itself.
    success_here: bool = False


class Cap:
    """One async cap: how many of its jobs may run, and how many do (under the
    runner's lock: a plain lock and a counter cost a fraction of a Semaphore)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


@dataclass(frozen=True, slots=True)
class Surroundings:
    """What every async job of a runner shares: made once, referenced by each run."""

    loop: asyncio.AbstractEventLoop
    clock: Clock
    #: Seconds a cancelled coroutine gets before it is reported stuck.
    grace: float
    #: On the clock's thread: a coroutine outlived its timeout by ``grace``.
    on_stuck: Callable[[AsyncJob], None]
    on_stuck_ended: Callable[[AsyncJob], None]
    #: On the loop: the coroutine is over, with the outcome to settle (None: none).
    ended: Callable[[AsyncRun, Outcome | None], None]


#: Referees every run's race (clock's thread against the loop's): held for a few
#: bytecodes, so one lock for all costs nothing, and no job carries a lock of its own.
_RACE = threading.Lock()


class AsyncRun:
    """One async job on the loop: its task, its permit's cap, and the race between its
    coroutine ending, its timeout, and a forced stop."""

    __slots__ = ("around", "cap", "forced", "item", "state", "task")

    def __init__(self, item: AsyncJob, cap: Cap, around: Surroundings, forced: bool) -> None:
        self.item = item
        self.cap = cap
        self.around = around
        self.state = State.RUNNING
        #: Cancelled by a forced stop (or handed over after one: never started).
        self.forced = forced
        #: The job's task, set by whoever creates it (so no coroutine asks for it).
        self.task: asyncio.Task[None] | None = None

    def time_out(self) -> bool:
        """Timer side: mark timed out, unless it already ended."""
        with _RACE:
            if self.state is not State.RUNNING:
                return False
            self.state = State.TIMED_OUT
            return True

    def abandon(self) -> bool:
        """Watchdog side: take over settling a coroutine that ignored its timeout."""
        with _RACE:
            if self.state is not State.TIMED_OUT:
                return False
            self.state = State.ABANDONED
            return True

    def finish(self) -> State:
        """Loop side: the coroutine is over. Returns the state it ended from."""
        with _RACE:
            previous, self.state = self.state, State.DONE
            return previous

    def on_timeout(self) -> None:
        """The job's timer fired (on the clock's thread: the loop may be blocked)."""
        if not self.time_out():
            return
        item = self.item
        logger.warning("job timed out after %gs; cancelling it", item.timeout, extra=item.fields)
        item.ctx.cancel_event.set()
        try:
            self.around.loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop is closed: the coroutine is long over
            return
        self.around.clock.call_later(self.around.grace, self._check_stuck)

    def _cancel(self) -> None:
        task = self.task
        if task is not None and not task.done():
            task.cancel("job timed out")

    def _check_stuck(self) -> None:
        if self.abandon():
            self.around.on_stuck(self.item)


async def run_job(run: AsyncRun) -> None:
    """The task of ``run.item``: run it under its timeout, then hand ``ended`` its
    outcome, or None when it must not be settled (a stuck coroutine's delivery was
    settled without it; a forced stop). One coroutine a job, and no closure."""
    item = run.item
    settled: Outcome | None = None
    try:
        if run.forced:  # handed over after a forced stop: never started
            raise asyncio.CancelledError
        clock = run.around.clock
        timer = clock.call_later(item.timeout, run.on_timeout) if item.timeout is not None else None
        outcome: Outcome = item.timed_out
        interrupted = ""
        try:
            result = await item.handler(item.job, item.ctx)  # type: ignore[misc]
            outcome = SUCCESS if result is None else Outcome(Kind.SUCCESS, result=result)
        except asyncio.CancelledError as exc:
            if not run.forced and run.state in (State.TIMED_OUT, State.ABANDONED):
                # Ours, the timeout's: the job ends here, the task goes on.
                run.task.uncancel()  # type: ignore[union-attr]
                interrupted = format_traceback(exc)
            else:
                run.finish()
                raise
        except BaseException as exc:  # how the handler failed (its own JobTimeout included)
            outcome = outcome_of(exc)
        finally:
            if timer is not None:
                timer.cancel()
        settled = _ended_from(run, run.finish(), outcome, interrupted)
        if settled is None and run.forced:
            logger.warning(_FORCED, extra=item.fields)
    except asyncio.CancelledError:
        logger.warning(_FORCED, extra=item.fields)
    except BaseException:  # never expected: every outcome is classified above
        logger.critical("worker bug while running an async job", exc_info=True)
    finally:
        run.around.ended(run, settled)


_FORCED = "job cancelled: the worker is stopping at once; its delivery goes back to the broker"


def _ended_from(
    run: AsyncRun, ended_from: State, outcome: Outcome, interrupted: str
) -> Outcome | None:
    """What a coroutine that ended (from ``ended_from``) settles with, if anything."""
    if run.forced:
        return None
    if ended_from is State.ABANDONED:
        run.around.on_stuck_ended(run.item)
        return None
    if ended_from is State.TIMED_OUT:
        timed_out = run.item.timed_out
        return replace(timed_out, traceback=interrupted) if interrupted else timed_out
    return outcome
