"""WorkerHandle: stopping a running worker from another thread, and reading its counters.

Owns: the shutdown flag and the counters (settle failures, deliveries in flight, stuck
job threads). Must never: block (it is called from signal handlers and other threads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WorkerHandle:
    """Remote control for a running :class:`Worker`: shutdown, and its counters.

    Safe to use from any thread; :meth:`shutdown` may be called before ``run()`` starts
    or more than once.
    """

    def __init__(self) -> None:
        self._shutdown = threading.Event()
        self._lock = threading.Lock()
        self._settle_failures = 0
        self._stuck = 0
        self._in_flight = 0
        self._wakers: list[Callable[[], None]] = []

    def shutdown(self) -> None:
        """Ask the worker to stop; ``run()`` finishes what it already pulled, then returns."""
        self._shutdown.set()
        with self._lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def is_shutdown(self) -> bool:
        """Whether :meth:`shutdown` has been called."""
        return self._shutdown.is_set()

    def settle_failures(self) -> int:
        """How many acks, retries, deferrals or dead letters the broker did not take.

        Each is also logged at ERROR. The job ran; only telling the broker failed, so
        the message will be redelivered: a growing count means duplicate work ahead
        and usually a sick connection. Alert on it.
        """
        with self._lock:
            return self._settle_failures

    def in_flight(self) -> int:
        """Deliveries the worker holds: pulled from the broker and not settled yet."""
        with self._lock:
            return self._in_flight

    def stuck_jobs(self) -> int:
        """Job threads still running although their job timed out (and was settled)."""
        with self._lock:
            return self._stuck

    # -- what the worker records (its run loop and dispatcher; not for library users) --

    def record_settle_failure(self) -> None:
        """A settle the broker did not take (see :meth:`settle_failures`)."""
        with self._lock:
            self._settle_failures += 1

    def record_in_flight(self, change: int) -> None:
        """Deliveries taken (``change`` > 0) or settled or given back (< 0)."""
        with self._lock:
            self._in_flight += change

    def record_stuck(self, change: int) -> None:
        """A timed-out job's thread still runs (+1), or has ended at last (-1)."""
        with self._lock:
            self._stuck += change

    def add_waker(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (quick, non-blocking) when :meth:`shutdown` is asked."""
        with self._lock:
            self._wakers.append(wake)

    def remove_waker(self, wake: Callable[[], None]) -> None:
        """Stop calling ``wake`` on shutdown."""
        with self._lock:
            self._wakers.remove(wake)

    def __repr__(self) -> str:
        return (
            f"WorkerHandle(shutdown={self.is_shutdown()}, "
            f"settle_failures={self.settle_failures()}, stuck_jobs={self.stuck_jobs()}, "
            f"in_flight={self.in_flight()})"
        )
