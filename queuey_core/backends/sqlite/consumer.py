"""Subscriptions and deliveries of the embedded backend.

A subscription holds at most ``prefetch`` unsettled deliveries (its credit); the pump
(:mod:`.pump`) claims rows for it and pushes them to its sink. A delivery is one leased
row: settling it deletes the row (and, for a retry, deferral or dead letter, writes its
replacement) in the same transaction, so a crash in between neither loses nor
duplicates. Owns: credit, the sink's ordering, and the rule that once
:meth:`SqliteSubscription.cancel` returns the sink gets nothing more. Must never: settle
a row whose lease was lost to another worker (the settle is refused, and
:meth:`SqliteDelivery.is_stale` says so).
"""

from __future__ import annotations

import threading
from typing import Protocol

from queuey_core.backends.base import ConsumerEnded, Sink
from queuey_core.envelope import Envelope
from queuey_core.queues import QueueConfig

#: What a subscription with ``prefetch = 0`` (no limit) claims at once.
UNLIMITED_BATCH = 100


class Settler(Protocol):
    """What subscriptions and deliveries need of their backend (:class:`SqliteBackend`
    is one): declared here so that this module never imports the backend's."""

    def _settle(
        self,
        delivery: SqliteDelivery,
        *,
        dead: str | None = None,
        replacement: tuple[Envelope, float, bool] | None = None,
    ) -> None:
        """Delete the delivery's row, writing its dead letter or replacement with it."""

    def _forget(self, sub: SqliteSubscription) -> None:
        """Stop claiming for ``sub`` and drop its record in the file."""

    def _give_back(self, ids: list[int]) -> None:
        """Release the leases of rows ``ids``, keeping their place in the queue."""


class SqliteSubscription:
    """A consumer of one queue. See :class:`~queuey_core.backends.base.Subscription`."""

    def __init__(self, backend: Settler, config: QueueConfig, sink: Sink, tag: str) -> None:
        self._backend = backend
        self.config = config
        self.tag = tag
        self._sink = sink
        # Held while pushing to the sink, so that cancel() waits for a push under way.
        self.lock = threading.RLock()
        self.unsettled: dict[int, SqliteDelivery] = {}
        self.cancelled = False
        self.closed = False

    @property
    def queue(self) -> str:
        """The queue consumed."""
        return self.config.name

    def credit(self) -> int:
        """How many more deliveries it may take now."""
        with self.lock:
            if self.cancelled:
                return 0
            if self.config.prefetch == 0:
                return UNLIMITED_BATCH
            return max(0, self.config.prefetch - len(self.unsettled))

    def deliver(self, delivery: SqliteDelivery) -> bool:
        """Push ``delivery`` to the sink; False (not pushed) once cancelled."""
        with self.lock:
            if self.cancelled:
                return False
            self.unsettled[delivery.row_id] = delivery
            self._sink(delivery)
            return True

    def end(self, event: ConsumerEnded) -> None:
        """The backend is going away: the last thing the sink gets."""
        with self.lock:
            if self.cancelled:
                return
            self.cancelled = True
            self._sink(event)

    def settled(self, delivery: SqliteDelivery) -> None:
        """``delivery`` no longer counts against the credit."""
        with self.lock:
            self.unsettled.pop(delivery.row_id, None)

    def cancel(self) -> None:
        """See :meth:`Subscription.cancel`."""
        with self.lock:
            self.cancelled = True
        self._backend._forget(self)

    def close(self) -> None:
        """See :meth:`Subscription.close`: unsettled rows go back, keeping their place."""
        self.cancel()
        with self.lock:
            self.closed = True
            ids = list(self.unsettled)
            self.unsettled.clear()
        self._backend._give_back(ids)


class SqliteDelivery:
    """One leased row. See :class:`~queuey_core.backends.base.Delivery`."""

    __slots__ = ("_backend", "_envelope", "_redelivered", "lost", "row_id", "settled", "sub")

    def __init__(
        self,
        backend: Settler,
        sub: SqliteSubscription,
        row_id: int,
        envelope: Envelope,
        redelivered: bool,
    ) -> None:
        self._backend = backend
        self.sub = sub
        self.row_id = row_id
        self._envelope = envelope
        self._redelivered = redelivered
        self.settled = False
        # Set when a lease renewal found the row gone or taken by another worker.
        self.lost = False

    @property
    def envelope(self) -> Envelope:
        """See :attr:`Delivery.envelope`."""
        return self._envelope

    @property
    def queue(self) -> str:
        """See :attr:`Delivery.queue`: the subscription's, never the envelope's."""
        return self.sub.queue

    @property
    def redelivered(self) -> bool:
        """See :attr:`Delivery.redelivered`: the row was claimed before and not settled."""
        return self._redelivered

    def is_stale(self) -> bool:
        """See :meth:`Delivery.is_stale`: the lease was lost, or the consumer closed."""
        return self.lost or self.sub.closed

    def ack(self) -> None:
        """See :meth:`Delivery.ack`."""
        self._backend._settle(self)

    def dead_letter(self, reason: str) -> None:
        """See :meth:`Delivery.dead_letter`."""
        self._backend._settle(self, dead=reason)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """See :meth:`Delivery.retry`: the replacement and the settle are one commit."""
        self._backend._settle(self, replacement=(next_envelope, delay, False))

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """See :meth:`Delivery.defer`."""
        self._backend._settle(self, replacement=(next_envelope, delay, True))
