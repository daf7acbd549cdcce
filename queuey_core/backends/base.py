"""The seam between the worker and a broker: what every backend and delivery must do.

Publishing, consuming and settling: :class:`Backend`, :class:`Delivery`,
:class:`Subscription`, :class:`Sink` and :class:`ConsumerEnded`, nothing more. What only
some backends can do (dead-letter tools, inspection, control, schedules, early acks) is
a capability declared beside it, in :mod:`queuey_core.backends.capabilities`.

A backend never knows handlers or job models: it moves :class:`Envelope` values. It
trusts nothing a message says about where it belongs: a delivery is settled on the
queue it came from, and every delivery gets settled, whatever its body holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, NotEnqueuedError, PublishFailure
from queuey_core.queues import QueueConfig


class Delivery(Protocol):
    """One message handed to a consumer, to be settled exactly once.

    Every settle raises :class:`~queuey_core.errors.BackendError` only when the message
    could not be settled at all (its channel is gone, the backend is closed); the broker
    then still owns the message and will redeliver it. ``retry`` and ``defer`` make the
    new envelope safe on the broker *before* the original is acknowledged, so a crash in
    between duplicates and never loses. A replacement (retry, deferral, dead letter) that
    cannot be built or published, for any reason, does not leave the message unsettled:
    the original moves to the dead-letter queue of :attr:`queue` by a path that does not
    depend on its content, and the settle returns.
    """

    @property
    def envelope(self) -> Envelope:
        """The envelope that was delivered: the same object on every read (a job's
        start and end are told to hooks with it)."""

    @property
    def queue(self) -> str:
        """The queue it was delivered from: where its retries and dead letters go.

        Never ``envelope.queue``, which is whatever the publisher wrote.
        """

    @property
    def redelivered(self) -> bool:
        """Whether the broker delivered this message before and it was not settled then."""

    def is_stale(self) -> bool:
        """Whether the broker has taken this delivery back (its channel died).

        It will be delivered again, so running it now would only run it twice, and its
        settle would be refused.
        """

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


class Backend(Protocol):
    """What the producer and the worker need from a broker: the whole seam.

    See ``docs/backends.md`` for adding one, and the contract tests it must pass.
    """

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

    def close(self) -> None:
        """Release connections; consumers end with :class:`ConsumerEnded`."""


def closed_to_publishing(job_ids: Iterable[uuid.UUID]) -> NotEnqueuedError:
    """What a publish on a closed backend raises, on every backend alike: the jobs were
    never sent, so sending them again cannot make a duplicate (docs/enqueueing.md's
    three outcomes)."""
    return NotEnqueuedError(
        "the backend is closed", reason=PublishFailure.CLOSED, not_enqueued=job_ids
    )
