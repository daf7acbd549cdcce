"""The pipelined publisher: confirmed publishes with a window of outstanding confirms.

Owns: the publisher link's channel in confirm mode, the messages not yet sent or not yet
confirmed, republishing what the broker had not confirmed after a recovery (and counting
it: :attr:`PublisherLink.republished`), holding messages back while the broker blocks
publishers, knowing of each message whether it was ever handed to the connection
(:attr:`Pub.sent`), mapping a broker's return (``mandatory``) or nack to an error for that
one message (and moving to a fresh channel after a nack), and writing each batch's frames
in one write (marshalled by :mod:`.frames`, written through :mod:`.pika_compat`). The
message itself and its properties are :mod:`.messages`'.
Must never: report a message as published before the broker confirmed it; report one as
not enqueued once it was handed to the connection; send (or republish) a message its
sender gave up on; drop a message silently; let a message that cannot be encoded fail
anything but itself.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

import pika
import pika.exceptions
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.rabbitmq.errors import error_text, root_cause
from queuey_core.backends.rabbitmq.frames import FRAME_OVERHEAD, publish_frames, publish_method
from queuey_core.backends.rabbitmq.link import ANSWER_TIMEOUT, Link, refused_access
from queuey_core.backends.rabbitmq.messages import REFUSALS, Pub
from queuey_core.backends.rabbitmq.pika_compat import write_frames
from queuey_core.errors import (
    BackendError,
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
    UnroutableError,
)

logger = logging.getLogger(__name__)

#: Marshalled Basic.Publish methods a link keeps (one per channel, exchange and key).
_METHODS_KEPT = 1024


class PublisherLink(Link):
    """Publishes with a window of outstanding confirms; republishes after a recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._channel: Channel | None = None
        self._unsent: collections.deque[Pub] = collections.deque()
        # In tag order; an OrderedDict keeps taking from the front O(1) (a dict's
        # iteration would skip every slot freed before it).
        self._pending: collections.OrderedDict[int, Pub] = collections.OrderedDict()
        self._next_tag = 1
        # The marshalled Basic.Publish of each (channel, exchange, routing key) in use.
        self._methods: dict[tuple[int, str, str], bytes] = {}
        # Guards Pub.sent and Pub.given_up between the link's thread and the senders.
        self._handover = threading.Lock()
        #: The broker has told this connection it blocks publishers (memory or disk
        #: alarm); nothing more is sent until it unblocks.
        self.blocked = False
        #: Messages sent again after a lost connection: each may now be on the broker
        #: twice (with the same job id).
        self.republished = 0
        # The channel being opened (the link's thread only): an attempt RabbitMQ leaves
        # unanswered for ANSWER_TIMEOUT is given up for a new one.
        self._channel_attempt = 0
        # RabbitMQ refused (nacked) a message on the current channel: nothing more is sent
        # on it, and a fresh one is opened once its last confirm is in (see _renew_channel).
        self._refused = False
        #: Channels left for a fresh one after a refusal (for tests and diagnostics).
        self.renewed_channels = 0

    # -- any thread --------------------------------------------------------------------

    def publish(self, pubs: list[Pub]) -> None:
        """Queue ``pubs`` for publishing (any thread); their futures tell the outcome."""
        self.submit(lambda: self._add(pubs))

    def give_up(self, pubs: list[Pub]) -> tuple[list[Pub], list[Pub]]:
        """Stop sending those of ``pubs`` still unresolved: ``(never sent, sent)``.

        A message never sent is guaranteed never to be, so it is not enqueued; one sent
        may be on the broker. Neither is republished after a reconnection.
        """
        never: list[Pub] = []
        sent: list[Pub] = []
        with self._handover:
            for pub in pubs:
                if pub.future.done:
                    continue
                pub.given_up = True
                (sent if pub.sent else never).append(pub)
        return never, sent

    # -- the link's thread -------------------------------------------------------------

    def _add(self, pubs: list[Pub]) -> None:
        self._unsent.extend(pubs)
        self._flush()

    def _flush(self) -> None:
        ch = self._channel
        conn = self._conn
        if ch is None or not ch.is_open or self.blocked or self._refused or not self._unsent:
            return
        if conn is None or not conn.is_open:
            return  # the channel hears of it next: what is unsent goes on the next one
        with self._handover:
            batch = [pub for pub in self._unsent if not pub.given_up]
            self._unsent.clear()
            for pub in batch:
                if pub.sent:
                    self.republished += 1
                pub.sent = True
        # The whole batch as one write: pika's basic_publish marshals every frame through
        # generic code and writes each of a message's three frames apart, which cost the
        # link's thread more than the caller spent building the message.
        frames: list[bytes] = []
        number = ch.channel_number
        body_max = conn.params.frame_max - FRAME_OVERHEAD
        for pub in batch:
            try:
                frames.append(self._frames(number, body_max, pub))
            except Exception as exc:
                # Marshalled before anything is written: nothing of this one goes out,
                # and the channel is as it was.
                pub.fail(
                    NotEnqueuedError(
                        f"the message could not be encoded for AMQP: {error_text(exc)}",
                        reason=PublishFailure.UNENCODABLE,
                    )
                )
                continue
            self._pending[self._next_tag] = pub
            self._next_tag += 1
        if frames:
            # Through pika's own output, which counts the bytes its heartbeat checker reads.
            write_frames(conn, b"".join(frames))

    def _frames(self, number: int, body_max: int, pub: Pub) -> bytes:
        """``pub`` as pika's ``basic_publish`` (mandatory) would marshal it, in one piece."""
        key = (number, pub.exchange, pub.routing_key)
        method = self._methods.get(key)
        if method is None:
            method = publish_method(number, pub.exchange, pub.routing_key)
            if len(self._methods) >= _METHODS_KEPT:
                self._methods.clear()
            self._methods[key] = method
        return publish_frames(
            number, body_max, method, pub.body, props=pub.props, header=pub.header
        )

    def on_open(self, conn: Any) -> None:
        self.blocked = False
        conn.add_on_connection_blocked_callback(self._blocked)
        conn.add_on_connection_unblocked_callback(self._unblocked)
        self._open_channel(conn)

    def _open_channel(self, conn: Any) -> None:
        self._channel_attempt += 1
        attempt = self._channel_attempt
        conn.channel(on_open_callback=lambda ch: self._channel_opened(ch, attempt))
        self.later(ANSWER_TIMEOUT, lambda: self._unanswered(attempt))

    def _unanswered(self, attempt: int) -> None:
        if attempt != self._channel_attempt or self._channel is not None:
            return  # answered, or given up for a newer attempt already
        conn = self._conn
        if conn is None or not conn.is_open:
            return  # the link opens a channel again once it reconnects
        logger.warning(
            "RabbitMQ did not answer the publisher's channel within %gs; trying a new one",
            ANSWER_TIMEOUT,
        )
        self._open_channel(conn)

    def _blocked(self, conn: Any, frame: Any) -> None:
        self.blocked = True

    def _unblocked(self, conn: Any, frame: Any) -> None:
        self.blocked = False
        self._flush()

    def _channel_opened(self, ch: Channel, attempt: int) -> None:
        if attempt != self._channel_attempt:
            ch.close()  # answered too late: a newer attempt replaced it
            return
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_return_callback(self._returned)
        ch.confirm_delivery(
            ack_nack_callback=lambda f: self._confirmed(ch, f),
            callback=lambda _f: self._channel_ready(ch, attempt),
        )

    def _channel_ready(self, ch: Channel, attempt: int) -> None:
        if attempt != self._channel_attempt:
            ch.close()
            return
        self._channel = ch
        self._next_tag = 1
        self._refused = False
        self._flush()

    def _renew_channel(self) -> None:
        """Leave the current channel for a fresh one; called once nothing on it awaits a
        confirm, after RabbitMQ refused a message on it.

        RabbitMQ keeps per-channel state for each quorum queue a channel publishes to, and
        3.10 can leave it refusing for good: in the cluster test, a producer that had moved
        to another node as its node stopped was nacked 170 times in 90 s on one channel,
        while the queue had a leader and took other publishers' messages. A fresh channel
        starts without that state. A nack for any other reason (a full queue with
        ``reject-publish``) costs one channel open.
        """
        ch, self._channel = self._channel, None  # its close callback is ignored from now
        self.renewed_channels += 1
        if ch is not None and ch.is_open:
            ch.close()
        conn = self._conn
        if conn is not None and conn.is_open:
            self._open_channel(conn)
        # Else the link opens a channel once it has reconnected.

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self._channel:
            return
        self._channel = None
        unconfirmed = list(self._pending.values())
        self._pending.clear()
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            # The broker refused something on this channel: republishing would be refused
            # again, so tell the senders, and open a fresh channel for what comes next.
            text = f"{reason.reply_code} {reason.reply_text}"
            error: BackendError
            if len(unconfirmed) == 1 and reason.reply_code in REFUSALS:
                error = NotEnqueuedError(f"RabbitMQ refused the message: {text}")
            else:
                # Which one it refused is not said; the others may have made it.
                error = EnqueueUnknownError(
                    f"RabbitMQ closed the publishing channel before it confirmed: {text}",
                    reason=PublishFailure.REFUSED,
                )
            for pub in unconfirmed:
                pub.fail(error)
            conn = self._conn
            if conn is not None and conn.is_open:
                self._open_channel(conn)
            return
        # The connection is going away: republish what was not confirmed, in order, once
        # it is back. The broker may have taken some of it: duplicates, never losses.
        self._unsent.extendleft(reversed(unconfirmed))

    def _returned(
        self, ch: Channel, method: Basic.Return, props: BasicProperties, body: bytes
    ) -> None:
        for pub in self._pending.values():
            if pub.returned is None and pub.message_id == props.message_id:
                pub.returned = f"{method.reply_code} {method.reply_text}"
                return

    def _confirmed(self, ch: Channel, frame: Any) -> None:
        if ch is not self._channel:
            return  # a channel left behind: its tags are not this one's
        method = frame.method
        ok = isinstance(method, Basic.Ack)
        if not ok:
            self._refused = True
        if method.multiple:
            # Pending is in tag order: take from the front, never scan the whole window.
            done = []
            while self._pending:
                first = next(iter(self._pending))
                if first > method.delivery_tag:
                    break
                done.append(self._pending.pop(first))
        else:
            one = self._pending.pop(method.delivery_tag, None)
            done = [one] if one is not None else []
        for pub in done:
            if pub.future.done:
                continue
            if not ok:
                pub.fail(
                    NotEnqueuedError(
                        "RabbitMQ refused the message (nack)", reason=PublishFailure.NACKED
                    )
                )
            elif pub.returned is not None:
                pub.fail(
                    UnroutableError(
                        f"RabbitMQ could not route the message to {pub.routing_key!r} "
                        f"on exchange {pub.exchange!r}: {pub.returned}"
                    )
                )
            else:
                pub.future.set(None)
        if self._refused and not self._pending:
            self._renew_channel()

    def _fail_all(self, unsent: NotEnqueuedError, sent: EnqueueUnknownError) -> None:
        """Fail every message still here: ``sent`` if it was ever sent, else ``unsent``."""
        for pub in [*self._pending.values(), *self._unsent]:
            pub.fail(sent if pub.sent else unsent)
        self._pending.clear()
        self._unsent.clear()

    def on_gave_up(self, error: BackendError) -> None:
        cause = self.gave_up_because
        why = root_cause(cause) if cause is not None else str(error)
        unsent = str(error)
        if cause is not None and not refused_access(cause):
            unsent = (
                f"could not reach RabbitMQ at {self._where} for {self._recovery_timeout:g}s: {why}"
            )
        self._fail_all(
            NotEnqueuedError(unsent, reason=PublishFailure.UNREACHABLE),
            EnqueueUnknownError(
                f"the connection to RabbitMQ at {self._where} was lost before it confirmed, "
                f"and could not be re-established within {self._recovery_timeout:g}s to "
                f"publish again: {why}",
                reason=PublishFailure.LOST,
            ),
        )

    def on_closing(self) -> None:
        self._fail_all(
            NotEnqueuedError(
                "the RabbitMQ backend was closed before it was sent", reason=PublishFailure.CLOSED
            ),
            EnqueueUnknownError(
                "the RabbitMQ backend was closed before the broker confirmed",
                reason=PublishFailure.CLOSED,
            ),
        )

    def on_closing_while_down(self) -> None:
        self.on_closing()
