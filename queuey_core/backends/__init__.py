"""Backends move envelopes between producers, the broker and workers.

The worker and producer know only the narrow seam in :mod:`queuey_core.backends.base`;
what only some backends can do is a capability of :mod:`.capabilities`, asked for by
type (``isinstance``, :func:`require`). :func:`open_backend` (:mod:`.open`) opens the
backend a broker URL names. The RabbitMQ backend is imported lazily so that
``import queuey_core`` never imports pika. Adding a backend: ``docs/backends.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.backends.base import Backend, ConsumerEnded, Delivery, Sink, Subscription
from queuey_core.backends.capabilities import (
    ConnectionReporting,
    DeadLetter,
    DeadLetterTools,
    EarlyAck,
    HoldsLeases,
    Inspectable,
    PublishesAhead,
    PublishesEncoded,
    Republishes,
    SettlesInProcess,
    SupportsControl,
    SupportsSchedules,
    UndecodableDeadLetter,
    require,
)
from queuey_core.backends.open import open_backend

if TYPE_CHECKING:
    from queuey_core.backends.memory import MemoryBackend


# Imported on first use: a worker on RabbitMQ never loads the in-memory backend.
__getattr__ = lazy_exports(__name__, {"MemoryBackend": "queuey_core.backends.memory"})


__all__ = [
    "Backend",
    "ConnectionReporting",
    "ConsumerEnded",
    "DeadLetter",
    "DeadLetterTools",
    "Delivery",
    "EarlyAck",
    "HoldsLeases",
    "Inspectable",
    "MemoryBackend",
    "PublishesAhead",
    "PublishesEncoded",
    "Republishes",
    "SettlesInProcess",
    "Sink",
    "Subscription",
    "SupportsControl",
    "SupportsSchedules",
    "UndecodableDeadLetter",
    "open_backend",
    "require",
]
