"""What the worker holds of the kit's gate (a delivery, a consumer), and a ledger entry.

:class:`Watched` passes a delivery's settles through and tells the gate of each (a
retry or a deferral enters the ledger with its delay); :class:`GatedSubscription` tells
the gate when a consumer stops (a paused queue's consumer is cancelled, then closed),
so that what it held goes back to waiting. Must never: settle a delivery itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from queuey_core.backends.base import Delivery, Subscription
from queuey_core.envelope import Envelope


@dataclass
class Entry:
    """One message the gate knows of: due on the clock at ``due``; ``delivery`` once the
    backend handed it out (held at the gate until released)."""

    envelope: Envelope
    due: float
    seq: int
    delivery: Delivery | None = None
    released: bool = False
    settled: bool = False
    #: The consumer (its gate's token) that handed ``delivery`` out.
    via: object | None = None


class GateState(Protocol):
    """What these tell the gate (:class:`queuey_core.testing.gate.GateState`)."""

    def expect(self, items: Sequence[tuple[Envelope, float | None]]) -> list[Entry]:
        """Messages about to be published (or republished), each after its delay."""

    def forget(self, entries: Sequence[Entry]) -> None:
        """A publish that failed: its messages are not coming."""

    def settled(self, entry: Entry) -> None:
        """The worker settled the delivery of ``entry``."""

    def ended(self, token: object) -> None:
        """The consumer ``token`` was cancelled."""

    def given_back(self, token: object) -> None:
        """The consumer ``token`` is closing: what it held goes back."""


class Watched:
    """A delivery as the worker gets it from the gate: settles pass through, and the
    gate learns of each (a retry or deferral enters the ledger with its delay)."""

    __slots__ = ("_entry", "_gate", "_inner")

    def __init__(self, gate: GateState, entry: Entry, inner: Delivery) -> None:
        self._gate = gate
        self._entry = entry
        self._inner = inner

    @property
    def envelope(self) -> Envelope:
        """See :attr:`Delivery.envelope`."""
        return self._inner.envelope

    @property
    def queue(self) -> str:
        """See :attr:`Delivery.queue`."""
        return self._inner.queue

    @property
    def redelivered(self) -> bool:
        """See :attr:`Delivery.redelivered`."""
        return self._inner.redelivered

    def is_stale(self) -> bool:
        """See :meth:`Delivery.is_stale`."""
        return self._inner.is_stale()

    def ack(self) -> None:
        """See :meth:`Delivery.ack`."""
        self._inner.ack()
        self._gate.settled(self._entry)

    def dead_letter(self, reason: str) -> None:
        """See :meth:`Delivery.dead_letter`."""
        self._inner.dead_letter(reason)
        self._gate.settled(self._entry)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """See :meth:`Delivery.retry`."""
        self._replace(next_envelope, delay, self._inner.retry)

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """See :meth:`Delivery.defer`."""
        self._replace(next_envelope, delay, self._inner.defer)

    def _replace(self, next_envelope: Envelope, delay: float, settle: Any) -> None:
        # Into the ledger first: on the memory backend a zero delay delivers it at once.
        made = self._gate.expect([(next_envelope, delay)])
        try:
            settle(next_envelope, delay)
        except BaseException:
            self._gate.forget(made)
            raise
        self._gate.settled(self._entry)


class GatedSubscription:
    """A consumer behind the gate: the gate learns when it stops (a paused queue's
    consumer is cancelled, then closed) and takes back what it held of it."""

    def __init__(self, inner: Subscription, gate: GateState, token: object) -> None:
        self._inner = inner
        self._gate = gate
        self._token = token
        self._ended = False
        self._lock = threading.Lock()

    @property
    def queue(self) -> str:
        """See :attr:`Subscription.queue`."""
        return self._inner.queue

    def cancel(self) -> None:
        """See :meth:`Subscription.cancel`."""
        self._inner.cancel()
        self._end()

    def close(self) -> None:
        """See :meth:`Subscription.close`: the held deliveries leave the gate first, so
        that their redelivery (to a later consumer) finds their entries waiting."""
        self.cancel()  # nothing more reaches the gate from it
        self._gate.given_back(self._token)
        self._inner.close()

    def _end(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, True
        if not ended:
            self._gate.ended(self._token)
