"""A message on its way to RabbitMQ: :class:`Pub`, and the AMQP properties it carries.

Owns: what every publish is made of (exchange, routing key, body, properties, the
future its sender waits on, whether it was ever sent), the properties every queuey
message carries (:func:`properties`), building one from an envelope (:func:`pub_for`,
with properties already encoded on ``enqueue_many``'s hot path), and checking that pika
can frame it before anything is sent (:func:`check_encodable`).
Must never: let a message that cannot be framed reach a connection's shared thread.
"""

from __future__ import annotations

import uuid
from typing import Any

from pika.spec import Basic, BasicProperties

from queuey_core.backends.rabbitmq.errors import error_text
from queuey_core.backends.rabbitmq.frames import encoded_properties
from queuey_core.backends.rabbitmq.result import Result
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import NotEnqueuedError, PublishFailure

#: Channel-closing replies that refuse the publish that caused them (no such exchange,
#: access refused, precondition failed such as a message too large).
REFUSALS = {403, 404, 406}


class Pub:
    """One message on its way to the broker, and the future its sender waits on."""

    __slots__ = (
        "body",
        "exchange",
        "future",
        "given_up",
        "header",
        "job_id",
        "message_id",
        "props",
        "returned",
        "routing_key",
        "sent",
    )

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        props: BasicProperties | None,
        job_id: uuid.UUID | None = None,
        *,
        header: bytes | None = None,
        message_id: str | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.body = body
        self.props = props
        self.job_id = job_id
        #: The properties already encoded (:func:`encoded_properties`), for a message
        #: built without ``props``; only the publisher link sends such a message.
        self.header = header
        #: What a return (``mandatory``) is matched by: the properties' message id.
        self.message_id = message_id if props is None else props.message_id
        self.future: Result[None] = Result()
        self.returned: str | None = None
        #: Handed to a connection at least once: it may be on the broker.
        self.sent = False
        #: Its sender stopped waiting: it is never sent (or republished) from then on.
        self.given_up = False

    def fail(self, error: BaseException) -> None:
        self.future.fail(error)


def properties(
    envelope: Envelope | EncodedEnvelope, headers: dict[str, Any] | None = None
) -> BasicProperties:
    # A trace context rides beside the body, in the headers (docs/protocol.md); the
    # batch fast path's encoded envelopes are never traced (the producer sees to it).
    trace = envelope.trace if isinstance(envelope, Envelope) else None
    if trace is not None:
        headers = {**trace.headers(), **headers} if headers else trace.headers()
    return BasicProperties(
        content_type="application/json",
        delivery_mode=2,  # persistent
        priority=envelope.priority or None,
        message_id=str(envelope.job_id),
        type=envelope.job_type,
        timestamp=envelope.enqueued_at // 1000,
        headers=headers,
    )


def pub_for(exchange: str, routing_key: str, envelope: Envelope | EncodedEnvelope) -> Pub:
    """The message of ``envelope``; one already encoded skips building pika's properties."""
    if isinstance(envelope, EncodedEnvelope):
        try:
            header = encoded_properties(envelope)
        except ValueError:
            # A name or priority AMQP cannot carry (the producer's checks rule them
            # out): pika's properties, which the link fails alone, not the whole batch.
            pass
        else:
            return Pub(
                exchange,
                routing_key,
                envelope.body,
                None,
                envelope.job_id,
                header=header,
                message_id=envelope.message_id,
            )
    return Pub(exchange, routing_key, envelope.encode(), properties(envelope), envelope.job_id)


def check_encodable(pub: Pub) -> Pub:
    """``pub``, once pika is known to frame it; NotEnqueuedError if it could not.

    Checked before anything is sent: a frame that cannot be built must fail its sender,
    never a connection's shared thread.
    """
    try:
        if pub.props is not None:
            pub.props.encode()
        Basic.Publish(exchange=pub.exchange, routing_key=pub.routing_key, mandatory=True).encode()
    except Exception as exc:
        raise NotEnqueuedError(
            f"the message could not be encoded for AMQP: {error_text(exc)}",
            reason=PublishFailure.UNENCODABLE,
        ) from exc
    return pub
