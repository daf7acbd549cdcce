"""The job timeout: interrupting a handler's thread, and noticing one that will not stop.

Python cannot kill a thread. A job that outlives its timeout gets its cancellation flag
set and :class:`JobTimeout` raised asynchronously in its thread (as Dramatiq's time
limit does); the thread's slot comes back only when it has really returned. A thread
still running ``grace`` seconds later is handed to ``on_stuck`` (the dispatcher reports
it and settles its delivery as timed out, so the broker is not kept waiting).

Owns: the race between a handler returning and its timer firing (:class:`TimedRun`).
Must never: leave a pending :class:`JobTimeout` in a thread after its handler is over,
or settle a delivery twice (the thread and the watchdog agree through one lock).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from queuey_core.clock import Clock
from queuey_core.context import JobContext
from queuey_core.errors import JobTimeout
from queuey_core.worker.outcome import Outcome, format_traceback

logger = logging.getLogger(__name__)


class RunState(enum.Enum):
    RUNNING = 1
    TIMED_OUT = 2
    ABANDONED = 3
    DONE = 4


class TimedRun:
    """The race between a job's thread finishing and its timeout firing, refereed."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.thread_id = threading.get_ident()
        self.lock = threading.Lock()
        self.state = RunState.RUNNING

    def time_out(self) -> bool:
        """Timer side: mark timed out and interrupt the thread, unless it already ended."""
        with self.lock:
            if self.state is not RunState.RUNNING:
                return False
            self.state = RunState.TIMED_OUT
            self.ctx.cancel_event.set()
            set_async_exc(self.thread_id, JobTimeout)
            return True

    def abandon(self) -> bool:
        """Watchdog side: take over settling a thread that ignored its timeout."""
        with self.lock:
            if self.state is not RunState.TIMED_OUT:
                return False
            self.state = RunState.ABANDONED
            return True

    def finish(self) -> RunState:
        """Thread side: the handler is over. Returns the state it ended from.

        After this returns no JobTimeout can land in the thread any more: a pending one
        is cleared under the same lock the timer raises it under.
        """
        with self.lock:
            previous = self.state
            self.state = RunState.DONE
            if previous is not RunState.RUNNING:
                set_async_exc(self.thread_id, None)
            return previous


def set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    # The only way CPython offers to interrupt another thread (Dramatiq's time limit
    # does the same). It lands at the next bytecode boundary, not inside a C call.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


def run_with_timeout(
    call: Callable[[], Outcome],
    ctx: JobContext,
    *,
    timeout: float,
    grace: float,
    clock: Clock,
    timed_out: Outcome,
    on_stuck: Callable[[], None],
    fields: dict[str, Any],
) -> Outcome | None:
    """Run ``call`` under ``timeout``; None if ``on_stuck`` already took the delivery over.

    ``on_stuck`` runs (on the clock's thread) when the thread is still busy ``grace``
    seconds after its timeout; it must not block. A job interrupted by its timeout ends
    as ``timed_out``, with the traceback of where the interruption landed.
    """
    run = TimedRun(ctx)

    def on_timeout() -> None:
        if run.time_out():
            logger.warning("job timed out after %gs; interrupting it", timeout, extra=fields)
            clock.call_later(grace, check_stuck)

    def check_stuck() -> None:
        if run.abandon():
            on_stuck()

    timer = clock.call_later(timeout, on_timeout)
    outcome: Outcome = timed_out
    interrupted = ""
    try:
        outcome = call()
    except JobTimeout as exc:
        # Where the handler was when the timeout landed: the clue to a slow job.
        interrupted = format_traceback(exc)
    finally:
        timer.cancel()
    while True:
        # A JobTimeout raised just as the handler returned may still land here;
        # finish() clears any that is pending, so loop until it has run.
        try:
            ended_from = run.finish()
            break
        except JobTimeout:
            continue
    if ended_from is RunState.ABANDONED:
        return None
    if ended_from is RunState.TIMED_OUT:
        return replace(timed_out, traceback=interrupted) if interrupted else timed_out
    return outcome
