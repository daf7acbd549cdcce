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
from dataclasses import replace
from typing import Any, NamedTuple

from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job
from queuey_core.worker.outcome import SUCCESS, Kind, Outcome, format_traceback, outcome_of
from queuey_core.worker.timeout import RunState as State

logger = logging.getLogger(__name__)


class AsyncJob(NamedTuple):
    """Everything the loop needs to run one async job and hand back its outcome (a
    NamedTuple: one is made for every job, and a frozen dataclass is built an attribute
    at a time)."""

    handler: JobHandler
    job: Job
    ctx: JobContext
    queue: str
    timeout: float | None
    fields: dict[str, Any]
    #: Settles the delivery for an outcome (hooks, logs, the broker); may block.
    settle: Callable[[Outcome], None]
    #: The outcome of a timeout (a retryable failure).
    timed_out: Outcome
    #: Tells the hooks the job timed out, with the error (before its settle); may block.
    on_timed_out: Callable[[str], None]
    #: Its delivery acks without waiting (an early ack, or a settle in process): a
    #: success is settled on the loop itself.
    success_here: bool = False


class AsyncRun:
    """The race between a job's coroutine ending, its timeout, and a forced stop."""

    def __init__(self, forced: bool = False) -> None:
        self.lock = threading.Lock()
        self.state = State.RUNNING
        #: Cancelled by a forced stop (or handed over after one: never started).
        self.forced = forced
        #: The job's task, set by whoever creates it (so no coroutine asks for it).
        self.task: asyncio.Task[None] | None = None

    def time_out(self) -> bool:
        """Timer side: mark timed out, unless it already ended."""
        with self.lock:
            if self.state is not State.RUNNING:
                return False
            self.state = State.TIMED_OUT
            return True

    def abandon(self) -> bool:
        """Watchdog side: take over settling a coroutine that ignored its timeout."""
        with self.lock:
            if self.state is not State.TIMED_OUT:
                return False
            self.state = State.ABANDONED
            return True

    def finish(self) -> State:
        """Loop side: the coroutine is over. Returns the state it ended from."""
        with self.lock:
            previous, self.state = self.state, State.DONE
            return previous


async def run_job(
    item: AsyncJob,
    run: AsyncRun,
    *,
    loop: asyncio.AbstractEventLoop,
    clock: Clock,
    grace: float,
    on_stuck: Callable[[AsyncJob], None],
    on_stuck_ended: Callable[[AsyncJob], None],
) -> Outcome | None:
    """Run ``item`` under its timeout, in ``run.task`` on ``loop``; its outcome, or None
    when it must not be settled here (a stuck coroutine's delivery was settled without
    it; a forced stop)."""
    task = run.task
    assert task is not None

    def cancel() -> None:
        if not task.done():
            task.cancel("job timed out")

    def on_timeout() -> None:  # on the clock's thread: the loop may be blocked
        if not run.time_out():
            return
        logger.warning("job timed out after %gs; cancelling it", item.timeout, extra=item.fields)
        item.ctx.cancel_event.set()
        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # the loop is closed: the coroutine is long over
            return
        clock.call_later(grace, check_stuck)

    def check_stuck() -> None:
        if run.abandon():
            on_stuck(item)

    if run.forced:  # handed over after a forced stop: never started
        raise asyncio.CancelledError
    timer = clock.call_later(item.timeout, on_timeout) if item.timeout is not None else None
    outcome: Outcome = item.timed_out
    interrupted = ""
    try:
        result = await item.handler(item.job, item.ctx)  # type: ignore[misc]
        outcome = SUCCESS if result is None else Outcome(Kind.SUCCESS, result=result)
    except asyncio.CancelledError as exc:
        if not run.forced and run.state in (State.TIMED_OUT, State.ABANDONED):
            task.uncancel()  # ours, the timeout's: the job ends here, the task goes on
            interrupted = format_traceback(exc)
        else:
            run.finish()
            raise
    except BaseException as exc:  # how the handler failed (its own JobTimeout included)
        outcome = outcome_of(exc)
    finally:
        if timer is not None:
            timer.cancel()
    ended_from = run.finish()
    if run.forced:
        return None
    if ended_from is State.ABANDONED:
        on_stuck_ended(item)
        return None
    if ended_from is State.TIMED_OUT:
        return replace(item.timed_out, traceback=interrupted) if interrupted else item.timed_out
    return outcome
