"""The last fired tick of each schedule, kept on RabbitMQ (never in a local file).

Owns: one small queue per schedule, ``queuey.schedule.<name>`` (classic, durable,
``x-max-length: 1``: a last-value queue), holding one persistent JSON message, the
last tick fired. Recording publishes a new one with confirms and ``mandatory``; the
length limit drops the older one. Reading takes every message unacked and gives all of
them back with one multiple nack, and takes the latest tick it saw: so a reader that
raced a write (two messages for a moment) still gets the newest.
Must never: lose a tick by reading it (nothing is acked while reading), or let a pika
exception out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.election import node_picker
from queuey_core.backends.rabbitmq.errors import error_text
from queuey_core.errors import BackendError

#: Prefix of the per-schedule state queues.
STATE_PREFIX = "queuey.schedule."


def state_queue(schedule: str) -> str:
    """The queue holding ``schedule``'s last fired tick."""
    return f"{STATE_PREFIX}{schedule}"


def state_queue_arguments() -> dict[str, Any]:
    """A last-value queue: one ready message at most, the older one dropped."""
    return {"x-queue-type": "classic", "x-max-length": 1, "x-overflow": "drop-head"}


class RabbitScheduleState:
    """See the module docstring. Thread-safe (one caller at a time on its connection).

    The connection sits idle between ticks, and a ``BlockingConnection`` sends
    heartbeats only while it is used: so no heartbeats by default (the broker would
    otherwise close it after two missed ones); a connection found dead on use is
    replaced once, at once.
    """

    def __init__(
        self, url: str | Sequence[str], *, heartbeat: int = 0, connect_timeout: float = 5.0
    ) -> None:
        self._admin = Admin(
            node_picker(
                url, "scheduler state", heartbeat=heartbeat, connect_timeout=connect_timeout
            )
        )

    def last_fired(self, names: Sequence[str]) -> dict[str, int]:
        """See :meth:`ScheduleState.last_fired`."""

        def work(ch: BlockingChannel) -> dict[str, int]:
            found: dict[str, int] = {}
            for name in names:
                queue = state_queue(name)
                ch.queue_declare(queue, durable=True, arguments=state_queue_arguments())
                ticks: list[int] = []
                last_tag = None
                while True:
                    method, _props, body = ch.basic_get(queue, auto_ack=False)
                    if method is None:
                        break
                    last_tag = method.delivery_tag
                    tick = _tick_of(body)
                    if tick is not None:
                        ticks.append(tick)
                if last_tag is not None:
                    ch.basic_nack(last_tag, multiple=True, requeue=True)
                if ticks:
                    found[name] = max(ticks)
            return found

        return self._admin.run(work)

    def record(self, name: str, tick_ms: int) -> None:
        """See :meth:`ScheduleState.record`: returns once the broker confirmed it."""
        queue = state_queue(name)
        body = json.dumps({"schedule": name, "tick": tick_ms}).encode()

        def work(ch: BlockingChannel) -> None:
            ch.confirm_delivery()
            ch.queue_declare(queue, durable=True, arguments=state_queue_arguments())
            try:
                ch.basic_publish(
                    "",
                    queue,
                    body,
                    pika.BasicProperties(delivery_mode=2, content_type="application/json"),
                    mandatory=True,
                )
            except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
                raise BackendError(
                    f"RabbitMQ did not take the last tick of schedule {name!r}: {error_text(exc)}"
                ) from exc

        self._admin.run(work)

    def close(self) -> None:
        """See :meth:`ScheduleState.close`."""
        self._admin.close()


def _tick_of(body: bytes) -> int | None:
    try:
        data = json.loads(body)
        tick = data["tick"]
    except (ValueError, KeyError, TypeError):
        return None
    return tick if isinstance(tick, int) and not isinstance(tick, bool) else None
