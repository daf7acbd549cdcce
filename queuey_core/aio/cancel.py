"""A job's cancellation flag, awaitable: what ``await ctx.wait_async()`` waits on.

The flag is a :class:`threading.Event`, set from other threads (the job's timeout on the
clock's thread, a forced stop). An async job's flag is a :class:`LoopCancelEvent`: setting
it also wakes, on the job's event loop, every coroutine awaiting it, so waiting costs no
thread and no polling. Any other event (a context made by hand, in a test) is polled.

Owns: the bridge from the thread-side flag to the loop. Must never: block the loop, or
touch an asyncio object from a thread other than its loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from queuey_core.cancel_flag import CancelEvent

#: How often a plain threading.Event is looked at while awaited (not the worker's).
POLL = 0.05


class LoopCancelEvent(CancelEvent):
    """A cancellation flag that wakes the coroutines awaiting it on ``loop``.

    Its lock too is made on first use (:class:`~queuey_core.cancel_flag.CancelEvent`):
    one is made for every async job, and a no-op job never touches it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flag = False  # CancelEvent's own __init__, inlined: one a job
        self._loop = loop
        self._awaited: asyncio.Event | None = None

    def set(self) -> None:
        """Set the flag (from any thread) and wake its waiters on the loop."""
        super().set()
        if self._awaited is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._awaited.set)

    def awaitable(self) -> asyncio.Event:
        """The loop-side event (on the loop's thread only), set once the flag is."""
        if self._awaited is None:
            self._awaited = asyncio.Event()
            if self.is_set():
                self._awaited.set()
        return self._awaited

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this flag's waiters live on ``loop``."""
        return loop is self._loop


async def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Await ``event`` for up to ``timeout`` seconds (None: for ever); True if it is set."""
    if event.is_set():
        return True
    loop = asyncio.get_running_loop()
    if isinstance(event, LoopCancelEvent) and event.on_loop(loop):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.awaitable().wait(), timeout)
        return event.is_set()
    deadline = None if timeout is None else loop.time() + timeout
    while not event.is_set():
        left = POLL if deadline is None else min(POLL, deadline - loop.time())
        if left <= 0:
            break
        await asyncio.sleep(left)
    return event.is_set()
