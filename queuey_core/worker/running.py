"""What a hook is shown of the worker it watches: :class:`RunningWorker`.

A protocol, not the worker itself: the worker imports the hooks, so the hooks do not
import the worker. Owns: that view. Must never: give a hook a way to change the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from queuey_core.backends.base import Backend
    from queuey_core.flow.limit_gate import LimitGate
    from queuey_core.queues import QueueConfig
    from queuey_core.worker.handle import WorkerHandle


class RunningWorker(Protocol):
    """What a hook is shown of the worker it watches (a :class:`~queuey_core.worker.Worker`)."""

    @property
    def queues(self) -> Sequence[QueueConfig]:
        """The queues the worker consumes."""

    @property
    def concurrency(self) -> int:
        """The most jobs it runs at the same time."""

    @property
    def handle(self) -> WorkerHandle:
        """Its handle: shutdown and counters."""

    @property
    def backend(self) -> Backend:
        """Where its deliveries come from."""

    @property
    def job_types(self) -> frozenset[str]:
        """The job types it has a handler for."""

    @property
    def limits(self) -> LimitGate | None:
        """The gate of the limits its jobs start under (None: no limits declared)."""
