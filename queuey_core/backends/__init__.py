"""Backends move envelopes between producers, the broker and workers.

The worker and producer know only the protocols in :mod:`queuey_core.backends.base`.
The RabbitMQ backend is imported lazily so that ``import queuey_core`` never imports pika.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.backends.base import (
    Backend,
    ConsumerEnded,
    DeadLetter,
    Delivery,
    Sink,
    Subscription,
    UndecodableDeadLetter,
)

if TYPE_CHECKING:
    from queuey_core.backends.memory import MemoryBackend


# Imported on first use: a worker on RabbitMQ never loads the in-memory backend.
__getattr__ = lazy_exports(__name__, {"MemoryBackend": "queuey_core.backends.memory"})


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
