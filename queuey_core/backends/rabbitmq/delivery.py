"""Deliveries and their settles: ack, retry, defer, dead letter, and the poison path.

Owns: settling a delivery exactly once, on the channel that delivered it, from a job
thread (through the consumer link's thread, which may coalesce acks: :mod:`.acks`). A
replacement (retry, deferral, dead letter) goes to the delivery's own queue (never the
one its envelope names) and is confirmed by the broker before the original is acked.
When a replacement cannot be built or published, whatever the reason, the original
still leaves the queue by the *poison path*, which does not depend on what the message
holds: its body, unchanged, is published to ``<queue>.dlq`` with plain-ASCII headers
saying why, then acked; if even that fails, it is rejected without requeueing, and the
queue's own dead-letter settings move it (:func:`topology.queue_arguments`). A message
that is not an envelope at all (:class:`Undecodable`) takes the same path.
A replacement the broker could not take because of its own state (unreachable, blocking
publishers, no confirm in time, closing) is no fault of the message: the original goes
back to its queue (the publish already waited out its timeout, so this is no hot loop,
and the worker's redelivery guard bounds it), and the settle counts as failed.
Must never: send a settle on a channel other than the one that delivered (after a
reconnect the broker redelivers instead), ack an original whose replacement was not
confirmed, or give a message back for immediate redelivery (a message that cannot be
processed would come straight back, for ever).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from pika.channel import Channel

from queuey_core.backends.capabilities import EarlyAck
from queuey_core.backends.rabbitmq.acks import Unsettled
from queuey_core.backends.rabbitmq.result import Result
from queuey_core.envelope import Envelope
from queuey_core.errors import (
    BackendError,
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
)
from queuey_core.text import ascii_error_text, ascii_printable

T = TypeVar("T")


class Republisher(Protocol):
    """What a delivery needs of its backend: publishing its replacement or its dead
    letter, and waiting for the consumer link (RabbitMQBackend is one)."""

    @property
    def settle_timeout(self) -> float:
        """How long a settle waits for the consumer link's thread."""

    def wait(self, future: Result[T], what: str) -> T:
        """``future``'s result, as a BackendError if it takes over ``settle_timeout``."""

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """Publish a retry or deferral (confirmed)."""

    def publish_dead_letter(
        self, envelope: Envelope, reason: str, *, queue: str | None = None
    ) -> None:
        """Publish ``envelope`` to the dead-letter queue of ``queue`` (confirmed)."""

    def publish_raw_dead_letter(
        self, queue: str, body: bytes, reason: str, *, message_id: str | None = None
    ) -> None:
        """Publish ``body`` as it is to the dead-letter queue of ``queue`` (confirmed)."""


class Source(Protocol):
    """What a delivery needs of the subscription that received it (:mod:`.subscription`)."""

    @property
    def queue(self) -> str:
        """The queue consumed: where the delivery is settled."""

    @property
    def backend(self) -> Republisher:
        """The backend, for replacements and dead letters."""

    @property
    def unsettled(self) -> Unsettled:
        """The current channel's unsettled delivery tags."""

    def is_current(self, ch: Channel) -> bool:
        """Whether ``ch`` is the subscription's current channel."""

    def call(self, op: Callable[[], None]) -> Result[None]:
        """Run ``op`` on the consumer link's thread."""

    def ack(self, channel: Channel, tag: int) -> Result[None]:
        """Ack ``tag`` on ``channel`` soon; the result says once it is sent."""

    def ack_soon(self, channel: Channel, tag: int, failed: Callable[[BackendError], None]) -> None:
        """Ack without waiting: only ``failed`` hears of a failure."""


#: Why a settle for a delivery of a closed channel is refused.
STALE = (
    "the delivery's channel is gone (connection lost or consumer closed); "
    "RabbitMQ will redeliver the message"
)

logger = logging.getLogger(__name__)


class _Message:
    """A message delivered on one channel; settled on that channel or not at all."""

    __slots__ = ("_body", "_channel", "_message_id", "_settled", "_sub", "_tag")

    def __init__(
        self,
        sub: Source,
        channel: Channel,
        tag: int,
        body: bytes,
        message_id: str | None,
    ) -> None:
        self._sub = sub
        self._channel = channel
        self._tag = tag
        self._body = body
        self._message_id = message_id
        self._settled = False

    @property
    def queue(self) -> str:
        """See :class:`Delivery`."""
        return self._sub.queue

    def _claim(self) -> None:
        if self._settled:
            raise BackendError("delivery was already settled")
        self._settled = True

    def _on_channel(self, op: Callable[[Channel], None], *, settles: bool = False) -> None:
        """Run ``op`` on the delivering channel, on the link's thread; BackendError if
        that channel is gone. ``settles``: ``op`` nacks or rejects this delivery."""

        def run() -> None:
            ch = self._channel
            if not self._sub.is_current(ch) or not ch.is_open:
                raise BackendError(STALE)
            op(ch)
            if settles:
                self._sub.unsettled.settled(self._tag)

        self._sub.backend.wait(self._sub.call(run), "settle")

    def _ack(self) -> None:
        """Ack on the delivering channel; the link may coalesce it with others."""
        self._sub.backend.wait(self._sub.ack(self._channel, self._tag), "settle")

    def _poison(self, reason: str, error: str) -> None:
        """Move the message to its dead-letter queue by a path that cannot fail on content.

        ``error`` says what went wrong before; it is logged once, with how it ended.
        Raises BackendError only when the message could not be settled at all.
        """
        fields = {"queue": self.queue, "message_id": self._message_id}
        try:
            self._sub.backend.publish_raw_dead_letter(
                self.queue, self._body, reason, message_id=self._message_id
            )
        except Exception as exc:
            # Even the raw copy failed: reject, and the queue's dead-letter settings move
            # it (with RabbitMQ's x-death header, without our reason).
            try:
                self._on_channel(lambda ch: ch.basic_reject(self._tag, requeue=False), settles=True)
            except BackendError:
                logger.error(
                    "%s; could not dead-letter it (%s) nor reject it: RabbitMQ will redeliver it",
                    error,
                    ascii_error_text(exc),
                    extra=fields,
                )
                raise
            logger.error(
                "%s; rejected it into the dead-letter queue (its raw copy failed: %s)",
                error,
                ascii_error_text(exc),
                extra=fields,
            )
            return
        self._ack()
        logger.error("%s; moved it to the dead-letter queue as it was", error, extra=fields)


class Undecodable(_Message):
    """A message that is not a queuey envelope: it can only be dead-lettered."""

    __slots__ = ()

    def dead_letter(self, reason: str) -> None:
        """Move it to the dead-letter queue with ``reason``, by the poison path."""
        self._claim()
        self._on_channel(lambda ch: None)  # gone: the broker redelivers, publish no copy
        self._poison(reason, f"undecodable message: {ascii_printable(reason, 300)}")


class RabbitDelivery(_Message, EarlyAck):
    """A delivered envelope; see :class:`Delivery`."""

    __slots__ = ("_envelope", "_redelivered")

    def __init__(
        self,
        sub: Source,
        channel: Channel,
        tag: int,
        envelope: Envelope,
        *,
        body: bytes,
        message_id: str | None = None,
        redelivered: bool = False,
    ) -> None:
        super().__init__(sub, channel, tag, body, message_id)
        self._envelope = envelope
        self._redelivered = redelivered

    @property
    def envelope(self) -> Envelope:
        """See :class:`Delivery`."""
        return self._envelope

    @property
    def redelivered(self) -> bool:
        """See :class:`Delivery`: the AMQP ``redelivered`` flag."""
        return self._redelivered

    def is_stale(self) -> bool:
        """See :class:`Delivery`: its channel is no longer the subscription's, or closed.

        Read from a job thread without the link's: both are single attribute reads, and
        a channel that dies just after this says no is caught by the settle.
        """
        ch = self._channel
        return not self._sub.is_current(ch) or not ch.is_open

    def ack(self) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._ack()

    def ack_soon(self, failed: Callable[[BackendError], None]) -> None:
        """Ack without waiting for the consumer link's thread to send it.

        For a worker whose handler has returned: the job thread goes on to its next
        delivery while the ack joins the link's next batch (coalesced with others, see
        :meth:`ConsumerLink.ack`). A refused ack (its channel is gone) is no less
        counted: ``failed`` gets the error, on the link's thread, and the broker
        redelivers the message as it would after a refused :meth:`ack`.
        """
        self._claim()
        self._sub.ack_soon(self._channel, self._tag, failed)

    def dead_letter(self, reason: str) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(
            lambda: self._sub.backend.publish_dead_letter(self._envelope, reason, queue=self.queue),
            "dead letter",
            reason,
        )

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(self._publish(next_envelope, delay), "retry", None)

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(self._publish(next_envelope, delay), "deferral", None)

    def _publish(self, next_envelope: Envelope, delay: float) -> Callable[[], None]:
        def publish() -> None:
            env = next_envelope
            if env.queue != self.queue:  # routed by where it came from, never by its word
                env = env.model_copy(update={"queue": self.queue})
            self._sub.backend.publish(env, delay=delay)

        return publish

    def _replace(self, publish: Callable[[], None], what: str, reason: str | None) -> None:
        # Check the channel first: publishing a replacement for a delivery that will be
        # redelivered anyway would run the job twice.
        self._on_channel(lambda ch: None)
        try:
            publish()
        except Exception as exc:
            if _transient(exc):
                # The broker is down, blocking publishers or closing: nothing is wrong with
                # the message, so it goes back to its queue rather than to the dead
                # letters. It comes back only after the publish waited out its timeout,
                # so this is no hot loop; the worker's redelivery guard bounds it. A nack
                # comes at once, though: wait before giving the message back, so that its
                # redeliveries span a quorum queue's leader election (a few seconds)
                # instead of using up the guard in milliseconds.
                if isinstance(exc, NotEnqueuedError) and exc.reason is PublishFailure.NACKED:
                    time.sleep(NACK_PAUSE)
                self._on_channel(lambda ch: ch.basic_nack(self._tag, requeue=True), settles=True)
                raise BackendError(
                    f"could not publish the {what} ({ascii_error_text(exc)}); the original "
                    "went back to its queue"
                ) from exc
            # Encoding, routing, a value out of range, a bug: the message itself is at
            # fault, and giving it back would only bring it straight back.
            failure = f"could not publish the {what}: {ascii_error_text(exc)}"
            self._poison(f"{reason}; {failure}" if reason else failure, failure)
            return
        self._ack()


#: Seconds a job thread waits after a nacked replacement before the original goes back
#: to its queue: the redelivery guard's 5 returns then cover about 10 s of refusals.
NACK_PAUSE = 2.0

#: Publish failures that say nothing about the message: the broker's state.
_TRANSIENT = frozenset(
    {
        PublishFailure.UNREACHABLE,
        PublishFailure.LOST,
        PublishFailure.BLOCKED,
        PublishFailure.NO_CONFIRM,
        PublishFailure.CLOSED,
        # A nack: measured on a cluster, a quorum queue nacks publishes for a few seconds
        # while it elects a leader after a node's loss.
        PublishFailure.NACKED,
    }
)


def _transient(exc: Exception) -> bool:
    """Whether a failed publish is the broker's state rather than the message's fault."""
    if isinstance(exc, EnqueueUnknownError):
        return True
    return isinstance(exc, NotEnqueuedError) and exc.reason in _TRANSIENT
