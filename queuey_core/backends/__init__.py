"""Backends move envelopes between producers, the broker and workers.

The worker and producer know only the protocols in :mod:`queuey_core.backends.base`.
The RabbitMQ backend is imported lazily so that ``import queuey_core`` never imports pika.
"""

from __future__ import annotations

from queuey_core.backends.base import (
    Backend,
    ConsumerEnded,
    DeadLetter,
    Delivery,
    Sink,
    Subscription,
    UndecodableDeadLetter,
)
from queuey_core.backends.memory import MemoryBackend

__all__ = [
    "Backend",
    "ConsumerEnded",
    "DeadLetter",
    "Delivery",
    "MemoryBackend",
    "Sink",
    "Subscription",
    "UndecodableDeadLetter",
]
