"""One look at the configured queues: the backend's counts and, where they can be known,
the messages running (unacked) in each.

What ``queuey queues`` and the dashboard both show, paused queues included. Unacked
counts come from the RabbitMQ management API only (:mod:`queuey_core.management_api`);
on the embedded backend (``sqlite://``) they are the jobs leased to a live worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from queuey_core.backends.capabilities import Inspectable, Inspection, KeepsDeadLettersInStore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from queuey_core.management_api import Unacked
    from queuey_core.settings import Settings


@dataclass(frozen=True, slots=True)
class QueueLook:
    """The counts of some queues, their unacked (running) messages, and whether they
    come from the embedded backend (whose "unacked" are jobs running)."""

    inspection: Inspection
    unacked: Unacked
    embedded: bool = False
    paused: frozenset[str] | None = None


def paused_among(broker: object, names: Sequence[str]) -> frozenset[str] | None:
    """Which of ``names`` are paused (:mod:`queuey_core.flow.pause`); None on a backend
    that cannot pause queues."""
    from queuey_core.flow.pause import SupportsPause  # noqa: PLC0415

    return broker.paused_queues(names) if isinstance(broker, SupportsPause) else None


def look(broker: Inspectable, settings: Settings, names: Sequence[str]) -> QueueLook:
    """Count ``names`` on the broker, their unacked messages where they can be known, and
    which are paused."""
    inspection = broker.inspect(names)
    paused = paused_among(broker, names)
    if isinstance(broker, KeepsDeadLettersInStore):
        inspection = broker.with_stored_dead_letters(inspection)
    from queuey_core.management_api import Unacked, unacked  # noqa: PLC0415

    if settings.broker.is_embedded():
        from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

        if isinstance(broker, SqliteBackend):
            running = {name: c[0].leased for name, c in broker.counts(names).items()}
            return QueueLook(inspection, Unacked(running), embedded=True, paused=paused)
    management = settings.broker.management_url
    found = unacked(
        management.get_secret_value() if management is not None else None,
        settings.broker.urls(),
        list(names),
    )
    return QueueLook(inspection, found, paused=paused)
