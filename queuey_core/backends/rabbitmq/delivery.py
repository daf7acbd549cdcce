"""Deliveries and their settles: ack, retry, defer, dead letter.

Owns: settling a delivery exactly once, on the channel that delivered it, from a job
thread (through the consumer link's thread). A replacement (retry, deferral, dead
letter) is confirmed by the broker before the original is acked.
Must never: send a settle on a channel other than the one that delivered (after a
reconnect the broker redelivers instead), or ack an original whose replacement was
not confirmed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from pika.channel import Channel

from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, QueueyError

if TYPE_CHECKING:
    from queuey_core.backends.rabbitmq.consumer import RabbitSubscription


class RabbitDelivery:
    """A message delivered on one channel; settled on that channel or not at all."""

    __slots__ = ("_channel", "_envelope", "_settled", "_sub", "_tag")

    def __init__(
        self, sub: RabbitSubscription, channel: Channel, tag: int, envelope: Envelope
    ) -> None:
        self._sub = sub
        self._channel = channel
        self._tag = tag
        self._envelope = envelope
        self._settled = False

    @property
    def envelope(self) -> Envelope:
        """See :class:`Delivery`."""
        return self._envelope

    def ack(self) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._on_channel(lambda ch: ch.basic_ack(self._tag))

    def dead_letter(self, reason: str) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(lambda: self._sub.backend.publish_dead_letter(self._envelope, reason))

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(lambda: self._sub.backend.publish(next_envelope, delay=delay))

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self.retry(next_envelope, delay)

    def _claim(self) -> None:
        if self._settled:
            raise BackendError("delivery was already settled")
        self._settled = True

    def _on_channel(self, op: Callable[[Channel], None]) -> None:
        def run() -> None:
            ch = self._channel
            if not self._sub.is_current(ch) or not ch.is_open:
                raise BackendError(
                    "the delivery's channel is gone (connection lost or consumer closed); "
                    "RabbitMQ will redeliver the message"
                )
            op(ch)

        self._sub.backend.wait(self._sub.link.call(run), "settle")

    def _replace(self, publish: Callable[[], None]) -> None:
        # Check the channel first: publishing a replacement for a delivery that will be
        # redelivered anyway would run the job twice.
        self._on_channel(lambda ch: None)
        try:
            publish()
        except QueueyError:
            # Not confirmed: give the original back now rather than let it hold a
            # prefetch slot until the channel closes.
            with contextlib.suppress(QueueyError):
                self._on_channel(lambda ch: ch.basic_nack(self._tag, requeue=True))
            raise
        self._on_channel(lambda ch: ch.basic_ack(self._tag))
