"""The seam between the worker and a broker: what a backend and a delivery can do.

A backend never knows handlers or job models: it moves :class:`Envelope` values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError
from queuey_core.queues import QueueConfig


class Delivery(Protocol):
    """One message handed to a consumer, to be settled exactly once.

    Every settle raises :class:`~queuey_core.errors.BackendError` when the broker did
    not take it; the broker then still owns the message and will redeliver it.
    ``retry`` and ``defer`` make the new envelope safe on the broker *before* the
    original is acknowledged, so a crash in between duplicates and never loses.
    """

    @property
    def envelope(self) -> Envelope:
        """The envelope that was delivered."""

    def ack(self) -> None:
        """The job succeeded: forget the message."""

    def dead_letter(self, reason: str) -> None:
        """Move the message to its queue's dead-letter queue, with ``reason``."""

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """Replace the message with ``next_envelope``, ready after ``delay`` seconds."""

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """Like :meth:`retry`, for a deferral (counted apart by inspectable backends)."""


@dataclass(frozen=True, slots=True)
class ConsumerEnded:
    """A subscription ended without being cancelled: the backend or broker went away."""

    queue: str
    error: BackendError


#: Where a backend pushes deliveries (and a final :class:`ConsumerEnded`). It is called
#: from the backend's own thread, must not block, and is called in delivery order.
Sink = Callable[[Delivery | ConsumerEnded], None]


class Subscription(Protocol):
    """A consumer of one queue, started by :meth:`Backend.consume`."""

    @property
    def queue(self) -> str:
        """The queue consumed."""

    def cancel(self) -> None:
        """Stop consuming. Once this returns, the sink receives nothing more.

        Deliveries already pushed to the sink stay valid and can still be settled.
        """

    def close(self) -> None:
        """Cancel, and give every unsettled delivery back to the broker."""


class DeadLetter(NamedTuple):
    """A dead-lettered envelope with why and when (ms since the epoch) it died."""

    envelope: Envelope
    reason: str
    dead_at: int


class Backend(Protocol):
    """What the producer and the worker need from a broker."""

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """Create the queues (and their dead-letter queues); idempotent.

        Raises ConfigError when a queue exists with settings that conflict.
        """

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """Publish one envelope to ``envelope.queue``, held for ``delay`` seconds if given.

        Returns once the broker has taken responsibility for it. Raises
        :class:`~queuey_core.errors.NotEnqueuedError` when it is surely not on the broker
        and :class:`~queuey_core.errors.EnqueueUnknownError` when it may be.
        """

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """Publish many envelopes; returns once the broker has taken all of them.

        Raises like :meth:`publish`, the error listing which job ids were confirmed,
        which were not enqueued and which are unknown.
        """

    def defer(self, envelope: Envelope, delay: float) -> None:
        """Publish ``envelope`` to become ready after ``delay`` seconds, as a deferral."""

    def consume(self, queue: QueueConfig, sink: Sink) -> Subscription:
        """Start pushing deliveries of ``queue`` to ``sink``, at most ``prefetch`` unsettled."""

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters of ``queue``, oldest first, without removing or reordering them."""

    def requeue_dead_letters(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """Send dead letters (all, or those ids) back to ``queue`` at attempt 1; how many."""

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; how many."""

    def close(self) -> None:
        """Release connections; consumers end with :class:`ConsumerEnded`."""
