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
import time
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetterPage,
    DeadLetterWindow,
    Inspection,
)
from queuey_core.backends.dead_letter_query import DeadLetterFilter, DeadLetterToolsBase, cut
from queuey_core.backends.rabbitmq import dead_letter_moves as moves
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.dead_letter_index import IndexedDeadLetters
from queuey_core.backends.rabbitmq.dead_letter_pass import (
    Held,
    exclusive,
    give_back,
    may_be,
    open_pass,
    quick_keeps,
)
from queuey_core.backends.rabbitmq.dead_letter_reading import dead_letter_of
from queuey_core.backends.rabbitmq.dead_letter_writes import DeadLetterWriter
from queuey_core.backends.rabbitmq.messages import Pub, check_encodable, properties
from queuey_core.backends.rabbitmq.publishing import Publishing
from queuey_core.envelope import Envelope
from queuey_core.results.dead_letter_table import DeadLetterTable


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


class RabbitDeadLetters(DeadLetterToolsBase):
    """The dead-letter tools on the admin connection: one consume pass per command
    (:mod:`.dead_letter_pass`), moves in transactions (:mod:`.dead_letter_moves`).

    :class:`RabbitMQBackend` is one (it has the ``_admin`` they run on).
    """

    _admin: Admin
    _publishing: Publishing
    #: With a job store, what writes the worker's dead letters into it.
    _dead_writer: DeadLetterWriter | None = None
    #: With a job store, where the dead letters of every queue but the unroutable one
    #: live (:mod:`.dead_letter_index`); None: the scan path.
    _index: IndexedDeadLetters | None = None

    def __init__(self, admin: Admin) -> None:
        self._admin = admin

    def _indexed(self, queue: str) -> IndexedDeadLetters | None:
        """The index that holds ``queue``'s dead letters, or None (the scan path)."""
        return self._index if queue != topology.UNROUTABLE else None

    def publish_dead_letter(
        self, envelope: Envelope, reason: str, *, queue: str | None = None
    ) -> None:
        """Publish ``envelope`` to the dead-letter queue of ``queue``, with why, when, attempt.

        ``queue`` is the queue the envelope was delivered from (by default the one it
        names). Raises before anything is sent if the message could not be encoded.
        """
        pub = dead_letter_pub(envelope, reason, queue=queue)
        if not self._written(queue or envelope.queue, pub):
            self._publishing.send([pub])

    def publish_raw_dead_letter(
        self, queue: str, body: bytes, reason: str, *, message_id: str | None = None
    ) -> None:
        """The poison path: ``body`` unchanged to the dead-letter queue of ``queue``.

        Nothing of the original message but its body (and a printable message id) is
        kept, and every header is plain ASCII: this publish cannot fail on content.
        """
        pub = raw_dead_letter_pub(queue, body, reason, message_id=message_id)
        if not self._written(queue, pub):
            self._publishing.send([pub])

    def _written(self, queue: str, pub: Pub) -> bool:
        """Whether the dead letter ``pub`` is a committed row of the job store (with a
        store attached, and up); False: it goes to ``<queue>.dlq``."""
        writer = self._dead_writer
        return writer is not None and writer.write(queue, pub.props, pub.body)

    # -- dead letters in the job store (KeepsDeadLettersInStore) ----------------------------

    def keep_dead_letters_in(self, table: DeadLetterTable) -> None:
        """Keep dead letters as rows of ``table`` (a job store's) from now on: the
        worker writes them there, the dead-letter tools read and move them there, and
        import what still reaches ``<queue>.dlq`` (see :mod:`.dead_letter_index`)."""
        self._index = IndexedDeadLetters(self._admin, table)
        self._dead_writer = DeadLetterWriter(table)

    def has_dead_letter_store(self) -> bool:
        """See :meth:`KeepsDeadLettersInStore.has_dead_letter_store`."""
        return self._index is not None

    def import_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int | None:
        """See :meth:`KeepsDeadLettersInStore.import_dead_letters`."""
        index = self._indexed(queue)
        return None if index is None else index.import_pending(queue, progress)

    def stored_dead_letters(self) -> dict[str, int]:
        """See :meth:`KeepsDeadLettersInStore.stored_dead_letters`."""
        return {} if self._index is None else self._index.table.counts()

    def unimported_dead_letters(self, queue: str) -> int:
        """See :meth:`KeepsDeadLettersInStore.unimported_dead_letters`."""

        def work(ch: BlockingChannel) -> int:
            try:
                frame = ch.queue_declare(topology.holding_queue(queue), passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    return 0
                raise
            return int(frame.method.message_count)

        return self._admin.run(work)

    def with_stored_dead_letters(self, inspection: Inspection) -> Inspection:
        """See :meth:`KeepsDeadLettersInStore.with_stored_dead_letters`."""
        if self._index is None:
            return inspection
        rows = self.stored_dead_letters()
        for name, counts in inspection.queues.items():
            if counts is not None and counts.dead_letters is not None:
                dead = counts.dead_letters + rows.get(name, 0)
                inspection.queues[name] = counts._replace(dead_letters=dead)
        return inspection

    @property
    def dead_letter_fallbacks(self) -> int:
        """Dead letters published to ``<queue>.dlq`` because the job store failed or was
        slow (0 without a store)."""
        return 0 if self._dead_writer is None else self._dead_writer.fallbacks

    def _window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        """See :meth:`DeadLetterToolsBase._window`: with a store, rows; else one pass on a
        channel of its own, holding the queue's lock and every message it read (on the
        broker: the client keeps a few) until the window ends or is closed, when all go
        back in place at once."""
        if (index := self._indexed(queue)) is not None:
            return index.window(queue, wanted, offset, limit)
        letters = self._scan(queue, wanted, offset, limit)
        return DeadLetterWindow(letters, offset=offset, limit=limit)

    def _scan(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> Generator[AnyDeadLetter, None, int]:
        dlq = topology.holding_queue(queue)
        with self._admin.channel() as ch, exclusive(ch, dlq):
            try:
                return (yield from _window_of_pass(ch, dlq, wanted, offset, limit))
            finally:
                # Also when the caller stops early: the next command counts it all.
                with contextlib.suppress(pika.exceptions.AMQPError):
                    give_back(ch, dlq)

    def _page(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterPage:
        """See :meth:`DeadLetterToolsBase._page`: with a store, a query; else the window on
        the admin connection's retry (a stale connection is opened again once)."""
        if (index := self._indexed(queue)) is not None:
            return index.page(queue, wanted, offset, limit)

        def work(ch: BlockingChannel) -> DeadLetterPage:
            dlq = topology.holding_queue(queue)
            letters = _window_of_pass(ch, dlq, wanted, offset, limit)
            return DeadLetterWindow(letters, offset=offset, limit=limit).page()

        return self._admin.run(_locked(queue, work))

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`: a pass over the whole queue (see
        :data:`.dead_letter_pass.HEAD`); only messages that may be it are decoded."""
        if (index := self._indexed(queue)) is not None:
            return index.get_dead_letter(queue, handle)

        def work(ch: BlockingChannel) -> AnyDeadLetter | None:
            dlq = topology.holding_queue(queue)
            # One whole pass, even for a letter near the head: a pass stopped early in
            # the head leaves deliveries in flight, and the queue's count is low until
            # the broker has them back (a second pass then stopped short).
            return _first(open_pass(ch, dlq).messages, dlq, handle)

        return self._admin.run(_locked(queue, work))

    def _requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters` and :func:`moves.requeue`:
        published and removed in the same transaction, :data:`moves.BATCH` at a time.

        Undecodable messages are never requeued (they would be dead-lettered again).
        ``queue`` may be :data:`topology.UNROUTABLE`: each goes to the queue its envelope
        names, if that exists now.
        """
        if (index := self._indexed(queue)) is not None:
            return index.requeue(queue, job_ids, progress)
        wanted = None if job_ids is None else set(job_ids)
        return self._admin.run(
            _locked(queue, lambda ch: moves.requeue(ch, queue, wanted, progress, dead_letter_at))
        )

    def _delete(self, queue: str, handles: list[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`: the rest go back, in order."""
        if (index := self._indexed(queue)) is not None:
            return index.delete(queue, handles)
        return self._admin.run(
            _locked(queue, lambda ch: moves.delete(ch, queue, set(handles), dead_letter_at))
        )

    def _purge(self, queue: str) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: one ``queue.purge``."""
        if (index := self._indexed(queue)) is not None:
            return index.purge(queue)
        frame = self._admin.run(
            _locked(queue, lambda ch: ch.queue_purge(topology.holding_queue(queue)))
        )
        return int(frame.method.message_count)


def _window_of_pass(
    ch: BlockingChannel, dlq: str, wanted: DeadLetterFilter, offset: int, limit: int | None
) -> Generator[AnyDeadLetter, None, int]:
    """The window of one pass over ``dlq`` on ``ch`` (see :func:`cut`). Unfiltered, the
    pass stops after the window (the total is the queue's count) and decodes only the
    window; filtered, it reads to the end to count, and decodes only what the filter
    keeps (the reason is in the headers, the job type read with a plain JSON parse)."""
    if wanted.everything:
        held, messages = open_pass(ch, dlq, upto=None if limit is None else offset + limit)
        with contextlib.closing(messages):
            window = (dead_letter_at(h, dlq) for h in messages if h.position > offset)
            return (yield from cut(window, offset, limit, total=held, skipped=offset))
    with contextlib.closing(open_pass(ch, dlq).messages) as messages:
        return (yield from cut(_kept(messages, dlq, wanted), offset, limit))


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
        dlq = topology.holding_queue(queue)
        with exclusive(ch, dlq):
            done = work(ch)
            give_back(ch, dlq)
            return done

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
