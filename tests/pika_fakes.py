"""Stand-ins for pika's channel and connection, for tests that play the broker.

A link under test asks for channels and timers; the test decides which requests the
"broker" answers, and when. Subclasses add the methods of the link they serve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FakeChannel:
    """A channel that is open until closed; ``answers`` says whether the broker replies
    to what the link sets it up with (a subclass decides what that is)."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.is_open = True
        self.closed = False

    def add_on_close_callback(self, fn: object) -> None:
        pass

    def close(self) -> None:
        self.is_open = False
        self.closed = True


class FakeConnection:
    """Keeps every channel.open's callback: ``opening[i](channel)`` answers the i-th."""

    def __init__(self) -> None:
        self.is_open = True
        self.opening: list[Callable[[Any], None]] = []

    def channel(self, on_open_callback: Callable[[Any], None]) -> None:
        self.opening.append(on_open_callback)


class HeldTimers:
    """A link's timers kept for the test to fire, instead of run on pika's I/O loop."""

    timers: list[tuple[float, Callable[[], None]]]

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay, fn))

    def fire(self) -> None:
        """Run every timer set so far, whatever its delay (as if all had come due)."""
        timers, self.timers = self.timers, []
        for _, fn in timers:
            fn()
