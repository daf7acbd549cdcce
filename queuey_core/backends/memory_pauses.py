"""Paused queues of the in-memory backend: a set in the process.

Owns: :class:`MemoryPauses`, the :class:`~queuey_core.flow.pause_capability.SupportsPause` side of
:class:`~queuey_core.backends.memory.MemoryBackend` (a mixin, so the backend keeps its
one class line of capabilities). A process's memory is the only place its queues live,
so the pause lives there too, for the life of the backend.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from queuey_core.flow.pause_capability import SupportsPause

#: Seconds between two looks of a worker: a look is a set intersection.
POLL = 0.05

_init_lock = threading.Lock()


class MemoryPauses(SupportsPause):
    """Paused queue names kept for the life of the backend."""

    _paused_set: set[str] | None = None

    def _pauses(self) -> set[str]:
        found = self._paused_set
        if found is None:
            with _init_lock:
                if self._paused_set is None:
                    self._paused_set = set()
                found = self._paused_set
        return found

    def set_paused(self, queue: str, paused: bool) -> bool:
        """See :meth:`SupportsPause.set_paused`."""
        names = self._pauses()
        with _init_lock:
            was = queue in names
            if paused:
                names.add(queue)
            else:
                names.discard(queue)
        return was != paused

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        """See :meth:`SupportsPause.paused_queues`."""
        found = self._pauses()
        with _init_lock:
            return frozenset(found.intersection(names))

    def pause_poll(self) -> float:
        """See :meth:`SupportsPause.pause_poll`."""
        return POLL
