"""One subscription: a channel of its own consuming one queue for the worker's sink.

Owns: opening the channel with the queue's prefetch, registering the consumer (again
on a new channel when the broker leaves it unanswered for :data:`ANSWER_TIMEOUT`, or
with a growing pause when it closes the channel or refuses the queue), decoding each
delivery into an envelope and pushing it to the sink, handing a body that is not an
envelope to the link's dead-letterer, and ending (the broker cancelled it, its queue
is gone, recovery gave up) with one :class:`ConsumerEnded`.
Must never: block the link's thread (the sink only enqueues), let an exception out of a
pika callback (it would end the link's thread), or let a delivery of a closed channel
look current: after a channel or connection is lost, its deliveries' settles are refused.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pika.exceptions
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.base import ConsumerEnded, Sink
from queuey_core.backends.rabbitmq.acks import Unsettled
from queuey_core.backends.rabbitmq.consumer import ConsumerLink
from queuey_core.backends.rabbitmq.delivery import RabbitDelivery, Republisher, Undecodable
from queuey_core.backends.rabbitmq.link import ANSWER_TIMEOUT
from queuey_core.backends.rabbitmq.result import Result
from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, ConsumerStoppedError, DecodeError, QueueyError
from queuey_core.queues import QueueConfig
from queuey_core.text import ascii_printable, message_handle
from queuey_core.trace_context import TraceContext

logger = logging.getLogger(__name__)


#: The pause before a channel the broker closed is opened again: the first at once, then
#: doubling up to the last (a refused consume must not turn into a hot loop).
REOPEN_PAUSES = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class RabbitSubscription:
    """A consumer of one queue on a channel of its own (prefetch is per consumer).

    Once it has consumed, it keeps consuming across everything the broker does short of
    cancelling it: a channel the broker closes is opened again (with a growing pause),
    a queue missing after a recovery is asked for again until the link's
    ``recovery_timeout`` (a restarting broker answers 404 for queues it has not brought
    back yet), and a consume left unanswered for :data:`ANSWER_TIMEOUT` is tried again
    on a new channel.
    """

    def __init__(
        self, backend: Republisher, link: ConsumerLink, config: QueueConfig, sink: Sink
    ) -> None:
        self.backend = backend
        self.link = link
        self.config = config
        self.sink = sink
        self.channel: Channel | None = None
        #: The current channel's unsettled delivery tags (the link's thread only).
        self.unsettled = Unsettled()
        self.consumer_tag: str | None = None
        self.active = True
        self.started = threading.Event()
        self.start_error: QueueyError | None = None
        self._stopped = threading.Event()
        # The link's thread only: the current attempt, whether it consumes, and how the
        # broker has been refusing it.
        self._attempt = 0
        self._consuming = False
        self._refusals = 0
        self._missing_since: float | None = None

    @property
    def queue(self) -> str:
        """See :class:`Subscription`."""
        return self.config.name

    @property
    def consuming(self) -> bool:
        """Whether RabbitMQ accepted ``basic.consume`` on this subscription's channel, and
        the channel is still open (read from any thread: health checks ask)."""
        return self._consuming and self.channel is not None

    # -- the link's thread -------------------------------------------------------------

    def open_channel(self, conn: Any) -> None:
        self._attempt += 1
        self._consuming = False
        attempt = self._attempt
        conn.channel(on_open_callback=self._channel_opened)
        self.link.later(ANSWER_TIMEOUT, lambda: self._unanswered(attempt))

    def _unanswered(self, attempt: int) -> None:
        if attempt != self._attempt or self._consuming or not self.active:
            return
        conn = self.link.connection
        if conn is None or not conn.is_open:
            return  # the link opens every channel again once it reconnects
        logger.warning(
            "RabbitMQ did not answer the consumer of %s within %gs; trying on a new channel",
            self.queue,
            ANSWER_TIMEOUT,
            extra={"queue": self.queue},
        )
        ch, self.channel = self.channel, None
        if ch is not None and ch.is_open:
            with contextlib.suppress(Exception):
                ch.close()
        self.open_channel(conn)

    def _reopen_later(self) -> None:
        pause = REOPEN_PAUSES[min(self._refusals, len(REOPEN_PAUSES) - 1)]
        self._refusals += 1
        attempt = self._attempt

        def reopen() -> None:
            conn = self.link.connection
            # A reconnection in the meantime has opened a channel of its own.
            if attempt == self._attempt and self.active and conn is not None and conn.is_open:
                self.open_channel(conn)

        self.link.later(pause, reopen)

    def _channel_opened(self, ch: Channel) -> None:
        if not self.active:
            ch.close()
            return
        self.channel = ch
        self.unsettled = Unsettled()  # tags start again at 1 on a new channel
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_cancel_callback(self._cancelled_by_broker)
        ch.basic_qos(prefetch_count=self.config.prefetch, callback=lambda _f: self._start(ch))

    def is_current(self, ch: Channel) -> bool:
        return ch is self.channel

    def _start(self, ch: Channel) -> None:
        if not self.is_current(ch) or not self.active:
            return
        self.consumer_tag = ch.basic_consume(
            self.config.name, self._message, callback=lambda _f: self._consume_ok(ch)
        )
        if self.link.reader is not None:
            self.link.reader.register(ch, self.consumer_tag, self._delivered)

    def _consume_ok(self, ch: Channel) -> None:
        if self.is_current(ch):
            self._consuming = True
            self._refusals = 0
            self._missing_since = None
        self.started.set()

    def _message(
        self, ch: Channel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        """A delivery pika read (the link's reader reads most of them: _delivered)."""
        self._delivered(
            ch, method.delivery_tag, bool(method.redelivered), props.message_id, props.headers, body
        )

    def _delivered(
        self,
        ch: Channel,
        tag: int,
        redelivered: bool,
        message_id_property: object,
        headers: dict[str, Any] | None,
        body: bytes,
    ) -> None:
        if not self.is_current(ch):
            return
        self.unsettled.delivered(tag)
        try:
            message_id = message_handle(message_id_property)
            try:
                # A W3C trace context rides in the headers (none: no trace, no cost).
                envelope = Envelope.decode(body)
                trace = TraceContext.from_headers(headers) if headers else None
                if trace is not None:
                    envelope = envelope.carrying(trace)  # just decoded: no copy needed
            except DecodeError as exc:
                # Not one of ours, or not one we may trust: dead-letter it with the reason
                # (which names the field), off this thread.
                reason = ascii_printable(str(exc), 2000)
                self.link.dead_letterer.submit(Undecodable(self, ch, tag, body, message_id), reason)
                return
            delivery = RabbitDelivery(
                self,
                ch,
                tag,
                envelope,
                body=body,
                message_id=message_id,
                redelivered=redelivered,
            )
            self.sink(delivery)
        except Exception:
            # A bug of ours must not end the link's thread, nor leave the message holding
            # a prefetch slot: the queue's dead-letter settings take it.
            logger.critical(
                "could not hand a delivery over; rejecting it",
                exc_info=True,
                extra={"queue": self.queue},
            )
            with contextlib.suppress(Exception):
                ch.basic_reject(tag, requeue=False)
                self.unsettled.settled(tag)

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if self.link.reader is not None:
            self.link.reader.forget(ch)
        if ch is not self.channel:
            return
        self.channel = None
        self._stopped.set()
        if not self.active:
            return
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            if reason.reply_code == 404 and self._gone_for_good():
                error = ConsumerStoppedError(self.queue, f"the queue does not exist ({reason})")
                self.start_error = error
                self.end(error)
                self.started.set()
                return
            # Unacked deliveries of that channel go back to the queue; consume afresh.
            logger.warning(
                "RabbitMQ closed a consumer channel (%s); reopening",
                reason,
                extra={"queue": self.queue},
            )
            self._reopen_later()

    def _gone_for_good(self) -> bool:
        """Whether a 404 on subscribing ends the subscription. Before it ever consumed,
        yes: the queue was declared just before. After, only once it has lasted the
        link's recovery_timeout: a broker restarting says 404 for a durable queue until
        it has brought it back."""
        if not self.started.is_set():
            return True
        now = time.monotonic()
        if self._missing_since is None:
            self._missing_since = now
        return now - self._missing_since >= self.link.recovery_timeout

    def _cancelled_by_broker(self, frame: Any) -> None:
        self.end(
            ConsumerStoppedError(
                self.queue, "RabbitMQ cancelled the consumer (was the queue deleted?)"
            )
        )
        ch = self.channel
        if ch is not None and ch.is_open:
            ch.close()

    def end(self, error: ConsumerStoppedError) -> None:
        """Stop for good and tell the sink, once."""
        if self.active:
            self.active = False
            self._stopped.set()
            self.sink(ConsumerEnded(self.queue, error))

    # -- any thread --------------------------------------------------------------------

    def cancel(self) -> None:
        """See :class:`Subscription`: returns once RabbitMQ confirmed the cancel."""

        def request() -> None:
            self.active = False
            ch, tag = self.channel, self.consumer_tag
            self.consumer_tag = None  # cancel once: close() calls this again
            if ch is None or not ch.is_open or tag is None:
                self._stopped.set()
                return
            if self.link.reader is not None:
                self.link.reader.forget(ch)  # pika rejects what comes after the cancel
            ch.basic_cancel(tag, callback=lambda _f: self._stopped.set())

        try:
            self.link.submit(request)
        except BackendError:
            return
        if not self._stopped.wait(self.backend.settle_timeout):
            logger.warning(
                "RabbitMQ did not confirm a consumer cancel", extra={"queue": self.queue}
            )

    def close(self) -> None:
        """See :class:`Subscription`: unacked deliveries go back to the queue."""
        self.cancel()

        def release() -> None:
            self.active = False
            ch, self.channel = self.channel, None
            if self in self.link.subscriptions:
                self.link.subscriptions.remove(self)
            if ch is not None and ch.is_open:
                ch.close()

        with contextlib.suppress(BackendError):
            self.backend.wait(self.link.call(release), "closing a consumer")

    # -- what a delivery asks of its subscription (delivery.Source) ----------------------

    def call(self, op: Callable[[], None]) -> Result[None]:
        """Run ``op`` on the link's thread; its result."""
        return self.link.call(op)

    def ack(self, channel: Channel, tag: int) -> Result[None]:
        """Ack ``tag`` on ``channel`` soon (see :meth:`ConsumerLink.ack`)."""
        return self.link.ack(self, channel, tag)

    def ack_soon(self, channel: Channel, tag: int, failed: Callable[[BackendError], None]) -> None:
        """Ack without waiting (see :meth:`ConsumerLink.ack_soon`)."""
        self.link.ack_soon(self, channel, tag, failed)
