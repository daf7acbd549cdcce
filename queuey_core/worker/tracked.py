"""A delivery the dispatcher holds: it remembers whether a settle was attempted on it.

Owns: :class:`Tracked`, the wrapper the dispatcher puts around each delivery, so that a
bug on the way settles (a last-resort dead letter) only what nobody tried to settle,
and its early ack (:class:`~queuey_core.backends.capabilities.EarlyAck`, asked with
:func:`~queuey_core.backends.capabilities.acks_early`).
"""

from __future__ import annotations

from collections.abc import Callable

from queuey_core.backends.base import Delivery
from queuey_core.envelope import Envelope


class Tracked:
    """A delivery that remembers whether a settle was attempted on it."""

    __slots__ = ("attempted", "inner")

    def __init__(self, inner: Delivery) -> None:
        self.inner = inner
        self.attempted = False

    def ack_early(self, failed: Callable[[BaseException], None]) -> None:
        """Ack without waiting, for a caller that found the inner delivery
        :class:`EarlyAck` (:func:`acks_early`); ``failed`` counts it if it cannot be
        sent after all."""
        self.attempted = True
        self.inner.ack_soon(failed)  # type: ignore[attr-defined]

    @property
    def envelope(self) -> Envelope:
        return self.inner.envelope

    @property
    def queue(self) -> str:
        return self.inner.queue

    @property
    def redelivered(self) -> bool:
        return self.inner.redelivered

    def is_stale(self) -> bool:
        return self.inner.is_stale()

    def ack(self) -> None:
        self.attempted = True
        self.inner.ack()

    def dead_letter(self, reason: str) -> None:
        self.attempted = True
        self.inner.dead_letter(reason)

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        self.attempted = True
        self.inner.retry(next_envelope, delay)

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        self.attempted = True
        self.inner.defer(next_envelope, delay)
