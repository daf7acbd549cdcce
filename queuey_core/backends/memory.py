"""An in-process backend: thread-safe, priority-ordered, and inspectable.

It behaves like a broker where the worker can tell: prefetch limits how many unsettled
deliveries a consumer holds, higher priorities are delivered first (FIFO within a
level), delayed messages are held on an injected clock, and a closed subscription
gives its unsettled deliveries back. Tests inspect what happened through
:meth:`acked`, :meth:`dead_letters`, :meth:`pending`, :meth:`held` and friends.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from queuey_core.backends.base import ConsumerEnded, DeadLetter, Sink
from queuey_core.clock import Clock, SystemClock
from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, ConfigError, ConsumerStoppedError, UnroutableError
from queuey_core.queues import QueueConfig


@dataclass
class _Queue:
    config: QueueConfig
    ready: list[tuple[int, int, Envelope]] = field(default_factory=list)
    held: int = 0
    held_deferrals: int = 0
    acked: list[Envelope] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    consumers: list[_MemorySubscription] = field(default_factory=list)
    next_consumer: int = 0

    def effective_priority(self, envelope: Envelope) -> int:
        if self.config.max_priority is None:
            return 0
        return min(envelope.priority, self.config.max_priority)


class MemoryBackend:
    """A broker in a dict, for tests and demos. See the module docstring."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._queues: dict[str, _Queue] = {}
        self._seq = itertools.count()
        self._closed = False

    # -- Backend -----------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`; a conflicting redeclaration is a ConfigError."""
        with self._lock:
            self._check_open()
            for config in queues:
                existing = self._queues.get(config.name)
                if existing is None:
                    self._queues[config.name] = _Queue(config)
                elif (existing.config.max_priority, existing.config.kind) != (
                    config.max_priority,
                    config.kind,
                ):
                    raise ConfigError(
                        f"queue {config.name!r} already exists with other settings "
                        f"(max_priority={existing.config.max_priority}, "
                        f"kind={existing.config.kind})"
                    )

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """See :meth:`Backend.publish`."""
        with self._lock:
            self._check_open()
            self._hold_or_ready(self._queue(envelope.queue), envelope, delay, deferral=False)

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """See :meth:`Backend.publish_many`: all or nothing."""
        with self._lock:
            self._check_open()
            targets = [(self._queue(env.queue), env, delay) for env, delay in items]
            for queue, env, delay in targets:
                self._hold_or_ready(queue, env, delay, deferral=False)

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        with self._lock:
            self._check_open()
            self._hold_or_ready(self._queue(envelope.queue), envelope, delay, deferral=True)

    def consume(self, queue: QueueConfig, sink: Sink) -> _MemorySubscription:
        """See :meth:`Backend.consume`."""
        with self._lock:
            self._check_open()
            q = self._queue(queue.name)
            sub = _MemorySubscription(self, q, sink, queue.prefetch)
            q.consumers.append(sub)
            self._pump(q)
            return sub

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[DeadLetter]:
        """See :meth:`Backend.list_dead_letters`."""
        with self._lock:
            dead = list(self._queue(queue).dead)
        return dead if limit is None else dead[:limit]

    def requeue_dead_letters(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """See :meth:`Backend.requeue_dead_letters`."""
        wanted = None if job_ids is None else set(job_ids)
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            keep: list[DeadLetter] = []
            moved = 0
            for dead in q.dead:
                if wanted is None or str(dead.envelope.job_id) in wanted:
                    self._hold_or_ready(q, dead.envelope.fresh(), None, deferral=False)
                    moved += 1
                else:
                    keep.append(dead)
            q.dead = keep
            return moved

    def purge_dead_letters(self, queue: str) -> int:
        """See :meth:`Backend.purge_dead_letters`."""
        with self._lock:
            q = self._queue(queue)
            purged = len(q.dead)
            q.dead = []
            return purged

    def close(self) -> None:
        """See :meth:`Backend.close`: every live consumer ends with ConsumerStoppedError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for q in self._queues.values():
                for sub in list(q.consumers):
                    sub.end(
                        ConsumerEnded(
                            q.config.name,
                            ConsumerStoppedError(q.config.name, "the backend was closed"),
                        )
                    )
                q.consumers.clear()

    # -- inspection (tests) ----------------------------------------------------------

    def acked(self, queue: str) -> list[Envelope]:
        """Envelopes acked on ``queue``, in ack order (a retried or deferred original too)."""
        with self._lock:
            return list(self._queue(queue).acked)

    def dead_letters(self, queue: str) -> list[DeadLetter]:
        """Dead letters of ``queue`` as ``(envelope, reason, dead_at)``, oldest first."""
        return self.list_dead_letters(queue)

    def pending(self, queue: str) -> int:
        """Messages ready on ``queue`` and not delivered to anyone."""
        with self._lock:
            return len(self._queue(queue).ready)

    def held(self, queue: str) -> int:
        """Messages waiting for their delay (retries, deferrals, delayed publishes)."""
        with self._lock:
            return self._queue(queue).held

    def deferred(self, queue: str) -> int:
        """Of :meth:`held`, those held because their job deferred."""
        with self._lock:
            return self._queue(queue).held_deferrals

    def unacked(self, queue: str) -> int:
        """Messages delivered to a consumer of ``queue`` and not settled yet."""
        with self._lock:
            return sum(len(sub.unsettled) for sub in self._queue(queue).consumers)

    def consumer_count(self, queue: str) -> int:
        """Live consumers of ``queue``."""
        with self._lock:
            return len(self._queue(queue).consumers)

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    # -- internals -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the backend is closed")

    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            raise UnroutableError(f"no queue named {name!r} has been declared")
        return q

    def _hold_or_ready(
        self, q: _Queue, envelope: Envelope, delay: float | None, *, deferral: bool
    ) -> None:
        if delay is not None and delay < 0:
            raise ValueError("a delay cannot be negative")
        if not delay:
            self._push(q, envelope, next(self._seq))
            return
        q.held += 1
        if deferral:
            q.held_deferrals += 1

        def release() -> None:
            with self._lock:
                q.held -= 1
                if deferral:
                    q.held_deferrals -= 1
                self._push(q, envelope, next(self._seq))

        self._clock.call_later(delay, release)

    def _push(self, q: _Queue, envelope: Envelope, seq: int) -> None:
        heapq.heappush(q.ready, (-q.effective_priority(envelope), seq, envelope))
        self._pump(q)

    def _pump(self, q: _Queue) -> None:
        """Hand ready messages to consumers with prefetch credit, round robin."""
        while q.ready and q.consumers:
            for offset in range(len(q.consumers)):
                sub = q.consumers[(q.next_consumer + offset) % len(q.consumers)]
                if sub.has_credit():
                    q.next_consumer = (q.next_consumer + offset + 1) % len(q.consumers)
                    break
            else:
                return
            _, seq, envelope = heapq.heappop(q.ready)
            sub.deliver(_MemoryDelivery(self, q, sub, envelope, seq))

    def _settle(
        self,
        delivery: _MemoryDelivery,
        *,
        dead: str | None = None,
        replacement: tuple[Envelope, float, bool] | None = None,
    ) -> None:
        with self._lock:
            self._check_open()
            if delivery.settled:
                raise BackendError("delivery was already settled")
            if delivery.sub.closed:
                raise BackendError("the delivery's consumer is closed; the broker took it back")
            q = delivery.q
            if replacement is not None:
                next_env, delay, deferral = replacement
                self._hold_or_ready(q, next_env, delay, deferral=deferral)
            delivery.settled = True
            delivery.sub.unsettled.pop(delivery.seq, None)
            if dead is not None:
                q.dead.append(DeadLetter(delivery.envelope, dead, self._clock.wall_ms()))
            else:
                q.acked.append(delivery.envelope)
            self._pump(q)


class _MemorySubscription:
    def __init__(self, backend: MemoryBackend, q: _Queue, sink: Sink, prefetch: int) -> None:
        self._backend = backend
        self._q = q
        self._sink = sink
        self._prefetch = prefetch
        self.unsettled: dict[int, _MemoryDelivery] = {}
        self.cancelled = False
        self.closed = False

    @property
    def queue(self) -> str:
        return self._q.config.name

    def has_credit(self) -> bool:
        return not self.cancelled and (self._prefetch == 0 or len(self.unsettled) < self._prefetch)

    def deliver(self, delivery: _MemoryDelivery) -> None:
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
            # Back where they were: a requeued message keeps its place in line.
            for seq, delivery in self.unsettled.items():
                heapq.heappush(
                    self._q.ready,
                    (-self._q.effective_priority(delivery.envelope), seq, delivery.envelope),
                )
            self.unsettled.clear()
            self._backend._pump(self._q)


class _MemoryDelivery:
    __slots__ = ("_backend", "_envelope", "q", "seq", "settled", "sub")

    def __init__(
        self,
        backend: MemoryBackend,
        q: _Queue,
        sub: _MemorySubscription,
        envelope: Envelope,
        seq: int,
    ) -> None:
        self._backend = backend
        self.q = q
        self.sub = sub
        self._envelope = envelope
        self.seq = seq
        self.settled = False

    @property
    def envelope(self) -> Envelope:
        return self._envelope

    def ack(self) -> None:
        self._backend._settle(self)

    def dead_letter(self, reason: str) -> None:
        self._backend._settle(self, dead=reason)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        self._backend._settle(self, replacement=(next_envelope, delay, False))

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        self._backend._settle(self, replacement=(next_envelope, delay, True))
