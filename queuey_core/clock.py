"""Time, injected: the system clock in production, a manual clock in tests.

Everything in queuey that waits (held messages in the memory backend, job timeouts)
asks its clock for a timer instead of sleeping, so tests advance a :class:`ManualClock`
and never sleep through a real backoff or timeout.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


class Timer(Protocol):
    """A scheduled callback that can be cancelled before it fires."""

    def cancel(self) -> None:
        """Stop the callback from running, if it has not run yet."""


class Clock(Protocol):
    """Monotonic time for delays, wall time for timestamps, and timers."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` once, ``delay`` seconds from now, on a thread of the clock's."""

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds``."""


class _Entry:
    __slots__ = ("callback", "cancelled", "due", "on_cancel", "seq")

    def __init__(
        self,
        due: float,
        seq: int,
        callback: Callable[[], None],
        on_cancel: Callable[[], None] | None = None,
    ) -> None:
        self.due = due
        self.seq = seq
        self.callback: Callable[[], None] | None = callback
        self.cancelled = False
        self.on_cancel = on_cancel

    def __lt__(self, other: _Entry) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            # Let go of the callback now: a job's timeout timer closes over the job's
            # context, and would otherwise keep it alive until the timeout's due time.
            self.callback = None
            if self.on_cancel is not None:
                self.on_cancel()


#: How long the timer thread sleeps with no timer at all before it looks again.
_IDLE_LOOK = 1.0


class SystemClock:
    """Real time. Timers run on one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        # Taken as itself where nothing waits: a Condition's own `with` is two Python
        # calls more, twice a job (every job's timeout timer is set, then cancelled).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._cancelled = 0
        # When the timer thread wakes next, on its own: a timer due later needs no
        # wake-up (every job's timeout would otherwise cost a thread switch).
        self._wake_at = 0.0

    def _cancelled_one(self) -> None:
        # Cancelled entries wait in the heap for their due time; when they are most of
        # it (every finished job cancels its timeout), rebuild the heap without them.
        with self._lock:
            self._cancelled += 1
            if self._cancelled > 256 and self._cancelled * 2 > len(self._heap):
                self._heap = [e for e in self._heap if not e.cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def pending_timers(self) -> int:
        """How many timers are scheduled and not cancelled."""
        with self._cond:
            return sum(1 for e in self._heap if not e.cancelled)

    def monotonic(self) -> float:
        """See :meth:`Clock.monotonic`."""
        return time.monotonic()

    def wall_ms(self) -> int:
        """See :meth:`Clock.wall_ms`."""
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        """See :meth:`Clock.sleep`."""
        time.sleep(seconds)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """See :meth:`Clock.call_later`. Callbacks must be quick: they share one thread."""
        entry = _Entry(
            time.monotonic() + max(delay, 0.0), next(self._seq), callback, self._cancelled_one
        )
        with self._lock:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="queuey-timers", daemon=True
                )
                self._thread.start()
            if entry.due < self._wake_at:
                self._cond.notify()
        return entry

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0].cancelled:
                        heapq.heappop(self._heap)
                        self._cancelled = max(0, self._cancelled - 1)
                    now = time.monotonic()
                    if self._heap and self._heap[0].due <= now:
                        entry = heapq.heappop(self._heap)
                        self._wake_at = 0.0  # it looks at the heap again before it sleeps
                        break
                    # Idle, look again within a second rather than only when woken.
                    wait = self._heap[0].due - now if self._heap else _IDLE_LOOK
                    self._wake_at = now + wait
                    self._cond.wait(wait)
            callback = entry.callback
            if callback is not None and not entry.cancelled:
                try:
                    callback()
                except Exception:  # a broken callback must not kill every other timer
                    logger.exception("timer callback failed")


class ManualClock:
    """A clock that moves only when :meth:`advance` is called (tests).

    Timers due by the new time run in the advancing thread, in order of due time.
    :meth:`sleep` blocks until other threads advance the clock far enough; it waits in
    short real-time slices so that an asynchronous exception (a job timeout) still lands.
    """

    def __init__(self, start_wall_ms: int = 1_700_000_000_000) -> None:
        self._now = 0.0
        self._wall0 = start_wall_ms
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._lock = threading.RLock()

    def monotonic(self) -> float:
        """See :meth:`Clock.monotonic`."""
        with self._lock:
            return self._now

    def wall_ms(self) -> int:
        """See :meth:`Clock.wall_ms`."""
        with self._lock:
            return self._wall0 + int(self._now * 1000)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """See :meth:`Clock.call_later`. The callback runs inside a later :meth:`advance`."""
        with self._lock:
            entry = _Entry(self._now + max(delay, 0.0), next(self._seq), callback)
            heapq.heappush(self._heap, entry)
            return entry

    def advance(self, seconds: float) -> None:
        """Move time forward, running every timer that falls due on the way."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            target = self._now + seconds
        while True:
            with self._lock:
                if self._heap and self._heap[0].due <= target:
                    entry = heapq.heappop(self._heap)
                    self._now = max(self._now, entry.due)
                else:
                    self._now = target
                    return
            callback = entry.callback
            if callback is not None and not entry.cancelled:
                callback()

    def sleep(self, seconds: float) -> None:
        """Block until the clock has been advanced by ``seconds``."""
        woken = threading.Event()
        self.call_later(seconds, woken.set)
        while not woken.wait(0.005):
            pass
