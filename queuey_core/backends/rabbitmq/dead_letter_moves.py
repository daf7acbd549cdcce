"""Moving dead letters on RabbitMQ: requeue (in transactions) and delete, in one pass.

A requeue publishes each dead letter's fresh envelope to its queue and acks the dead
letter *in the same AMQP transaction* (``tx.select``), :data:`BATCH` at a time: on
commit both happen, and a channel or connection lost before the commit undoes both (the
broker drops an uncommitted transaction and requeues what the channel held). So an
interrupted requeue has moved exactly the batches it committed, which
:class:`~queuey_core.errors.DeadLetterMoveError` reports; only a commit whose answer
was lost leaves one batch in doubt (on the queue, and maybe still a dead letter). A
transaction commits about six times faster than waiting for a confirm per message
(RABBITMQ.md), which is what makes 100,000 a matter of seconds.

Every publish is ``mandatory``; the target queue is checked to exist first, and a
message the broker returns all the same (the queue was deleted meanwhile) has its dead
letter published back to the dead-letter queue: never lost, though at its end.

Owns: :func:`requeue` and :func:`delete` on a channel of the admin connection. Must
never: ack a dead letter outside the transaction that publishes its envelope, or
requeue a body that is not an envelope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.capabilities import DeadLetter
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.dead_letter_pass import Held, give_back, may_be, open_pass
from queuey_core.backends.rabbitmq.errors import error_text
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.errors import DeadLetterMoveError, UnknownQueueError

#: Dead letters moved per transaction.
BATCH = 500

#: What losing the channel or the connection raises in pika.
LOST = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.AMQPChannelError,
    pika.exceptions.ConnectionWrongStateError,
)


def requeue(
    ch: BlockingChannel,
    queue: str,
    wanted: set[str] | None,
    progress: Callable[[int], None] | None,
    decode: Callable[[Held, str], Any],
) -> int:
    """Move dead letters of ``queue`` (those with a handle in ``wanted``, or all) back to
    be run at attempt 1; how many. ``decode`` reads a held message (dead_letter_at).

    One of the unroutable queue goes to the queue its envelope names, if that exists
    now (else it stays). Bodies that are not envelopes stay; so does everything not
    chosen, in order. The pass reads to the end even for one id: a job id can be there
    twice (a worker that died between publishing a dead letter and acking its
    delivery), and every copy goes.

    Raises:
        UnknownQueueError: ``queue`` does not exist.
        DeadLetterMoveError: the pass was cut short; it says how many moved.
    """
    dlq = topology.holding_queue(queue)
    unroutable = queue == topology.UNROUTABLE
    exists = Existing(ch)
    if not unroutable and not exists(queue):
        raise UnknownQueueError(queue)
    returned: list[str] = []
    ch.add_on_return_callback(lambda _c, _m, props, _b: returned.append(str(props.message_id)))
    ch.tx_select()
    left = wanted
    staged: list[tuple[str, BasicProperties, bytes]] = []  # job id, the dead letter
    moved = 0

    def commit() -> None:
        nonlocal moved
        if not staged:
            return
        try:
            ch.tx_commit()
        except LOST as exc:
            raise DeadLetterMoveError(queue, moved, error_text(exc), in_doubt=len(staged)) from exc
        moved += len(staged)
        if returned:  # their queue vanished between the check and the commit
            moved -= _put_back(ch, dlq, [(p, b) for job_id, p, b in staged if job_id in returned])
            returned.clear()
        staged.clear()
        if progress is not None:
            progress(moved)

    try:
        for held in open_pass(ch, dlq).messages:
            if left is not None and not any(may_be(held, handle) for handle in left):
                continue
            dead = decode(held, dlq)
            if not isinstance(dead, DeadLetter) or (left is not None and dead.handle not in left):
                continue
            fresh = dead.envelope.fresh()
            target = fresh.queue if unroutable else queue
            if unroutable and not exists(target):
                continue  # its queue still does not exist: it stays where it is
            ch.basic_publish("", target, fresh.encode(), properties(fresh), mandatory=True)
            ch.basic_ack(held.tag)
            staged.append((str(fresh.job_id), held.props, held.body))
            if len(staged) >= BATCH:
                commit()
        commit()
        give_back(ch, dlq, tx=True)
    except LOST as exc:
        # Nothing of the open transaction happened: the broker dropped it with the channel.
        raise DeadLetterMoveError(queue, moved, error_text(exc)) from exc
    return moved


def delete(
    ch: BlockingChannel, queue: str, handles: set[str], decode: Callable[[Held, str], Any]
) -> int:
    """Ack (remove) every dead letter of ``queue`` listed under one of ``handles`` (a
    position handle as at the start of the pass); how many. The rest go back in order."""
    dlq = topology.holding_queue(queue)
    gone = 0
    for held in open_pass(ch, dlq).messages:
        if any(may_be(held, handle) for handle in handles) and (
            decode(held, dlq).handle in handles
        ):
            ch.basic_ack(held.tag)
            gone += 1
    return gone


def _put_back(ch: BlockingChannel, dlq: str, letters: list[tuple[BasicProperties, bytes]]) -> int:
    """Publish dead letters back to ``dlq`` as they were, committed; how many."""
    for props, body in letters:
        ch.basic_publish("", dlq, body, props)
    ch.tx_commit()
    return len(letters)


class Existing:
    """Whether a queue exists, asked once per name on a channel of its own (a passive
    declare of a missing queue closes its channel)."""

    def __init__(self, ch: BlockingChannel) -> None:
        self._conn = ch.connection
        self._known: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        known = self._known.get(name)
        if known is None:
            probe = self._conn.channel()
            try:
                probe.queue_declare(name, passive=True)
                known = True
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                known = False
            finally:
                if probe.is_open:
                    probe.close()
            self._known[name] = known
        return known
