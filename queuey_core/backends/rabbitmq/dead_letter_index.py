"""The dead-letter tools on RabbitMQ with a job store: dead letters are rows of the
store's table (:mod:`queuey_core.results.dead_letter_table`), so a page, a lookup, a
filter and a move of one are queries, whatever the number of dead letters (issue 28).

The worker writes a dead letter's row instead of publishing it (:mod:`.dead_letter_writes`).
What still reaches ``<queue>.dlq`` (the worker's fallback while the store is down,
RabbitMQ's own dead-lettering, dead letters from before the store, other producers) is
*imported* at the start of every command: consumed, inserted in committed batches, and
acked only after the commit. An import cut anywhere reads the unacked rest again next
time, and the table's key makes a second insert of the same message a no-op: nothing
lost, nothing twice.

A requeue claims a batch of rows with a token (one transaction), publishes their fresh
envelopes in an AMQP transaction, then deletes the claimed rows. Cut between the commit
on the broker and the delete in the store (a crash), the rows stay claimed: the next
requeue of that queue reports them in doubt (:class:`DeadLetterMoveError`) and makes
them dead letters again. Moves and imports hold the queue's lock (:func:`.exclusive`);
reads need none (each is one transaction).

Owns: :class:`IndexedDeadLetters` and :func:`import_pending`. Must never: ack a message
of ``<queue>.dlq`` before its row is committed, or delete a row whose requeue the broker
did not commit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Generator

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetter,
    DeadLetterPage,
    DeadLetterWindow,
)
from queuey_core.backends.dead_letter_query import DeadLetterFilter, cut
from queuey_core.backends.dead_letter_tools import next_offset
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.dead_letter_moves import LOST, Existing
from queuey_core.backends.rabbitmq.dead_letter_pass import exclusive, give_back
from queuey_core.backends.rabbitmq.dead_letter_rows import letter_of, row_of
from queuey_core.backends.rabbitmq.errors import error_text
from queuey_core.backends.rabbitmq.frames import FRAME_OVERHEAD, publish_frames, publish_method
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.backends.rabbitmq.pika_compat import connected_params, write_on
from queuey_core.errors import DeadLetterMoveError, JobStoreError, UnknownQueueError
from queuey_core.results.dead_letter_sql import Row
from queuey_core.results.dead_letter_table import DeadLetterTable

#: Messages of ``<queue>.dlq`` inserted per committed batch of an import.
IMPORT_BATCH = 1000

#: Dead letters requeued per claim (and per AMQP transaction).
BATCH = 500

#: Seconds an import waits for a delivery before it asks the queue whether it is done.
IDLE = 1.0


def import_pending(
    ch: BlockingChannel,
    table: DeadLetterTable,
    queue: str,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Move what ``<queue>.dlq`` holds now into the table; how many it read. Each batch
    is acked after its commit (a cut import reads the unacked rest again, and the
    table's key makes that harmless). The caller holds the queue's lock."""
    dlq = topology.dead_letter_name(queue)
    held = int(ch.queue_declare(dlq, passive=True).method.message_count)
    if held == 0:
        return 0
    ch.basic_qos(prefetch_count=min(held, 2 * IMPORT_BATCH))
    rows: list[Row] = []
    last = done = idle = 0

    def flush() -> None:
        nonlocal done
        if rows:
            table.insert(rows)
            ch.basic_ack(last, multiple=True)
            done += len(rows)
            rows.clear()
            if progress is not None:
                progress(done)

    try:
        for method, props, body in ch.consume(dlq, inactivity_timeout=IDLE):
            if method is None:
                flush()
                idle += 1
                ready = int(ch.queue_declare(dlq, passive=True).method.message_count)
                if ready == 0 or idle > 30:
                    break
                continue
            idle = 0
            rows.append(row_of(queue, props, body))
            last = method.delivery_tag
            if len(rows) >= IMPORT_BATCH or done + len(rows) >= held:
                flush()
            if done >= held:
                break
        flush()
    finally:
        # What it did not ack goes back now, and the queue has it back when this
        # returns: the next command counts it all (a closed channel gives it back too,
        # but the broker takes seconds, and a command meanwhile would see too few).
        with contextlib.suppress(*LOST):
            give_back(ch, dlq)
    return done


class IndexedDeadLetters:
    """:class:`~queuey_core.backends.capabilities.DeadLetterTools` over the table, for
    every queue but ``queuey.unroutable`` (which keeps the scan path)."""

    def __init__(self, admin: Admin, table: DeadLetterTable) -> None:
        self._admin = admin
        self.table = table

    def import_pending(self, queue: str, progress: Callable[[int], None] | None = None) -> int:
        """What ``<queue>.dlq`` holds, into the table; how many (0 when it does not exist)."""

        def work(ch: BlockingChannel) -> int:
            dlq = topology.dead_letter_name(queue)
            try:
                held = ch.queue_declare(dlq, passive=True).method.message_count
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    return 0
                raise
            if not held:
                return 0  # the usual case: no lock, so a read never waits for a move
            with exclusive(ch, dlq):
                return import_pending(ch, self.table, queue, progress)

        return self._admin.run(work)

    def count(self, queue: str) -> int:
        """How many dead letters ``queue`` has in the table."""
        return self.table.count(queue)

    def window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        """See :meth:`DeadLetterToolsBase._window`: a count, then chunks by key from the
        offset, no transaction held between them."""
        letters = self._rows(queue, wanted, offset, limit)
        return DeadLetterWindow(letters, offset=offset, limit=limit)

    def _rows(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> Generator[AnyDeadLetter, None, int]:
        self.import_pending(queue)
        total = self.table.count(queue, wanted.job_type, wanted.reason)
        rows = self.table.stream(queue, wanted.job_type, wanted.reason, offset=offset)
        with contextlib.closing(rows):
            letters = (letter_of(stored) for stored in rows)
            return (yield from cut(letters, offset, limit, total=total, skipped=offset))

    def page(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterPage:
        """See :meth:`DeadLetterToolsBase._page`: a count and a page, by index."""
        if limit is None:
            return self.window(queue, wanted, offset, limit).page()
        self.import_pending(queue)
        rows, total = self.table.page(queue, offset, limit, wanted.job_type, wanted.reason)
        letters = [letter_of(s) for s in rows]
        return DeadLetterPage(letters, total, next_offset(offset, limit, total))

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`: one lookup by handle."""
        self.import_pending(queue)
        found = self.table.find(queue, handle)
        return None if found is None else letter_of(found)

    def requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`: claimed, published in an
        AMQP transaction, deleted, :data:`BATCH` at a time. Every row of a job id goes
        (a job can have died twice)."""
        self.import_pending(queue)
        move = self._requeue(queue, job_ids, progress)
        return self._admin.run(lambda ch: self._locked(ch, queue, move, requeue=True))

    def delete(self, queue: str, handles: list[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`: one DELETE."""
        self.import_pending(queue)
        return self._admin.run(
            lambda ch: self._locked(ch, queue, lambda _ch: self.table.delete(queue, handles))
        )

    def purge(self, queue: str) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: one DELETE and one
        ``queue.purge`` of ``<queue>.dlq`` (nothing there is worth importing first)."""

        def purge(ch: BlockingChannel) -> int:
            gone = self.table.purge(queue)
            return gone + int(ch.queue_purge(topology.dead_letter_name(queue)).method.message_count)

        return self._admin.run(lambda ch: self._locked(ch, queue, purge))

    def _locked(
        self,
        ch: BlockingChannel,
        queue: str,
        work: Callable[[BlockingChannel], int],
        *,
        requeue: bool = False,
    ) -> int:
        """``work`` holding the queue's lock; a ``requeue`` first reports the claims a
        requeue that is gone left (raised as in doubt) and lets go of them."""
        with exclusive(ch, topology.dead_letter_name(queue)):
            stale = self.table.release_stale(queue) if requeue else 0
            if stale:
                raise DeadLetterMoveError(
                    queue,
                    0,
                    f"an earlier requeue was cut short with {stale} dead letters claimed; "
                    "they are dead letters again, and may be on the queue too (run the "
                    "command again to go on)",
                    in_doubt=stale,
                )
            return work(ch)

    def _requeue(
        self, queue: str, wanted: list[str] | None, progress: Callable[[int], None] | None
    ) -> Callable[[BlockingChannel], int]:
        def work(ch: BlockingChannel) -> int:
            if not Existing(ch)(queue):
                raise UnknownQueueError(queue)
            returned: list[str] = []
            ch.add_on_return_callback(
                lambda _c, _m, props, _b: returned.append(str(props.message_id))
            )
            ch.tx_select()
            number = ch.channel_number
            method = publish_method(number, "", queue)
            body_max = connected_params(ch.connection).frame_max - FRAME_OVERHEAD
            moved = 0
            keep = uuid.uuid4().hex  # the rows that stay: let go of at the end
            while batch := self.table.claim(queue, token := uuid.uuid4().hex, wanted, BATCH):
                sent: dict[str, int] = {}
                kept: list[int] = []
                frames: list[bytes] = []
                for stored in batch:
                    dead = letter_of(stored)
                    try:
                        if not isinstance(dead, DeadLetter):
                            raise TypeError("not an envelope")
                        fresh = dead.envelope.fresh()
                        props = properties(fresh)
                        frames.append(
                            publish_frames(number, body_max, method, fresh.encode(), props=props)
                        )
                    except Exception:  # not an envelope after all, or not encodable: it stays
                        kept.append(stored.seq)
                        continue
                    sent[str(fresh.job_id)] = stored.seq
                committing = False
                try:
                    # The batch in one write (pika writes each message's three frames
                    # apart: most of a requeue's CPU), then the commit.
                    write_on(ch, b"".join(frames))
                    committing = True
                    ch.tx_commit()
                except LOST as exc:
                    doubt = len(sent) if committing else 0
                    with contextlib.suppress(JobStoreError):
                        self.table.release(token)
                        self.table.release(keep)
                    raise DeadLetterMoveError(
                        queue, moved, error_text(exc), in_doubt=doubt
                    ) from exc
                # Returned: its queue was deleted meanwhile, and it stays a dead letter.
                kept += [sent.pop(job_id) for job_id in returned if job_id in sent]
                returned.clear()
                self.table.move_claim(kept, keep)  # out of this batch, not claimed again
                try:
                    moved += self.table.delete_claimed(token)
                except JobStoreError as exc:
                    raise DeadLetterMoveError(queue, moved, str(exc), in_doubt=len(sent)) from exc
                if progress is not None:
                    progress(moved)
            self.table.release(keep)
            return moved

        return work
