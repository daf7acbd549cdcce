"""The dead-letter tools on RabbitMQ: list, page, find, requeue, delete and purge.

Owns: the dead-letter publishes of the job path (:func:`dead_letter_pub`, and
:func:`raw_dead_letter_pub` for a body that is not an envelope); the
:class:`DeadLetterTools` capability of :class:`RabbitMQBackend` on the admin connection
(:class:`RabbitDeadLetters`), each command one consume pass over the dead-letter queue
(:mod:`.dead_letter_pass`) that stops as soon as it has what it needs, requeues and
deletes in the same pass (:mod:`.dead_letter_moves`); and reading a dead letter back
(:func:`dead_letter_of`), whatever its body and headers hold. The unroutable queue's
dead letters go through here too. Must never: lose or reorder a dead letter while
reading it (everything a pass holds goes back when its channel closes), or hide one (a
body that is not an envelope is listed with a preview, a header that cannot be read
shows as unknown).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TypeVar

from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetter,
    DeadLetterPage,
    DeadLetterTools,
    UndecodableDeadLetter,
)
from queuey_core.backends.dead_letter_query import DeadLetterFilter, check_page, page_of
from queuey_core.backends.rabbitmq import dead_letter_moves as moves
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.dead_letter_pass import (
    HEAD,
    Held,
    exclusive,
    header_reason,
    may_be,
    open_pass,
    quick_keeps,
)
from queuey_core.backends.rabbitmq.messages import Pub, check_encodable, properties
from queuey_core.backends.rabbitmq.unroutable import last_death_ms, unroutable_reason
from queuey_core.envelope import Envelope
from queuey_core.errors import DecodeError
from queuey_core.text import body_preview, message_handle
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


T = TypeVar("T")


class RabbitDeadLetters(DeadLetterTools):
    """The dead-letter tools on the admin connection: one consume pass per command
    (:mod:`.dead_letter_pass`), moves in transactions (:mod:`.dead_letter_moves`).

    :class:`RabbitMQBackend` is one (it has the ``_admin`` they run on).
    """

    _admin: Admin

    def __init__(self, admin: Admin) -> None:
        self._admin = admin

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """See :meth:`DeadLetterTools.list_dead_letters`: a pass that stops after
        ``limit``; everything goes back, in order, when its channel closes."""

        def work(ch: BlockingChannel) -> list[AnyDeadLetter]:
            dlq = topology.holding_queue(queue)
            with contextlib.closing(open_pass(ch, dlq, upto=limit).messages) as messages:
                return [dead_letter_at(held, dlq) for held in itertools.islice(messages, limit)]

        return self._admin.run(_locked(queue, work))

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        """See :meth:`DeadLetterTools.dead_letter_page`.

        Unfiltered, the pass stops after the page (the total is the queue's count) and
        decodes only the page; filtered, it reads to the end to count, and decodes only
        what the filter keeps (the reason is in the headers, the job type read with a
        plain JSON parse).
        """
        check_page(offset, limit)
        wanted = DeadLetterFilter(job_type, reason)

        def work(ch: BlockingChannel) -> DeadLetterPage:
            dlq = topology.holding_queue(queue)
            if wanted.everything:
                count, messages = open_pass(ch, dlq, upto=offset + limit)
                with contextlib.closing(messages):
                    head = itertools.islice(messages, offset + limit)
                    page = [dead_letter_at(held, dlq) for held in head if held.position > offset]
                following = offset + limit
                return DeadLetterPage(page, count, following if following < count else None)
            return page_of(_kept(open_pass(ch, dlq).messages, dlq, wanted), offset, limit)

        return self._admin.run(_locked(queue, work))

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`: first in the head of the queue
        (:data:`HEAD`: quick to read and to give back), then, if it is not there, in a
        pass over the whole queue; only messages that may be it are decoded."""

        def work(ch: BlockingChannel) -> AnyDeadLetter | None:
            dlq = topology.holding_queue(queue)
            count, messages = open_pass(ch, dlq, upto=HEAD)
            found = _first(messages, dlq, handle)
            if found is not None or count <= HEAD:
                return found
            # The head stays held: the whole queue goes back at once (quick, see HEAD).
            return _first(open_pass(ch, dlq, after=HEAD).messages, dlq, handle)

        return self._admin.run(_locked(queue, work))

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Generator[AnyDeadLetter, None, None]:
        """See :meth:`DeadLetterTools.iter_dead_letters`: one pass, holding the admin
        connection (and every message it read, on the broker) until the iterator ends
        or is closed; the client keeps none of them."""
        wanted = DeadLetterFilter(job_type, reason)
        with self._admin.channel() as ch, exclusive(ch, topology.holding_queue(queue)):
            dlq = topology.holding_queue(queue)
            with contextlib.closing(open_pass(ch, dlq).messages) as messages:
                yield from _kept(messages, dlq, wanted)

    def requeue_dead_letters(
        self,
        queue: str,
        job_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters` and :func:`moves.requeue`:
        published and removed in the same transaction, :data:`moves.BATCH` at a time.

        Undecodable messages are never requeued (they would be dead-lettered again).
        ``queue`` may be :data:`topology.UNROUTABLE`: each goes to the queue its envelope
        names, if that exists now.
        """
        wanted = None if job_ids is None else set(job_ids)
        return self._admin.run(
            _locked(queue, lambda ch: moves.requeue(ch, queue, wanted, progress, dead_letter_at))
        )

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`: the rest go back, in order."""
        return self._admin.run(
            _locked(queue, lambda ch: moves.delete(ch, queue, set(handles), dead_letter_at))
        )

    def purge_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: one ``queue.purge``."""
        frame = self._admin.run(
            _locked(queue, lambda ch: ch.queue_purge(topology.holding_queue(queue)))
        )
        purged = int(frame.method.message_count)
        if progress is not None:
            progress(purged)
        return purged


def _kept(
    messages: Iterator[Held], dlq: str, wanted: DeadLetterFilter
) -> Generator[AnyDeadLetter, None, None]:
    """The dead letters of a pass that ``wanted`` keeps, decoding only those it may."""
    for held in messages:
        if wanted.everything or quick_keeps(held, dlq, wanted):
            dead = dead_letter_at(held, dlq)
            if wanted.keeps(dead):
                yield dead


def _locked(queue: str, work: Callable[[BlockingChannel], T]) -> Callable[[BlockingChannel], T]:
    """``work`` holding the lock on the dead letters of ``queue`` (:func:`exclusive`)."""

    def locked(ch: BlockingChannel) -> T:
        with exclusive(ch, topology.holding_queue(queue)):
            return work(ch)

    return locked


def _first(messages: Generator[Held, None, None], dlq: str, handle: str) -> AnyDeadLetter | None:
    """The first dead letter of a pass listed under ``handle``; the pass is closed."""
    with contextlib.closing(messages):
        for held in messages:
            if may_be(held, handle) and (dead := dead_letter_at(held, dlq)).handle == handle:
                return dead
    return None


def dead_letter_at(held: Held, dlq: str) -> AnyDeadLetter:
    """The dead letter a message of a pass over ``dlq`` is."""
    key = held.routing_key if dlq == topology.UNROUTABLE else None
    return dead_letter_of(held.props, held.body, held.position, key)


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
    try:
        # Its trace context too, so that a requeued dead letter stays in its job's trace.
        envelope = Envelope.decode(body).with_trace(TraceContext.from_headers(headers))
    except Exception as exc:  # DecodeError; anything else would be a bug, and still shown
        error = str(exc) if isinstance(exc, DecodeError) else type(exc).__name__
        handle = message_handle(props.message_id) or f"#{position}"
        return UndecodableDeadLetter(body_preview(body), error, reason, dead_at, handle)
    return DeadLetter(envelope, reason, dead_at, str(envelope.job_id))


def _millis(value: object) -> int | None:
    """A time header in ms since the epoch, or None when it is not a plausible one."""
    # pika reads 64-bit integers as its own int subclass: take any int but a bool.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**53:
        return None
    return int(value)
