"""What a link's thread hands back: a one-shot :class:`Result`, and a :class:`LinkStatus`.

Owns: the hand-over of a value or an error from a link's thread to a waiting thread
(a bare lock: settles and publishes wait on one for every message), and how a link
looks to health checks and metrics.
"""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Result(Generic[T]):
    """A one-shot result handed from the link's thread to a waiting thread.

    A bare lock instead of a ``concurrent.futures.Future`` (a Condition and a list of
    callbacks): settles and publishes wait on one of these for every message.
    """

    __slots__ = ("_error", "_lock", "_value", "done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._value: T | None = None
        self._error: BaseException | None = None
        self.done = False

    def set(self, value: T) -> None:
        if not self.done:
            self.done = True
            self._value = value
            self._lock.release()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self._error = error
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """Whether the result came within ``timeout`` seconds (it is not taken)."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return False
        self._lock.release()
        return True

    def error(self) -> BaseException | None:
        """The error it failed with (once :attr:`done`), else None."""
        return self._error

    def result(self, timeout: float) -> T:
        """The value, the error raised, or FutureTimeout after ``timeout`` seconds."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise FutureTimeout
        self._lock.release()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class LinkStatus(NamedTuple):
    """A link as health checks and metrics see it.

    ``state``: ``"connecting"`` (never opened yet), ``"open"``, ``"reconnecting"`` (lost,
    recovering), ``"dead"`` (recovery gave up) or ``"closed"`` (closed on purpose).
    """

    state: str
    reconnects: int
    """Connections regained after a loss since the link was made."""
    thread_alive: bool
    """Whether the link's I/O thread is running."""
    node: str = ""
    """The node (its URL, redacted) the link is connected to, or trying now."""
    unanswered: tuple[str, ...] = ()
    """Queues a consumer link is open for but RabbitMQ has not (yet) started delivering
    from: their ``basic.consume`` is unanswered or was refused."""
