"""One pass over a dead-letter queue: consumed in order, held unacked, given back whole.

RabbitMQ has no way to read a queue without taking its messages. The old tools took
them one ``basic.get`` at a time (a round trip each) and gave them back with a nack,
after which RabbitMQ 3.10 took seconds to requeue before it answered again; every
single-id command read the whole queue. Here a command makes one ``basic.consume`` pass
that stops as soon as it has what it needs: a page stops after its last letter, a
lookup at the letter it looks for, and only the count of a filtered page and the
commands that move everything read to the end. The broker pushes the messages (a
prefetch of exactly what the pass wants, or unlimited beyond what a prefetch can say),
and they all go back at once when the channel closes, each to its place: nothing is
lost or reordered, even when the connection breaks mid-pass (the broker requeues
everything a lost channel held).

What a pass costs grows with how far into the queue it reads, not with the queue's
length: the first page of 100,000 is as quick as the first of 1,000, the last page
(and a lookup of the last letter) reads all of them. ``docs/dead-letters.md`` has the
figures.

Owns: :func:`open_pass` (the messages of a dead-letter queue as they come, with their
position), and the cheap tests that let a pass skip decoding what a filter or a lookup
leaves out (:func:`reason_of`, :func:`job_type_of`, :func:`may_be`).
Must never: ack what it was not asked to remove, or hold a message past its channel.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Generator, Iterator
from typing import Any, NamedTuple

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import BasicProperties

from queuey_core.backends.dead_letter_query import DeadLetterFilter, ascii_lower
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.unroutable import unroutable_reason
from queuey_core.text import ascii_printable

#: Seconds without a delivery after which a pass asks whether anything is still ready
#: for it: if not, somebody else took (or holds) the rest and the pass ends; if so, the
#: broker is slow (still putting back what an earlier pass gave back) and it waits on.
IDLE = 2.0

#: The largest prefetch AMQP can say (a short); a pass beyond it asks for no limit.
MAX_PREFETCH = 65535

#: The deepest a pass reads from the head alone. RabbitMQ 3.10 is quick to put back a
#: short head, or a whole queue at once (about a second for 100,000), but takes minutes
#: to put a long head back in front of the rest (50,000 of 100,000: 160 s before the
#: next delivery, and the next command pays it). So a pass that must go deeper takes the
#: whole queue, and one that stops early still receives the rest before giving all back.
HEAD = 5000


class Held(NamedTuple):
    """A message of the pass, unacked on its channel; ``position`` counts from 1."""

    tag: int
    routing_key: str
    props: BasicProperties
    body: bytes
    position: int


class Pass(NamedTuple):
    """How many messages the queue held when the pass began, and the pass itself (close
    it when done early: a whole-queue pass then receives the rest, see :data:`HEAD`)."""

    held: int
    messages: Generator[Held, None, None]


def open_pass(ch: BlockingChannel, dlq: str, *, upto: int | None = None, after: int = 0) -> Pass:
    """Consume ``dlq`` from its head on ``ch``: at most ``upto`` messages, never more than
    it held when the pass began (what arrives later is behind them). They stay unacked
    until the caller acks them or the channel closes (which gives them back in order).
    ``after``: how many an earlier pass on ``ch`` still holds (positions go on from it).

    Raises the broker's refusal (404) if ``dlq`` does not exist.
    """
    count = int(ch.queue_declare(dlq, passive=True).method.message_count)
    whole = upto is None or upto > HEAD
    want = count if whole else min(count, upto or 0)
    return Pass(count, _messages(ch, dlq, want, whole=whole, after=after))


def _messages(
    ch: BlockingChannel, dlq: str, want: int, *, whole: bool, after: int
) -> Generator[Held, None, None]:
    if want <= 0:
        return
    # A prefetch of exactly what the pass wants, so the broker sends no more; beyond
    # what AMQP can say, no limit (held messages count against a prefetch, and every
    # one of them is held until the end).
    ch.basic_qos(prefetch_count=want if want <= MAX_PREFETCH else 0)
    seen = 0
    try:
        for method, props, body in ch.consume(dlq, inactivity_timeout=IDLE):
            if method is None:
                if _nothing_ready(ch, dlq):
                    return
                continue
            seen += 1
            yield Held(method.delivery_tag, method.routing_key, props, body, after + seen)
            if seen >= want:
                return
    finally:
        if whole and 0 < seen < want and ch.is_open:
            # A channel that broke gives everything back by itself: nothing to do then.
            with contextlib.suppress(pika.exceptions.AMQPError):
                _receive_rest(ch, dlq, want - seen)


def _nothing_ready(ch: BlockingChannel, dlq: str) -> bool:
    return int(ch.queue_declare(dlq, passive=True).method.message_count) == 0


def _receive_rest(ch: BlockingChannel, dlq: str, left: int) -> None:
    """Take the rest of a whole-queue pass unread, so that all of it goes back at once."""
    for method, _, _ in ch.consume(dlq, inactivity_timeout=IDLE):
        if method is None:
            if _nothing_ready(ch, dlq):
                return
            continue
        left -= 1
        if left <= 0:
            return


#: How long a command waits for another operator's command on the same dead letters.
LOCK_WAIT = 600.0


@contextlib.contextmanager
def exclusive(ch: BlockingChannel, dlq: str) -> Iterator[None]:
    """One command at a time on ``dlq``, whoever runs it: while it holds the lock (an
    exclusive queue ``queuey.lock.<dlq>``, which the broker deletes if the connection
    dies), another queuey command on the same dead letters waits.

    Two passes at once would each see part of the queue, and a message one gives back
    would reach the other behind later ones: a listing out of order.
    """
    name = f"queuey.lock.{dlq}"
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        holder = ch.connection.channel()
        try:
            holder.queue_declare(name, exclusive=True, auto_delete=True)
            break
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 405 or time.monotonic() > deadline:  # RESOURCE_LOCKED
                raise
            time.sleep(0.2)
    try:
        yield
    finally:
        if holder.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                holder.queue_delete(name)
                holder.close()


def headers_of(props: BasicProperties) -> dict[str, Any]:
    """The headers of a message, or none when they are not a table."""
    return props.headers if isinstance(props.headers, dict) else {}


def reason_of(held: Held, dlq: str) -> str:
    """The reason a dead letter is listed with, read from its headers alone."""
    headers = headers_of(held.props)
    if dlq == topology.UNROUTABLE and topology.REASON_HEADER not in headers:
        return unroutable_reason(held.routing_key)
    return header_reason(headers)


def job_type_of(body: bytes) -> str | None:
    """The job type a body names, read without validating the rest (C's JSON parser,
    a few microseconds): None when it is not a JSON object naming one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    value = doc.get("job_type") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def quick_keeps(held: Held, dlq: str, wanted: DeadLetterFilter) -> bool:
    """Whether a filter may keep ``held``, from its headers and a plain JSON read: a
    message it leaves out is never validated. The letter it keeps is checked again
    once decoded (a body that names a job type but is no envelope has none)."""
    if wanted.reason is not None and ascii_lower(wanted.reason) not in ascii_lower(
        reason_of(held, dlq)
    ):
        return False
    return wanted.job_type is None or job_type_of(held.body) == wanted.job_type


def may_be(held: Held, handle: str) -> bool:
    """Whether ``held`` may be the dead letter listed under ``handle``: its message id,
    its position, or a body holding the id in any spelling of a UUID. False means
    surely not, without decoding it."""
    if handle in (held.props.message_id, f"#{held.position}"):
        return True
    digits = handle.lower().replace("-", "").encode()
    return bool(digits) and digits in held.body.lower().replace(b"-", b"")


def header_reason(headers: dict[str, Any]) -> str:
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
