"""The dead-letter tools on RabbitMQ: list, requeue, delete and purge, and reading one.

Owns: the dead-letter publishes of the job path (:func:`dead_letter_pub`, and
:func:`raw_dead_letter_pub` for a body that is not an envelope); the
:class:`DeadLetterTools` capability of :class:`RabbitMQBackend` on the admin connection
(:class:`RabbitDeadLetters`): taking every message of a dead-letter queue unacked and
giving it back (:func:`get_all`), requeueing confirmed before removal
(:func:`requeue`), and reading a dead letter back (:func:`dead_letter_of`), whatever
its body and headers hold. The unroutable queue's dead letters go through here too.
Must never: lose or reorder a dead letter while listing it (everything taken is given
back with one multiple nack), or hide one (a body that is not an envelope is listed
with a preview, a header that cannot be read shows as unknown).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetter,
    DeadLetterPage,
    DeadLetterTools,
    UndecodableDeadLetter,
)
from queuey_core.backends.dead_letter_query import DeadLetterFilter, page_of
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.messages import Pub, check_encodable, properties
from queuey_core.backends.rabbitmq.unroutable import last_death_ms, unroutable_reason
from queuey_core.envelope import Envelope
from queuey_core.errors import DecodeError, UnknownQueueError
from queuey_core.text import ascii_printable, body_preview, message_handle
from queuey_core.trace_context import TraceContext


def dead_letter_pub(envelope: Envelope, reason: str, *, queue: str | None = None) -> Pub:
    """``envelope`` for the dead-letter queue of ``queue``, with why, when, attempt.

    ``queue`` is the queue the envelope was delivered from (by default the one it
    names). Raises before anything is sent if the message could not be encoded.
    """
    where = envelope.queue if queue is None else queue
    headers = topology.dead_letter_headers(
        reason, queue=where, attempt=envelope.attempt, dead_at=int(time.time() * 1000)
    )
    props = properties(envelope, headers)
    return check_encodable(Pub("", topology.dead_letter_name(where), envelope.encode(), props))


def raw_dead_letter_pub(
    queue: str, body: bytes, reason: str, *, message_id: str | None = None
) -> Pub:
    """The poison path: ``body`` unchanged for the dead-letter queue of ``queue``.

    Nothing of the original message but its body (and a printable message id) is
    kept, and every header is plain ASCII: this publish cannot fail on content.
    """
    headers = topology.dead_letter_headers(reason, queue=queue, dead_at=int(time.time() * 1000))
    props = BasicProperties(delivery_mode=2, message_id=message_id, headers=headers)
    return check_encodable(Pub("", topology.dead_letter_name(queue), bytes(body), props))


class RabbitDeadLetters(DeadLetterTools):
    """The dead-letter tools of one backend, on its admin connection."""

    def __init__(self, admin: Admin) -> None:
        self._admin = admin

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """See :meth:`DeadLetterTools.list_dead_letters`.

        Takes the messages unacked, then gives them all back with one multiple nack, so
        nothing is lost or reordered. Messages that are not queuey envelopes are listed
        as :class:`UndecodableDeadLetter`.
        """

        def work(ch: BlockingChannel) -> list[AnyDeadLetter]:
            return [d for _, d in get_all(ch, topology.holding_queue(queue), limit)]

        return self._admin.run(work)

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        """See :meth:`DeadLetterTools.dead_letter_page`."""
        return page_of(
            self.iter_dead_letters(queue, job_type=job_type, reason=reason), offset, limit
        )

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`."""
        return next((d for d in self.iter_dead_letters(queue) if d.handle == handle), None)

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Iterator[AnyDeadLetter]:
        """See :meth:`DeadLetterTools.iter_dead_letters`."""
        wanted = DeadLetterFilter(job_type, reason)
        return (d for d in self.list_dead_letters(queue) if wanted.keeps(d))

    def requeue_dead_letters(
        self,
        queue: str,
        job_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`: confirmed on ``queue`` before
        removal.

        Undecodable messages are never requeued (they would be dead-lettered again).
        ``queue`` may be :data:`topology.UNROUTABLE`: each goes to the queue its envelope
        names, if that exists now.
        """
        wanted = None if job_ids is None else set(job_ids)
        return self._admin.run(lambda ch: requeue(ch, queue, wanted))

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`: the rest go back, in order."""
        wanted = set(handles)

        def work(ch: BlockingChannel) -> int:
            got = get_all(ch, topology.holding_queue(queue), None, give_back=False)
            doomed = [tag for tag, d in got if d.handle in wanted]
            for tag in doomed:
                ch.basic_ack(tag)
            ch.basic_recover(requeue=True)
            return len(doomed)

        return self._admin.run(work)

    def purge_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: one ``queue.purge``."""
        frame = self._admin.run(lambda ch: ch.queue_purge(topology.holding_queue(queue)))
        purged = int(frame.method.message_count)
        if progress is not None:
            progress(purged)
        return purged


def get_all(
    ch: BlockingChannel, dlq: str, limit: int | None, *, give_back: bool = True
) -> list[tuple[int, AnyDeadLetter]]:
    """Every message of ``dlq`` (up to ``limit``), held unacked; given back unless told not.

    Each comes with its delivery tag, in queue order; a position handle counts from 1.
    """
    got: list[tuple[int, AnyDeadLetter]] = []
    last_tag: int | None = None
    while limit is None or len(got) < limit:
        method, props, body = ch.basic_get(dlq, auto_ack=False)
        if method is None:
            break
        last_tag = method.delivery_tag
        key = method.routing_key if dlq == topology.UNROUTABLE else None
        got.append((method.delivery_tag, dead_letter_of(props, body, len(got) + 1, key)))
    if give_back and last_tag is not None:
        ch.basic_nack(last_tag, multiple=True, requeue=True)
    return got


def requeue(ch: BlockingChannel, queue: str, wanted: set[str] | None) -> int:
    """Move dead letters of ``queue`` (those in ``wanted``, or all) back to be run, at
    attempt 1; each is confirmed on its queue before it is removed. Returns how many.

    A dead letter goes back to ``queue``; one of the unroutable queue to the queue its
    envelope names, if that exists now (else it stays). Bodies that are not envelopes
    stay (they would be refused again); so does everything else, in order.
    """
    ch.confirm_delivery()
    unroutable = queue == topology.UNROUTABLE
    chosen = [
        (tag, d)
        for tag, d in get_all(ch, topology.holding_queue(queue), None, give_back=False)
        if isinstance(d, DeadLetter) and (wanted is None or str(d.envelope.job_id) in wanted)
    ]
    moved: list[int] = []
    for tag, dead in chosen:
        fresh = dead.envelope.fresh()
        target = fresh.queue if unroutable else queue
        try:
            ch.basic_publish("", target, fresh.encode(), properties(fresh), mandatory=True)
        except pika.exceptions.UnroutableError as exc:
            if not unroutable:
                raise UnknownQueueError(queue) from exc
            continue  # its queue still does not exist: it stays where it is
        moved.append(tag)
    for tag in moved:
        ch.basic_ack(tag)
    ch.basic_recover(requeue=True)  # everything else back, in order
    return len(moved)


def dead_letter_of(
    props: BasicProperties, body: bytes, position: int, unroutable_key: str | None = None
) -> AnyDeadLetter:
    """What a message of a dead-letter queue is, read without trusting any of it; one of
    ``queuey.unroutable`` comes with its routing key, which names its queue."""
    headers = props.headers if isinstance(props.headers, dict) else {}
    reason = _reason(headers)
    if unroutable_key is not None and topology.REASON_HEADER not in headers:
        reason = unroutable_reason(unroutable_key)
    # Dead-lettered by RabbitMQ (unroutable, rejected): its x-death says when.
    dead_at = _millis(headers.get(topology.DEAD_AT_HEADER)) or last_death_ms(headers)
    try:
        # Its trace context too, so that a requeued dead letter stays in its job's trace.
        envelope = Envelope.decode(body).with_trace(TraceContext.from_headers(headers))
    except Exception as exc:  # DecodeError; anything else would be a bug, and still shown
        error = str(exc) if isinstance(exc, DecodeError) else type(exc).__name__
        handle = message_handle(props.message_id) or f"#{position}"
        return UndecodableDeadLetter(body_preview(body), error, reason, dead_at, handle)
    return DeadLetter(envelope, reason, dead_at, str(envelope.job_id))


def _reason(headers: dict[str, Any]) -> str:
    """Our reason header; else RabbitMQ's x-death reason; else "unknown"."""
    reason = _text(headers.get(topology.REASON_HEADER))
    if reason is not None:
        return reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        why = _text(deaths[0].get("reason"))
        if why is not None:
            return f"dead-lettered by RabbitMQ ({why})"
    return "unknown"


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return ascii_printable(value, topology.MAX_REASON)


def _millis(value: object) -> int | None:
    """A time header in ms since the epoch, or None when it is not a plausible one."""
    # pika reads 64-bit integers as its own int subclass: take any int but a bool.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**53:
        return None
    return int(value)
