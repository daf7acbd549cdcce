"""Paused queues on RabbitMQ without a job store: a durable marker queue per pause.

Pausing ``alpha`` declares the durable, empty classic queue ``queuey.paused.alpha``;
resuming deletes it. Its existence is the state: it survives a restart of the broker
(a durable queue), needs no job store (pausing during an incident must not depend on
one), and is atomic (a declare or a delete, never a read-modify-write that two
operators could interleave). A worker reads it with a passive declare of each of its
queues' markers (:meth:`Admin.existing`), every :data:`POLL` seconds and whenever a
notice on the control channel asks.

Owns: :class:`MarkerPauses`, the :class:`~queuey_core.flow.pause_capability.SupportsPause` side of
:class:`~queuey_core.backends.rabbitmq.RabbitMQBackend` (a mixin). Must never: put a
message in a marker queue, or touch the paused queue itself: its messages wait there, in
their order and priority.
"""

from __future__ import annotations

from collections.abc import Sequence

from pika.adapters.blocking_connection import BlockingChannel

from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.flow.pause_capability import SupportsPause

#: What a marker's name starts with; the paused queue's name follows.
PREFIX = "queuey.paused."
#: Seconds between two looks of a worker: a passive declare per queue it consumes. The
#: notice on the control channel reaches live workers at once; this is the backstop
#: (a worker that was reconnecting when the notice went out).
POLL = 2.0


def marker(queue: str) -> str:
    """The name of ``queue``'s pause marker."""
    return PREFIX + queue


class MarkerPauses(SupportsPause):
    """Paused queues of a RabbitMQBackend (which provides ``_admin``)."""

    _admin: Admin

    def set_paused(self, queue: str, paused: bool) -> bool:
        """See :meth:`SupportsPause.set_paused`."""
        name = marker(queue)
        was = bool(self._admin.existing([name]))
        if paused:

            def declare(ch: BlockingChannel) -> None:
                ch.queue_declare(name, durable=True)

            self._admin.run(declare)
        elif was:

            def delete(ch: BlockingChannel) -> None:
                ch.queue_delete(name)

            self._admin.run(delete)
        return was != paused

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        """See :meth:`SupportsPause.paused_queues`."""
        found = self._admin.existing([marker(name) for name in names])
        return frozenset(name for name in names if marker(name) in found)

    def pause_poll(self) -> float:
        """See :meth:`SupportsPause.pause_poll`."""
        return POLL
