"""Pausing a queue in a test: the kit's :meth:`pause` and :meth:`resume`.

A pause in the kit is the real one: the backend's state, written by
:func:`~queuey_core.flow.pause.pause_queue` as ``queuey queues pause`` writes it, and
obeyed by the kit's worker, which cancels the queue's consumer. The gate learns of the
cancel (:class:`~queuey_core.testing.gate_handles.GatedSubscription`), so a paused
queue's jobs wait, listed by ``enqueued()``, and neither ``run()`` nor ``drain()`` can
take them until the queue is resumed. Owns: waiting, in real time and bounded, for the
worker to obey. Must never: pause or resume anything the backend does not.
"""

from __future__ import annotations

from typing import Any

from queuey_core.flow.pause import pause_queue, paused_queues, resume_queue
from queuey_core.queues import QueueSet
from queuey_core.testing.gate import GatedMemoryBackend, GatedSqliteBackend


class KitPauses:
    """Mixed into :class:`~queuey_core.testing.QueueyKit`."""

    backend: GatedMemoryBackend | GatedSqliteBackend
    queues: QueueSet

    def _until(self, cond: Any, what: str) -> None:
        raise NotImplementedError  # the kit's

    def pause(self, queue: str) -> None:
        """Pause ``queue`` as ``queuey queues pause`` does, and wait until the kit's
        worker takes none of its jobs: they wait (``enqueued()`` lists them), ``drain()``
        leaves them and ``run()`` of one raises KitError, until :meth:`resume`.

        Raises:
            UnknownQueueError: ``queue`` is not one of the kit's queues.
        """
        pause_queue(self.backend, queue, known=list(self.queues))
        gate = self.backend.gate
        # Held deliveries go back once nothing runs (a job held by ``running()`` first).
        self._until(
            lambda: not gate.consumed(queue) and (gate.busy() or not gate.held_of(queue)),
            f"the worker to pause {queue}",
        )

    def resume(self, queue: str) -> None:
        """Resume ``queue`` (as ``queuey queues resume``), and wait until the worker
        consumes it again: its jobs run as before, in their order."""
        resume_queue(self.backend, queue, known=list(self.queues))
        self._until(lambda: self.backend.gate.consumed(queue), f"the worker to resume {queue}")

    def paused(self) -> frozenset[str]:
        """The kit's queues that are paused now (the backend's state)."""
        return paused_queues(self.backend, list(self.queues))
