"""Consumers: the consumer link and one subscription (channel) per consumed queue.

Owns: opening a channel per queue with its prefetch, registering the consumer,
decoding each delivery into an envelope and pushing it to the worker's sink,
re-subscribing after a recovery, sending the acks job threads ask for (a batch of them
coalesced into one ``multiple`` ack where :mod:`.acks` says it is safe), and ending a
subscription (the broker cancelled it, its queue is gone, recovery gave up) with one
:class:`ConsumerEnded`. A body that is not an envelope
(:class:`~queuey_core.envelope.Envelope` refuses it, naming the field) is handed to the
link's dead-letterer thread, which moves it to the dead-letter queue with the reason
(the poison path of :mod:`.delivery`): that publish waits for a confirm, so it must not
run on the link's thread.
Must never: block the link's thread (the sink only enqueues), let an exception out of a
pika callback (it would end the link's thread), or let a delivery of a closed channel
look current: after a channel or connection is lost, its deliveries' settles are refused.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pika.exceptions
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.base import ConsumerEnded, Sink
from queuey_core.backends.rabbitmq.acks import Unsettled
from queuey_core.backends.rabbitmq.delivery import STALE, RabbitDelivery, Undecodable
from queuey_core.backends.rabbitmq.link import ANSWER_TIMEOUT, Link, LinkStatus, Result
from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, ConsumerStoppedError, DecodeError, QueueyError
from queuey_core.queues import QueueConfig
from queuey_core.text import ascii_printable, message_handle
from queuey_core.trace_context import TraceContext

if TYPE_CHECKING:
    from queuey_core.backends.rabbitmq.backend import RabbitMQBackend

logger = logging.getLogger(__name__)


class ConsumerLink(Link):
    """Owns every consumer channel; re-subscribes them after a recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subscriptions: list[RabbitSubscription] = []
        self.dead_letterer = DeadLetterer()

    @property
    def connection(self) -> Any:
        return self._conn

    def ack(
        self,
        sub: RabbitSubscription,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None] | None = None,
    ) -> Result[None]:
        """Ack ``tag`` on ``channel`` soon (any thread); the result says once it is sent.

        Acks handed over together are sent together at the end of the batch, coalesced
        where :meth:`Unsettled.plan` allows; any other request in the batch sends the acks
        before it first, so nothing is reordered across a nack, a reject or a close.
        ``failed`` is called with the error if the ack cannot be sent (on the link's
        thread, or on this one when the link takes nothing more).
        """
        pending = PendingAck(sub, channel, tag, failed)
        self._hand_over(pending)
        return pending.result

    def ack_soon(
        self,
        sub: RabbitSubscription,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None],
    ) -> None:
        """:meth:`ack` for a caller that never waits: only ``failed`` hears of a failure.

        One per job: it spares the result (a lock, taken at once) nobody would read.
        """
        self._hand_over(PendingAck(sub, channel, tag, failed, _UNWATCHED))

    def _hand_over(self, pending: PendingAck) -> None:
        if self.on_own_thread():
            pending()  # waiting on ourselves would never end
            return
        try:
            self.submit(pending)
        except BackendError as exc:
            pending.fail(exc)

    def run_batch(self, batch: list[Any]) -> None:
        acks: list[PendingAck] = []
        for fn in batch:
            if type(fn) is PendingAck:
                acks.append(fn)
                continue
            if acks:
                send_acks(acks)
                acks = []
            fn()
        if acks:
            send_acks(acks)

    def status(self) -> LinkStatus:
        """See :meth:`Link.status`; an open link also names the queues RabbitMQ is not
        delivering from (their consume unanswered, or refused and asked again)."""
        status = super().status()
        if status.state != "open":
            return status
        waiting = tuple(s.queue for s in list(self.subscriptions) if s.active and not s.consuming)
        return status._replace(unanswered=waiting)

    def on_open(self, conn: Any) -> None:
        for sub in list(self.subscriptions):
            if sub.active:
                sub.open_channel(conn)

    def on_lost(self, reason: BaseException) -> None:
        for sub in self.subscriptions:
            sub.channel = None  # settles for its deliveries are refused from now on

    def on_gave_up(self, error: BackendError) -> None:
        self.dead_letterer.stop()
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, str(error)))

    def on_closing(self) -> None:
        self.dead_letterer.stop()
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, "the backend was closed"))


class PendingAck:
    """An ack a job thread asked for, waiting for the end of the link's batch."""

    __slots__ = ("channel", "failed", "result", "sub", "tag")

    def __init__(
        self,
        sub: RabbitSubscription,
        channel: Channel,
        tag: int,
        failed: Callable[[BackendError], None] | None = None,
        result: Result[None] | None = None,
    ) -> None:
        self.sub = sub
        self.channel = channel
        self.tag = tag
        self.failed = failed
        self.result: Result[None] = Result() if result is None else result

    def fail(self, error: BackendError) -> None:
        """The ack could not be sent: tell whoever waits, or whoever asked to be told."""
        self.result.fail(error)
        if self.failed is not None:
            try:
                self.failed(error)
            except Exception:  # must not end the link's thread
                logger.exception("an ack failure callback failed")

    def __call__(self) -> None:  # run on its own (the link's own thread asked)
        send_acks([self])


#: The result of an ack nobody waits for: already done, so setting it does nothing.
_UNWATCHED: Result[None] = Result()
_UNWATCHED.set(None)


def send_acks(acks: list[PendingAck]) -> None:
    """Send ``acks`` (the link's thread): per channel, one multiple ack for the run at
    the front of its unsettled tags and single acks for the rest; settle each result."""
    by_sub: dict[RabbitSubscription, list[PendingAck]] = {}
    for pending in acks:
        by_sub.setdefault(pending.sub, []).append(pending)
    for sub, mine in by_sub.items():
        current = [p for p in mine if sub.is_current(p.channel) and p.channel.is_open]
        if len(current) < len(mine):
            gone = BackendError(STALE)
            for p in mine:
                if not (sub.is_current(p.channel) and p.channel.is_open):
                    p.fail(gone)
        if not current:
            continue
        ch = current[0].channel
        plan = sub.unsettled.plan(p.tag for p in current)
        sent: set[int] = set()
        try:
            if plan.multiple is not None:
                ch.basic_ack(plan.multiple, multiple=True)
                alone = set(plan.singles)
                sent.update(p.tag for p in current if p.tag not in alone)
            for tag in plan.singles:
                ch.basic_ack(tag)
                sent.add(tag)
        except Exception as exc:
            # The channel is going away mid-batch: what was not sent is redelivered.
            error = BackendError(f"{STALE} ({type(exc).__name__})")
            for p in current:
                if p.tag not in sent:
                    p.fail(error)
        for p in current:
            p.result.set(None)  # no-op for those that failed


class DeadLetterer:
    """A thread that dead-letters undecodable messages, off the link's thread.

    One at a time, in arrival order: a flood of garbage holds at most each channel's
    prefetch, and never more than one thread.
    """

    _STOP = None

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Undecodable, str] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, message: Undecodable, reason: str) -> None:
        """Dead-letter ``message`` with ``reason`` soon; never blocks."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queuey-dead-letterer", daemon=True
                )
                self._thread.start()
        self._queue.put((message, reason))

    def stop(self) -> None:
        """Let the thread end once it has done what it was given."""
        with self._lock:
            if self._thread is not None:
                self._queue.put(self._STOP)
                self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._STOP:
            message, reason = item
            try:
                message.dead_letter(reason)
            except Exception:  # logged by the delivery; the broker redelivers it
                logger.debug("undecodable message left to RabbitMQ", exc_info=True)


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
        self, backend: RabbitMQBackend, link: ConsumerLink, config: QueueConfig, sink: Sink
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

    def _consume_ok(self, ch: Channel) -> None:
        if self.is_current(ch):
            self._consuming = True
            self._refusals = 0
            self._missing_since = None
        self.started.set()

    def _message(
        self, ch: Channel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        if not self.is_current(ch):
            return
        tag = method.delivery_tag
        self.unsettled.delivered(tag)
        try:
            message_id = message_handle(props.message_id)
            try:
                # A W3C trace context rides in the headers (none: no trace, no cost).
                headers = props.headers
                trace = TraceContext.from_headers(headers) if headers else None
                envelope = Envelope.decode(body, trace=trace)
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
                redelivered=bool(method.redelivered),
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
