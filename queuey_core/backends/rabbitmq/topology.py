"""What queuey creates on RabbitMQ, as pure functions of the configuration.

Delays live in the broker, on a binary ladder of fixed-TTL levels (as NServiceBus and
Celery 5.5 do it). Level ``k`` is a topic exchange ``queuey.delay.k`` and a quorum queue
of the same name whose messages expire after ``2**k`` ms and dead-letter to level
``k - 1`` (level 0 to ``queuey.delay.deliver``). A delayed message is published to the
top level with a routing key that spells its delay in bits, highest level first,
followed by its destination queue: at each level, bit 1 parks it in that level's queue,
bit 0 passes it straight down an exchange-to-exchange binding. The deliver exchange
routes it to its queue by the words after the bits.

So any delay from 1 ms to about 795 days works, the number of broker objects is fixed
whatever delays are used, and a long delay never holds back a short one (each level's
queue has one TTL, so its head always expires first).

Nothing vanishes at the end of the ladder: the deliver exchange has an alternate
exchange, :data:`UNROUTABLE`, which takes whatever no queue is bound for (a delayed
message for a queue that does not exist, or was never bound) into the queue of the same
name, where the dead-letter tools show it. On a broker whose deliver exchange predates
it, a policy sets it (:func:`unroutable_policy_command`): an exchange's arguments cannot
change once it exists.

The headers of a dead letter are built here too (:func:`dead_letter_headers`), and only
here: whatever the reason says, they hold printable ASCII of bounded length and integers
a signed 64-bit field carries, so a dead letter can always be published.
"""

from __future__ import annotations

import json
import math
from typing import Any

from queuey_core import limits
from queuey_core.queues import QueueConfig, QueueKind
from queuey_core.text import ascii_printable

#: Levels of the ladder, and the longest delay it holds (2**36 - 1 ms, about 795 days):
#: limits of the wire, kept in :mod:`queuey_core.limits` where every entry point checks.
DELAY_LEVELS = limits.DELAY_LEVELS
MAX_DELAY_MS = limits.MAX_DELAY_MS
DELIVER_EXCHANGE = "queuey.delay.deliver"
#: The deliver exchange's alternate exchange (fanout), and the queue bound to it: where a
#: delayed message that no queue takes ends up, instead of being dropped.
UNROUTABLE = "queuey.unroutable"
#: The name of the policy that gives an older deliver exchange its alternate exchange.
UNROUTABLE_POLICY = "queuey-unroutable"

#: Headers a dead letter carries.
REASON_HEADER = "x-queuey-reason"
DEAD_AT_HEADER = "x-queuey-dead-at"
ATTEMPT_HEADER = "x-queuey-attempt"
QUEUE_HEADER = "x-queuey-queue"
#: Longest reason a dead letter carries, in (ASCII) characters.
MAX_REASON = 2000


def delay_name(level: int) -> str:
    """Name of level ``level``'s exchange and queue."""
    return f"queuey.delay.{level}"


TOP_EXCHANGE = delay_name(DELAY_LEVELS - 1)


def delay_ms(seconds: float) -> int:
    """A delay in whole milliseconds, rounded up (a job never runs early)."""
    if seconds < 0 or math.isnan(seconds):
        raise ValueError("a delay cannot be negative")
    ms = math.ceil(seconds * 1000)
    if ms > MAX_DELAY_MS:
        raise ValueError(f"a delay cannot exceed {MAX_DELAY_MS // 86_400_000} days")
    return ms


def delay_routing_key(ms: int, queue: str) -> str:
    """The routing key that carries a message ``ms`` down the ladder into ``queue``."""
    bits = format(ms, f"0{DELAY_LEVELS}b")
    return ".".join(bits) + "." + queue


def queue_of_delay_key(routing_key: str) -> str | None:
    """The queue a delay routing key ends with (:func:`delay_routing_key`), or None if
    ``routing_key`` is not one."""
    words = routing_key.split(".", DELAY_LEVELS)
    if len(words) <= DELAY_LEVELS or any(w not in ("0", "1") for w in words[:DELAY_LEVELS]):
        return None
    return words[DELAY_LEVELS] or None


def level_binding(level: int, bit: str) -> str:
    """The topic pattern matching keys whose bit for ``level`` is ``bit``."""
    return "*." * (DELAY_LEVELS - 1 - level) + bit + ".#"


def next_hop(level: int) -> str:
    """Where level ``level`` passes messages on: the level below, or the deliver exchange."""
    return delay_name(level - 1) if level > 0 else DELIVER_EXCHANGE


def deliver_binding(queue: str) -> str:
    """The deliver exchange's pattern for ``queue``: exactly the bits, then the name."""
    return "*." * DELAY_LEVELS + queue


def deliver_exchange_arguments() -> dict[str, Any]:
    """The deliver exchange's arguments: what no queue takes goes to :data:`UNROUTABLE`."""
    return {"alternate-exchange": UNROUTABLE}


def unroutable_policy_command(vhost: str) -> str:
    """The ``rabbitmqctl`` line that gives an existing deliver exchange its alternate
    exchange (a policy: redeclaring it with the argument would be refused)."""
    pattern = "^" + DELIVER_EXCHANGE.replace(".", "\\.") + "$"
    definition = json.dumps({"alternate-exchange": UNROUTABLE}, separators=(",", ":"))
    return (
        f"rabbitmqctl set_policy -p '{vhost}' --apply-to exchanges {UNROUTABLE_POLICY} "
        f"'{pattern}' '{definition}'"
    )


def holding_queue(queue: str) -> str:
    """Where the dead-letter tools look for ``queue``: ``<queue>.dlq``, or the
    unroutable queue itself."""
    return UNROUTABLE if queue == UNROUTABLE else dead_letter_name(queue)


def delay_queue_arguments(level: int) -> dict[str, Any]:
    """Quorum queues dead-letter at least once; classic ones could drop a held job."""
    return {
        "x-queue-type": "quorum",
        "x-message-ttl": 2**level,
        "x-dead-letter-exchange": next_hop(level),
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }


def queue_arguments(config: QueueConfig) -> dict[str, Any]:
    """Arguments of a job queue. A message rejected outright lands in its dead-letter queue."""
    args: dict[str, Any] = {
        "x-queue-type": config.kind.value,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": config.dead_letter_queue,
    }
    if config.max_priority is not None and config.kind is QueueKind.CLASSIC:
        args["x-max-priority"] = config.max_priority
    return args


def dead_letter_name(queue: str) -> str:
    """The dead-letter queue of ``queue``."""
    return f"{queue}.dlq"


def dead_letter_headers(
    reason: str, *, queue: str, dead_at: int, attempt: int | None = None
) -> dict[str, Any]:
    """The headers of a dead letter: the one place they are built.

    ``attempt`` is left out when it is not known (a body that is not an envelope) or
    not a number a header can carry.
    """
    headers: dict[str, Any] = {
        REASON_HEADER: ascii_printable(reason, MAX_REASON),
        DEAD_AT_HEADER: dead_at,
        QUEUE_HEADER: ascii_printable(queue, 255),
    }
    if attempt is not None and 0 <= attempt < 2**31:
        headers[ATTEMPT_HEADER] = attempt
    return headers


def dead_letter_queue_arguments(kind: QueueKind = QueueKind.CLASSIC) -> dict[str, Any]:
    """The dead-letter queue of a queue of ``kind`` is of the same kind.

    A classic dead-letter queue lives on one node of a cluster: while that node is down,
    RabbitMQ returns what is published to it as unroutable, and a quorum queue's
    last-resort reject into it is dropped. So a quorum queue's dead letters are quorum
    too, replicated as its jobs are. Listing one still loses and reorders nothing (taken
    unacked, given back with one multiple nack); each listing adds one to the messages'
    ``x-delivery-count``, which nothing here limits or reads.
    """
    return {"x-queue-type": kind.value}
