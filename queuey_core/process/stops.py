"""What asks a worker process to stop, recorded where it arrives and applied by the
main loop (:class:`StopRequests`).

A signal handler only records the signal: it appends to a list and the interpreter's
wakeup file descriptor (``signal.set_wakeup_fd``) wakes the main loop. Logging,
draining and stopping happen in the loop. A handler that logged once hung workers for
good: a second signal's handler ran inside the first one's ``flush()`` and waited on a
lock its own thread held, and the shutdown deadline was never checked again.

Requests from other threads (the supervisor's messages, a supervisor that is gone, a
shutdown asked over the control plane) go through the same queue and the same pipe.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
from types import FrameType
from typing import Any

#: The signals a worker takes as "stop": the first drains, the second stops at once.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """Stop requests, in the order they came, for the main thread to apply.

    Each is a string: a signal's name (``SIGTERM``, ``SIGINT``, ``SIGHUP``) or what a
    thread asked (:meth:`request`). :meth:`install` must be called from the main thread;
    :meth:`close` puts back what it replaced.
    """

    def __init__(self) -> None:
        self._pending: collections.deque[str] = collections.deque()
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        self._previous: dict[int, Any] = {}
        self._previous_wakeup: int | None = None

    def install(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> StopRequests:
        """Record ``signals`` from now on (the main thread only)."""
        for s in signals:
            self._previous[s] = signal.signal(s, self._on_signal)
        if self._previous_wakeup is None:
            self._previous_wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Recorded only: a deque's append takes no lock that the interrupted code could
        # hold, and the C handler has already written to the wakeup fd.
        self._pending.append(signal.Signals(signum).name)

    def request(self, what: str) -> None:
        """Record ``what`` from any thread, and wake the main loop."""
        self._pending.append(what)
        self.wake()

    def wake(self) -> None:
        """Make :meth:`wait` return now (from any thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write, b"\0")

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a request (or a :meth:`wake`)."""
        if self._pending:
            return
        with contextlib.suppress(InterruptedError, OSError, ValueError):
            select.select([self._read], [], [], timeout)
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read, 512):
                pass

    def take(self) -> list[str]:
        """The requests recorded since the last call, oldest first."""
        taken = []
        while self._pending:
            taken.append(self._pending.popleft())
        return taken

    def retire(self) -> None:
        """Ignore the recorded signals from now on, for a process on its way out.

        The handlers are replaced, not put back: Python puts the default action back
        for a signal with a Python handler when the interpreter ends, and a SIGTERM
        then would kill a process that had already drained (exit 143, not its own).
        """
        for s in self._previous:
            signal.signal(s, signal.SIG_IGN)
        self._previous.clear()

    def close(self) -> None:
        """Put back the signal handlers and wakeup fd this replaced; close the pipe."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
        if self._previous_wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            self._previous_wakeup = None
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
