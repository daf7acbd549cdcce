"""An in-process backend: thread-safe, priority-ordered, and inspectable.

It behaves like a broker where the worker can tell: prefetch limits how many unsettled
deliveries a consumer holds, higher priorities are delivered first (FIFO within a
level), delayed messages are held on an injected clock, a closed subscription gives its
unsettled deliveries back (delivered again, they are flagged ``redelivered``), and
delays past the ladder's reach are refused as RabbitMQ's would be. Like the RabbitMQ
backend it settles a delivery on the queue it came from, and a replacement that cannot
be held dead-letters the original instead. :meth:`publish_raw` puts bytes straight into
a queue, as other code could on a broker: a body that is not an envelope is
dead-lettered when its turn comes, as the RabbitMQ consumer does. Tests inspect what
happened through :meth:`acked`, :meth:`dead_letters`, :meth:`pending`, :meth:`held` and
friends. It has the optional control channel too (``SupportsControl``, in
:mod:`.memory_control`), so a worker's answers to ``queuey workers`` run in unit tests.
Its queues, subscriptions and deliveries are :mod:`.memory_queue`'s.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import uuid
from collections.abc import Sequence
from typing import ClassVar

from queuey_core.backends.base import ConsumerEnded, Sink, closed_to_publishing
from queuey_core.backends.capabilities import (
    ControlHandler,
    ControlServer,
    DeadLetter,
    HoldsUniqueKeys,
    Inspectable,
    Inspection,
    PublishesEncoded,
    QueueCounts,
    SupportsControl,
    UndecodableDeadLetter,
)
from queuey_core.backends.features import Features
from queuey_core.backends.memory_cancels import MemoryCancels
from queuey_core.backends.memory_control import MemoryControl
from queuey_core.backends.memory_dead import MemoryDeadLetters
from queuey_core.backends.memory_features import FEATURES
from queuey_core.backends.memory_pauses import MemoryPauses
from queuey_core.backends.memory_queue import (
    MemoryDelivery,
    MemoryQueue,
    MemorySubscription,
    Raw,
)
from queuey_core.clock import Clock, SystemClock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    ConsumerStoppedError,
    DecodeError,
    UnroutableError,
)
from queuey_core.flow.unique_keys import MemoryUniqueKeys
from queuey_core.limits import check_delay
from queuey_core.queues import QueueConfig
from queuey_core.text import ascii_printable, body_preview, message_handle

logger = logging.getLogger(__name__)


class MemoryBackend(
    MemoryDeadLetters,
    Inspectable,
    SupportsControl,
    PublishesEncoded,
    MemoryCancels,
    MemoryPauses,
    HoldsUniqueKeys,
):
    """A broker in a dict, for tests and demos. See the module docstring."""

    #: What it does differently on purpose (:mod:`.memory_features`).
    features: ClassVar[Features] = FEATURES

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._queues: dict[str, MemoryQueue] = {}
        self._seq = itertools.count()
        self._closed = False
        self._control = MemoryControl()
        self._unique = MemoryUniqueKeys()

    def unique_keys(self) -> MemoryUniqueKeys:
        """See :class:`HoldsUniqueKeys`: a dict of this process."""
        return self._unique

    # -- Backend -----------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`; a conflicting redeclaration is a ConfigError."""
        with self._lock:
            self._check_open()
            for config in queues:
                existing = self._queues.get(config.name)
                if existing is None:
                    self._queues[config.name] = MemoryQueue(config)
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
            self._check_open_to_publish([envelope.job_id])
            self._hold_or_ready(self._queue(envelope.queue), envelope, delay, deferral=False)

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """See :meth:`Backend.publish_many`: all or nothing."""
        with self._lock:
            self._check_open_to_publish([env.job_id for env, _ in items])
            targets = [(self._queue(env.queue), env, delay) for env, delay in items]
            for queue, env, delay in targets:
                self._hold_or_ready(queue, env, delay, deferral=False)

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """See :class:`PublishesEncoded`: each body is decoded back, as a consumer would,
        and published with :meth:`publish_many` (every unit test of ``enqueue_many``
        checks the encoding on the way)."""
        self.publish_many([(encoded.envelope(), delay) for encoded, delay in items])

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        with self._lock:
            self._check_open_to_publish([envelope.job_id])
            self._hold_or_ready(self._queue(envelope.queue), envelope, delay, deferral=True)

    def consume(self, queue: QueueConfig, sink: Sink) -> MemorySubscription:
        """See :meth:`Backend.consume`."""
        with self._lock:
            self._check_open()
            q = self._queue(queue.name)
            sub = MemorySubscription(self, q, sink, queue.prefetch)
            q.consumers.append(sub)
            self._pump(q)
            return sub

    def publish_raw(self, queue: str, body: bytes, *, message_id: str | None = None) -> None:
        """Put ``body`` on ``queue`` as it is, as code other than queuey could.

        It is decoded only when a consumer's turn comes; a body that is not an envelope
        then goes to the dead-letter queue with the reason, as on RabbitMQ. A
        ``message_id`` is the handle such a dead letter is listed under.
        """
        with self._lock:
            self._check_open_to_publish([])
            q = self._queue(queue)
            self._push(q, Raw(bytes(body), message_id), next(self._seq))

    def inspect(self, names: Sequence[str]) -> Inspection:
        """See :meth:`Inspectable.inspect`: None for a queue never declared."""
        with self._lock:
            found: dict[str, QueueCounts | None] = {}
            for name in names:
                q = self._queues.get(name)
                found[name] = (
                    None if q is None else QueueCounts(len(q.ready), len(q.consumers), len(q.dead))
                )
            return Inspection(found, sum(q.held for q in self._queues.values()))

    def close(self) -> None:
        """See :meth:`Backend.close`: every live consumer ends with ConsumerStoppedError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._control.close_all()
            for q in self._queues.values():
                for sub in list(q.consumers):
                    sub.end(
                        ConsumerEnded(
                            q.config.name,
                            ConsumerStoppedError(q.config.name, "the backend was closed"),
                        )
                    )
                q.consumers.clear()

    # -- the control channel (SupportsControl) ---------------------------------------

    def serve_control(self, handler: ControlHandler) -> ControlServer:
        """See :meth:`SupportsControl.serve_control`: ``handler`` is called in the
        thread of whoever broadcasts (see :mod:`.memory_control`)."""
        with self._lock:
            self._check_open()
        return self._control.serve(handler)

    def broadcast_control(self, request: bytes, *, timeout: float) -> list[bytes]:
        """See :meth:`SupportsControl.broadcast_control`: every reply at once."""
        with self._lock:
            self._check_open()
        return self._control.broadcast(request)

    # -- inspection (tests) ----------------------------------------------------------

    def acked(self, queue: str) -> list[Envelope]:
        """Envelopes acked on ``queue``, in ack order (a retried or deferred original too)."""
        with self._lock:
            return list(self._queue(queue).acked)

    def dead_letters(self, queue: str) -> list[DeadLetter]:
        """Dead envelopes of ``queue`` as ``(envelope, reason, dead_at, handle)``, oldest first.

        Undecodable bodies are left out: :meth:`list_dead_letters` has them.
        """
        return [d for d in self.list_dead_letters(queue) if isinstance(d, DeadLetter)]

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

    def _check_open_to_publish(self, job_ids: list[uuid.UUID]) -> None:
        if self._closed:
            raise closed_to_publishing(job_ids)

    def _queue(self, name: str) -> MemoryQueue:
        q = self._queues.get(name)
        if q is None:
            raise UnroutableError(f"no queue named {name!r} has been declared")
        return q

    def _hold_or_ready(
        self, q: MemoryQueue, envelope: Envelope, delay: float | None, *, deferral: bool
    ) -> None:
        if delay is not None:
            check_delay(delay)
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

    def _push(self, q: MemoryQueue, message: Envelope | Raw, seq: int) -> None:
        heapq.heappush(q.ready, (-q.effective_priority(message), seq, message, False))
        self._pump(q)

    def _pump(self, q: MemoryQueue) -> None:
        """Hand ready messages to consumers with prefetch credit, round robin."""
        while q.ready and q.consumers:
            for offset in range(len(q.consumers)):
                sub = q.consumers[(q.next_consumer + offset) % len(q.consumers)]
                if sub.has_credit():
                    q.next_consumer = (q.next_consumer + offset + 1) % len(q.consumers)
                    break
            else:
                return
            _, seq, message, redelivered = heapq.heappop(q.ready)
            if isinstance(message, Raw):
                decoded = self._decode_raw(q, message)
                if decoded is None:
                    continue
                message = decoded
            sub.deliver(MemoryDelivery(self, q, sub, message, seq, redelivered))

    def _decode_raw(self, q: MemoryQueue, raw: Raw) -> Envelope | None:
        """A raw body's envelope; None if it is not one (then it is dead-lettered)."""
        message_id = raw.message_id
        try:
            return Envelope.decode(raw.body)
        except DecodeError as exc:
            logger.error(
                "undecodable message dead-lettered: %s", exc, extra={"queue": q.config.name}
            )
            handle = message_handle(message_id) or ""
            reason = ascii_printable(f"{exc}", 2000)
            now = self._clock.wall_ms()
            q.dead.append(
                UndecodableDeadLetter(body_preview(raw.body), str(exc), reason, now, handle)
            )
            return None

    def _settle(
        self,
        delivery: MemoryDelivery,
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
            # The delivery's own queue, never the one its envelope names.
            q = delivery.q
            if replacement is not None:
                next_env, delay, deferral = replacement
                try:
                    if next_env.queue != q.config.name:
                        next_env = next_env.model_copy(update={"queue": q.config.name})
                    self._hold_or_ready(q, next_env, delay, deferral=deferral)
                except Exception as exc:
                    # As the RabbitMQ delivery does: a replacement that cannot be held
                    # moves the original to the dead-letter queue, never leaves it waiting.
                    what = "deferral" if deferral else "retry"
                    dead = f"could not publish the {what}: {type(exc).__name__}: {exc}"
                    logger.error(
                        "%s; dead-lettered the original instead",
                        dead,
                        extra={"queue": q.config.name, "job_id": str(delivery.envelope.job_id)},
                    )
            delivery.settled = True
            delivery.sub.unsettled.pop(delivery.seq, None)
            if dead is not None:
                env = delivery.envelope
                now = self._clock.wall_ms()
                q.dead.append(DeadLetter.of(env, dead, now, str(env.job_id)))
            else:
                q.acked.append(delivery.envelope)
            self._pump(q)
