"""What a backend answers to pause queues: the :class:`SupportsPause` capability.

A module of its own, beneath both :mod:`queuey_core.backends.capabilities` (which
re-exports it beside the others) and :mod:`queuey_core.flow.pause` (which uses it), so
that neither imports the other in a circle. Owns the Protocol only; what a pause means
and how a worker obeys it are :mod:`queuey_core.flow.pause`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class SupportsPause(Protocol):
    """A backend that keeps paused queues where every worker reads them.

    The state outlives every process (and, on a broker, a restart of the broker): a
    pause stays until :meth:`set_paused` resumes it. Workers read it at their start and
    every :meth:`pause_poll` seconds after (:class:`~queuey_core.flow.pause.PauseWatch`).
    """

    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pause (or resume) ``queue``; whether that changed its state.

        Raises:
            BackendError: the state could not be written.
        """

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        """Which of ``names`` are paused now.

        Raises:
            BackendError: the state could not be read.
        """

    def pause_poll(self) -> float:
        """Seconds between two looks of a worker's watch: what a look
        costs this backend decides it."""
