"""Reading a RabbitMQ dead letter back, whatever its body and headers hold: on the scan
path (a message of ``<queue>.dlq``) and from the job store's table (a row of it).

Owns: :func:`dead_letter_of` and :func:`letter_from`. Must never: hide a dead letter (a
body that is not an envelope is listed with a preview, a header that cannot be read
shows as unknown) or trust what it reads.
"""

from __future__ import annotations

from typing import Any

from pika.spec import BasicProperties

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetter, UndecodableDeadLetter
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.dead_letter_pass import header_reason
from queuey_core.backends.rabbitmq.unroutable import last_death_ms, unroutable_reason
from queuey_core.envelope import Envelope
from queuey_core.errors import DecodeError
from queuey_core.text import body_preview, message_handle
from queuey_core.trace_context import TraceContext


def dead_letter_of(
    props: BasicProperties, body: bytes, position: int, unroutable_key: str | None = None
) -> AnyDeadLetter:
    """What a message of a dead-letter queue is, read without trusting any of it; one of
    ``queuey.unroutable`` comes with its routing key, which names its queue."""
    headers = props.headers if isinstance(props.headers, dict) else {}
    reason = header_reason(headers)
    if unroutable_key is not None and topology.REASON_HEADER not in headers:
        reason = unroutable_reason(unroutable_key)
    # Dead-lettered by RabbitMQ (unroutable, rejected): its x-death says when.
    dead_at = _millis(headers.get(topology.DEAD_AT_HEADER)) or last_death_ms(headers)
    return letter_from(
        body, headers, reason, dead_at, message_handle(props.message_id) or f"#{position}"
    )


def letter_from(
    body: bytes, headers: dict[str, Any], reason: str, dead_at: int | None, handle: str
) -> AnyDeadLetter:
    """The dead letter of ``body``, its headers and what was read of them; ``handle`` is
    the one it is listed under if it is not an envelope (an envelope's is its job id).
    An envelope's ``dead_at`` is never before its ``enqueued_at`` (:meth:`DeadLetter.of`).
    Shared by the scan path and the job store's table (:mod:`.dead_letter_rows`)."""
    try:
        # Its trace context too, so that a requeued dead letter stays in its job's trace.
        envelope = Envelope.decode(body).with_trace(TraceContext.from_headers(headers))
    except Exception as exc:  # DecodeError; anything else would be a bug, and still shown
        error = str(exc) if isinstance(exc, DecodeError) else type(exc).__name__
        return UndecodableDeadLetter(body_preview(body), error, reason, dead_at, handle)
    return DeadLetter.of(envelope, reason, dead_at, str(envelope.job_id))


def _millis(value: object) -> int | None:
    """A time header in ms since the epoch, or None when it is not a plausible one."""
    # pika reads 64-bit integers as its own int subclass: take any int but a bool.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**53:
        return None
    return int(value)
