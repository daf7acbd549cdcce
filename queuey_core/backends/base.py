"""The seam between the worker and a broker: what a backend and a delivery can do.

A backend never knows handlers or job models: it moves :class:`Envelope` values. It
trusts nothing a message says about where it belongs: a delivery is settled on the
queue it came from, and every delivery gets settled, whatever its body holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import BackendError
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
        """The envelope that was delivered."""

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


class DeadLetter(NamedTuple):
    """A dead-lettered envelope with why and when (ms since the epoch) it died.

    ``reason`` is "unknown" and ``dead_at`` None when the message carries no readable
    header for them. ``handle`` reaches it in :meth:`Backend.delete_dead_letters`: its
    job id.
    """

    envelope: Envelope
    reason: str
    dead_at: int | None
    handle: str


class UndecodableDeadLetter(NamedTuple):
    """A message of a dead-letter queue that is not a queuey envelope.

    It can be listed and deleted, never requeued (it would be refused again).
    ``preview`` is the start of its body, escaped to printable ASCII; ``error`` says why
    it is not an envelope. ``handle`` is its message id when it has a printable one,
    else ``#N``, its position in the dead-letter queue (1 for the oldest) when listed.
    """

    preview: str
    error: str
    reason: str
    dead_at: int | None
    handle: str


#: Anything a dead-letter queue holds.
AnyDeadLetter = DeadLetter | UndecodableDeadLetter


class QueueCounts(NamedTuple):
    """What a declared queue holds, as the broker reports it.

    ``dead_letters`` is None when the queue's dead-letter queue does not exist.
    """

    ready: int
    consumers: int
    dead_letters: int | None


@dataclass(frozen=True, slots=True)
class Inspection:
    """One look at some queues: their counts, None for a queue not declared yet.

    ``held`` is what the delay ladder holds for every queue together, or None when the
    ladder is not declared yet (nothing was ever enqueued with a delay or retried).
    ``unroutable`` is what ``queuey.unroutable`` holds: delayed messages whose queue did
    not exist at the end of the ladder (always 0 on a backend without a ladder).
    """

    queues: dict[str, QueueCounts | None]
    held: int | None
    unroutable: int = 0


class Inspectable(Protocol):
    """A backend that can count what its queues hold (``queuey queues``, ``dlq list``)."""

    def inspect(self, names: Sequence[str]) -> Inspection:
        """Counts of ``names``; a queue that does not exist is None, never an error."""


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

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """Every dead letter of ``queue``, undecodable ones too, oldest first.

        Nothing is removed or reordered.
        """

    def requeue_dead_letters(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """Send dead letters (all, or those ids) back to ``queue`` at attempt 1; how many.

        Undecodable ones are never requeued: they stay where they are.
        """

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """Delete the dead letters of ``queue`` with those handles; how many.

        The others stay, in order. A position handle (``#N``) means the position at the
        time of the call.
        """

    def purge_dead_letters(self, queue: str) -> int:
        """Delete every dead letter of ``queue``; how many."""

    def close(self) -> None:
        """Release connections; consumers end with :class:`ConsumerEnded`."""


#: Answers one control request (its body, as sent) with the body of the reply, or None
#: for no reply. Called on the backend's thread: it must be quick and never raise.
ControlHandler = Callable[[bytes], bytes | None]


class ControlServer(Protocol):
    """A worker's end of the control channel, started by :meth:`SupportsControl.serve_control`."""

    def close(self) -> None:
        """Stop answering; idempotent."""


@runtime_checkable
class SupportsControl(Protocol):
    """An optional capability: a broadcast channel to every live worker.

    :mod:`queuey_core.control` owns what travels on it (small versioned JSON
    documents); a backend only moves the bytes, as it moves envelopes. A worker answers
    through :meth:`serve_control`; ``queuey workers`` asks through
    :meth:`broadcast_control`. ``RabbitMQBackend`` uses a fanout exchange and RabbitMQ's
    direct reply-to, ``MemoryBackend`` calls the handlers in the caller's thread. A
    backend without it simply has no live-worker commands.
    """

    def serve_control(self, handler: ControlHandler) -> ControlServer:
        """Start answering broadcast requests with ``handler``, without waiting for the
        broker: the worker never waits on (or breaks because of) its control channel."""

    def broadcast_control(self, request: bytes, *, timeout: float) -> list[bytes]:
        """Send ``request`` to every worker serving, and return the replies that came
        within ``timeout`` seconds (none is not an error)."""


def printable(text: str, limit: int) -> str:
    """``text`` as printable ASCII of at most ``limit`` characters, for headers and listings.

    Anything else is escaped (``\\xNN``, ``\\uNNNN``), so the result encodes anywhere;
    a longer text is cut, and says so.
    """
    escaped = text.encode("ascii", "backslashreplace").decode("ascii").translate(_CONTROLS)
    if len(escaped) <= limit:
        return escaped
    return escaped[: max(0, limit - 3)] + "..."


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def preview(body: bytes, limit: int = 120) -> str:
    """The start of a message body that is not an envelope, as printable ASCII."""
    head = bytes(body[: limit * 4]).decode("utf-8", "backslashreplace")
    suffix = f" ({len(body)} bytes)" if len(body) > limit else ""
    return printable(head, limit) + suffix


def message_handle(message_id: object) -> str | None:
    """A message id usable as a dead letter's handle, or None: printable ASCII, short.

    ``#`` starts position handles, so an id starting with it is not used either.
    """
    if (
        isinstance(message_id, str)
        and 0 < len(message_id) <= 255
        and message_id.isascii()
        and message_id.isprintable()
        and not message_id.startswith("#")
    ):
        return message_id
    return None


@runtime_checkable
class PublishesEncoded(Protocol):
    """A backend that takes first attempts already encoded (``enqueue_many``'s hot path).

    Optional: ``Producer.enqueue_many`` uses it when the backend has it, and hands
    :meth:`Backend.publish_many` envelopes otherwise.
    """

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """Like :meth:`Backend.publish_many`, for envelopes already encoded."""
