"""Counting redeliveries, so that no message can keep a worker busy forever.

A message whose settle never reaches the broker (its channel dies every time, a bug on
the settle path) comes back with the AMQP ``redelivered`` flag set, and would come back
for ever. This process counts such returns of each message and lets the dispatcher
dead-letter it after a few, without running its handler again.

Owns: the count, in bounded memory (an LRU of recent messages). A count is not dropped
when a settle looks done: an ack written just before a connection closed looks sent
and never arrives, and the message comes back counting on. Must never: grow without
bound, or count a message that was published afresh (a retry, a deferral, a requeued
dead letter arrives with the flag clear and starts again at zero).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable

#: Redeliveries of one message after which it is dead-lettered unrun.
MAX_REDELIVERIES = 5
#: Messages remembered at once; the least recently seen are forgotten first.
REMEMBERED = 10_000


class RedeliveryCounter:
    """How many times in a row each message came back unsettled, in this process."""

    def __init__(self, *, remembered: int = REMEMBERED) -> None:
        self._remembered = remembered
        self._lock = threading.Lock()
        self._counts: collections.OrderedDict[Hashable, int] = collections.OrderedDict()

    def note(self, key: Hashable, redelivered: bool) -> int:
        """Record a delivery of ``key``; returns its redeliveries so far (0 if fresh)."""
        if not redelivered and not self._counts:
            return 0  # the common case: nothing to forget (a length read needs no lock)
        with self._lock:
            if not redelivered:
                self._counts.pop(key, None)
                return 0
            count = self._counts.pop(key, 0) + 1
            self._counts[key] = count
            while len(self._counts) > self._remembered:
                self._counts.popitem(last=False)
            return count

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)
