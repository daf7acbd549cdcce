"""The in-memory backend's queues, subscriptions and deliveries.

Owns: what a queue of :class:`~queuey_core.backends.memory.MemoryBackend` holds (ready
messages by priority, then arrival; held, acked and dead ones), a subscription's
prefetch credit and the deliveries it has not settled (given back, flagged
redelivered, when it closes), and a delivery's settles, which the backend performs
(:class:`Settler`) under its one lock.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field
from typing import Protocol

from queuey_core.backends.base import ConsumerEnded, Sink
from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    SettlesInProcess,
    UndecodableDeadLetter,
)
from queuey_core.envelope import Envelope
from queuey_core.queues import QueueConfig


class Settler(Protocol):
    """What subscriptions and deliveries need of their backend: its lock, settling,
    and handing ready messages to consumers (the backend's internals, hence the names)."""

    @property
    def _lock(self) -> threading.RLock: ...

    def _settle(
        self,
        delivery: MemoryDelivery,
        *,
        dead: str | None = None,
        replacement: tuple[Envelope, float, bool] | None = None,
    ) -> None: ...

    def _pump(self, q: MemoryQueue) -> None: ...


@dataclass(frozen=True, slots=True)
class Raw:
    """Bytes put straight into a queue (:meth:`MemoryBackend.publish_raw`), not decoded yet."""

    body: bytes
    message_id: str | None


#: A message waiting in a queue: (-priority, sequence, envelope or raw body, redelivered).
Ready = tuple[int, int, Envelope | Raw, bool]


@dataclass
class MemoryQueue:
    config: QueueConfig
    ready: list[Ready] = field(default_factory=list)
    held: int = 0
    held_deferrals: int = 0
    acked: list[Envelope] = field(default_factory=list)
    dead: list[AnyDeadLetter] = field(default_factory=list)
    consumers: list[MemorySubscription] = field(default_factory=list)
    next_consumer: int = 0

    def effective_priority(self, message: Envelope | Raw) -> int:
        if self.config.max_priority is None or not isinstance(message, Envelope):
            return 0
        return min(message.priority, self.config.max_priority)


class MemorySubscription:
    def __init__(self, backend: Settler, q: MemoryQueue, sink: Sink, prefetch: int) -> None:
        self._backend = backend
        self._q = q
        self._sink = sink
        self._prefetch = prefetch
        self.unsettled: dict[int, MemoryDelivery] = {}
        self.cancelled = False
        self.closed = False

    @property
    def queue(self) -> str:
        return self._q.config.name

    def has_credit(self) -> bool:
        return not self.cancelled and (self._prefetch == 0 or len(self.unsettled) < self._prefetch)

    def deliver(self, delivery: MemoryDelivery) -> None:
        self.unsettled[delivery.seq] = delivery
        self._sink(delivery)

    def end(self, event: ConsumerEnded) -> None:
        self.cancelled = True
        self._sink(event)

    def cancel(self) -> None:
        with self._backend._lock:
            self.cancelled = True
            if self in self._q.consumers:
                self._q.consumers.remove(self)

    def close(self) -> None:
        with self._backend._lock:
            self.cancel()
            self.closed = True
            # Back where they were: a requeued message keeps its place in line, and is
            # flagged redelivered, as a broker does.
            for seq, delivery in self.unsettled.items():
                heapq.heappush(
                    self._q.ready,
                    (-self._q.effective_priority(delivery.envelope), seq, delivery.envelope, True),
                )
            self.unsettled.clear()
            self._backend._pump(self._q)


class MemoryDelivery(SettlesInProcess):
    __slots__ = ("_backend", "_envelope", "_redelivered", "q", "seq", "settled", "sub")

    def __init__(
        self,
        backend: Settler,
        q: MemoryQueue,
        sub: MemorySubscription,
        envelope: Envelope,
        seq: int,
        redelivered: bool,
    ) -> None:
        self._backend = backend
        self.q = q
        self.sub = sub
        self._envelope = envelope
        self.seq = seq
        self._redelivered = redelivered
        self.settled = False

    @property
    def envelope(self) -> Envelope:
        return self._envelope

    @property
    def queue(self) -> str:
        return self.q.config.name

    @property
    def redelivered(self) -> bool:
        return self._redelivered

    def is_stale(self) -> bool:
        # Memory deliveries are handed back only when their subscription closes, after
        # the worker has drained: a delivery it still holds is never taken back.
        return False

    def settles_in_process(self) -> bool:
        """See :class:`SettlesInProcess`: a settle is a dict update under a lock."""
        return True

    def ack(self) -> None:
        self._backend._settle(self)

    def dead_letter(self, reason: str) -> None:
        self._backend._settle(self, dead=reason)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        self._backend._settle(self, replacement=(next_envelope, delay, False))

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        self._backend._settle(self, replacement=(next_envelope, delay, True))


def with_positions(dead: list[AnyDeadLetter]) -> list[AnyDeadLetter]:
    """Dead letters as listed: an undecodable one without a message id is ``#N``."""
    return [
        d._replace(handle=f"#{n}") if isinstance(d, UndecodableDeadLetter) and not d.handle else d
        for n, d in enumerate(dead, 1)
    ]
