"""The seam between the scheduler and where the last fired tick of each schedule is kept.

It must outlive every scheduler and be reachable from any machine (schedulers move),
so on RabbitMQ it lives on the broker
(:class:`queuey_core.backends.rabbitmq.schedule_state.RabbitScheduleState`), never in a
local file. In tests it is :class:`queuey_core.schedules.memory.MemoryScheduleState`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ScheduleState(Protocol):
    """The last tick fired by each schedule, in milliseconds since the epoch."""

    def last_fired(self, names: Sequence[str]) -> dict[str, int]:
        """The last tick fired of each of ``names`` that ever fired.

        Raises:
            BackendError: the store cannot be read.
        """

    def record(self, name: str, tick_ms: int) -> None:
        """Remember that ``name`` fired the tick at ``tick_ms``, durably, before returning.

        Raises:
            BackendError: the store did not take it.
        """

    def close(self) -> None:
        """Release connections."""
