"""The pipelined publisher: confirmed publishes with a window of outstanding confirms.

Owns: the publisher link's channel in confirm mode, the messages not yet sent or not yet
confirmed, republishing what the broker had not confirmed after a recovery, mapping a
broker's return (``mandatory``) or nack to an error for that one message, and the AMQP
properties every queuey message carries.
Must never: report a message as published before the broker confirmed it; drop a
message silently (an unconfirmed one is republished or its sender told).
"""

from __future__ import annotations

import collections
from typing import Any

import pika
import pika.exceptions
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.rabbitmq.link import Link, Result
from queuey_core.envelope import Envelope
from queuey_core.errors import BackendError, UnroutableError


class Pub:
    """One message on its way to the broker, and the future its sender waits on."""

    __slots__ = ("body", "exchange", "future", "props", "returned", "routing_key")

    def __init__(
        self, exchange: str, routing_key: str, body: bytes, props: BasicProperties
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.body = body
        self.props = props
        self.future: Result[None] = Result()
        self.returned: str | None = None

    def fail(self, error: BaseException) -> None:
        self.future.fail(error)


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

    def publish(self, pubs: list[Pub]) -> None:
        """Queue ``pubs`` for publishing (any thread); their futures tell the outcome."""
        self.submit(lambda: self._add(pubs))

    def _add(self, pubs: list[Pub]) -> None:
        self._unsent.extend(pubs)
        self._flush()

    def _flush(self) -> None:
        ch = self._channel
        if ch is None or not ch.is_open:
            return
        while self._unsent:
            pub = self._unsent.popleft()
            tag = self._next_tag
            self._next_tag += 1
            self._pending[tag] = pub
            ch.basic_publish(pub.exchange, pub.routing_key, pub.body, pub.props, mandatory=True)

    def on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, ch: Channel) -> None:
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_return_callback(self._returned)
        ch.confirm_delivery(
            ack_nack_callback=self._confirmed, callback=lambda _f: self._channel_ready(ch)
        )

    def _channel_ready(self, ch: Channel) -> None:
        self._channel = ch
        self._next_tag = 1
        self._flush()

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self._channel:
            return
        self._channel = None
        unconfirmed = list(self._pending.values())
        self._pending.clear()
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            # The broker refused something on this channel: republishing would be refused
            # again, so tell the senders, and open a fresh channel for what comes next.
            error = BackendError(f"RabbitMQ closed the publishing channel: {reason}")
            for pub in unconfirmed:
                pub.fail(error)
            conn = self._conn
            if conn is not None and conn.is_open:
                conn.channel(on_open_callback=self._channel_opened)
            return
        # The connection is going away: republish what was not confirmed, in order, once
        # it is back. The broker may have taken some of it: duplicates, never losses.
        self._unsent.extendleft(reversed(unconfirmed))

    def _returned(
        self, ch: Channel, method: Basic.Return, props: BasicProperties, body: bytes
    ) -> None:
        for pub in self._pending.values():
            if pub.returned is None and pub.props.message_id == props.message_id:
                pub.returned = f"{method.reply_code} {method.reply_text}"
                return

    def _confirmed(self, frame: Any) -> None:
        method = frame.method
        ok = isinstance(method, Basic.Ack)
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
                pub.fail(BackendError("RabbitMQ refused the message (nack)"))
            elif pub.returned is not None:
                pub.fail(
                    UnroutableError(
                        f"RabbitMQ could not route the message to {pub.routing_key!r} "
                        f"on exchange {pub.exchange!r}: {pub.returned}"
                    )
                )
            else:
                pub.future.set(None)

    def _fail_all(self, error: BackendError) -> None:
        for pub in [*self._pending.values(), *self._unsent]:
            pub.fail(error)
        self._pending.clear()
        self._unsent.clear()

    def on_gave_up(self, error: BackendError) -> None:
        self._fail_all(error)

    def on_closing(self) -> None:
        self._fail_all(BackendError("the RabbitMQ backend was closed before the broker confirmed"))


def properties(envelope: Envelope, headers: dict[str, Any] | None = None) -> BasicProperties:
    return BasicProperties(
        content_type="application/json",
        delivery_mode=2,  # persistent
        priority=envelope.priority or None,
        message_id=str(envelope.job_id),
        type=envelope.job_type,
        timestamp=envelope.enqueued_at // 1000,
        headers=headers,
    )
