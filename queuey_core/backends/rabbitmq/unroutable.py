"""What a message of ``queuey.unroutable`` says: the queue it was for, and when it came.

RabbitMQ itself puts a message there (the alternate exchange of the deliver exchange,
:mod:`.topology`), so it carries none of queuey's dead-letter headers. Its reason and
time are read from what the broker leaves on it: the routing key, which spells the delay
and then the queue's name (:func:`.topology.delay_routing_key`), and ``x-death``, one
table per level of the ladder it waited in, each with the ``time`` it left that level.

Owns: reading those two, without trusting them (anyone may publish to the deliver
exchange). Must never: raise on what a message holds.
"""

from __future__ import annotations

import datetime
from typing import Any

from queuey_core.backends.rabbitmq import topology
from queuey_core.text import ascii_printable

#: Longest routing key an AMQP short string holds; a reason quotes at most this much.
_MAX_KEY = 255


def unroutable_reason(routing_key: str) -> str:
    """The reason a message of ``queuey.unroutable`` is listed with, from its routing key."""
    queue = topology.queue_of_delay_key(routing_key)
    if queue is None:
        return (
            f"unroutable: no queue is bound to {topology.DELIVER_EXCHANGE} for routing key "
            f"{ascii_printable(routing_key, _MAX_KEY)!r}"
        )
    return (
        f"unroutable: queue {ascii_printable(queue, _MAX_KEY)!r} did not exist (or was not bound "
        f"to {topology.DELIVER_EXCHANGE}) when its delay ended"
    )


def last_death_ms(headers: dict[str, Any]) -> int | None:
    """When RabbitMQ last dead-lettered the message, in ms since the epoch (whole
    seconds: AMQP timestamps have no finer grain); None without a readable ``x-death``.

    The latest ``time`` of all the tables, not the first table's: RabbitMQ moves a
    queue's table to the front when it dead-letters from it again, but the order of the
    others is not the order of time.
    """
    deaths = headers.get("x-death")
    if not isinstance(deaths, list):
        return None
    times = [_seconds(d.get("time")) for d in deaths if isinstance(d, dict)]
    known = [t for t in times if t is not None]
    return max(known) * 1000 if known else None


def _seconds(value: object) -> int | None:
    # pika reads an AMQP timestamp as an aware datetime; a plain integer is taken too.
    if isinstance(value, datetime.datetime):
        try:
            seconds = int(value.timestamp())
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = int(value)
    else:
        return None
    return seconds if 0 < seconds < 2**53 // 1000 else None
