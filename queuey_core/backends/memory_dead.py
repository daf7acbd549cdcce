"""The in-memory backend's dead-letter tools (:class:`DeadLetterTools`).

Owns: listing, paging, finding, requeueing, deleting and purging the dead letters a
:class:`~queuey_core.backends.memory_queue.MemoryQueue` keeps, under the backend's one
lock. :class:`MemoryDeadLetters` is a mixin of
:class:`~queuey_core.backends.memory.MemoryBackend`, which provides the internals it
names. Must never: reorder dead letters, or requeue one that is not an envelope.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetter, DeadLetterWindow
from queuey_core.backends.dead_letter_query import DeadLetterFilter, DeadLetterToolsBase, cut
from queuey_core.backends.memory_queue import MemoryQueue, with_positions
from queuey_core.envelope import Envelope


class MemoryDeadLetters(DeadLetterToolsBase):
    """Dead-letter tools over the backend's queues; see the module docstring."""

    _lock: threading.RLock

    def _check_open(self) -> None:
        raise NotImplementedError  # the backend's

    def _queue(self, name: str) -> MemoryQueue:
        raise NotImplementedError  # the backend's

    def _hold_or_ready(
        self, q: MemoryQueue, envelope: Envelope, delay: float | None, *, deferral: bool
    ) -> None:
        raise NotImplementedError  # the backend's

    def _window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        """See :meth:`DeadLetterToolsBase._window`: a snapshot taken at the call (a list of
        the letters the backend holds anyway, not copies of them)."""
        with self._lock:
            dead = with_positions(self._queue(queue).dead)
        kept = (d for d in dead if wanted.keeps(d))
        total = len(dead) if wanted.everything else None
        return DeadLetterWindow(cut(kept, offset, limit, total=total), offset=offset, limit=limit)

    def _requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`: undecodable ones stay."""
        wanted = None if job_ids is None else set(job_ids)
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            keep: list[AnyDeadLetter] = []
            moved = 0
            for dead in q.dead:
                if isinstance(dead, DeadLetter) and (
                    wanted is None or str(dead.envelope.job_id) in wanted
                ):
                    self._hold_or_ready(q, dead.envelope.fresh(), None, deferral=False)
                    moved += 1
                else:
                    keep.append(dead)
            q.dead = keep
        if progress is not None:
            progress(moved)
        return moved

    def _delete(self, queue: str, handles: list[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`."""
        wanted = set(handles)
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            listed = with_positions(q.dead)
            keep = [
                raw for raw, shown in zip(q.dead, listed, strict=True) if shown.handle not in wanted
            ]
            deleted = len(q.dead) - len(keep)
            q.dead = keep
            return deleted

    def _purge(self, queue: str) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`."""
        with self._lock:
            q = self._queue(queue)
            purged = len(q.dead)
            q.dead = []
        return purged
