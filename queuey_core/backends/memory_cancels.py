"""Cancels of the in-memory backend: a list every watcher of the process reads.

Owns: :class:`MemoryCancels`, the :class:`~queuey_core.backends.capabilities.SupportsCancellation`
side of :class:`~queuey_core.backends.memory.MemoryBackend` (a mixin, so the backend
keeps its one class line of capabilities). Listeners are called in the thread that
cancels, as the memory control channel calls its handlers.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

from queuey_core.backends.capabilities import CancelListener, SupportsCancellation

_init_lock = threading.Lock()


class _Log:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[uuid.UUID] = []
        self.listeners: list[CancelListener] = []


class _Watch:
    def __init__(self, log: _Log, listener: CancelListener) -> None:
        self._log = log
        self._listener = listener

    def close(self) -> None:
        with self._log.lock:
            if self._listener in self._log.listeners:
                self._log.listeners.remove(self._listener)


class MemoryCancels(SupportsCancellation):
    """Cancels kept for the life of the backend (a process's memory is its retention)."""

    _cancel_log: _Log | None = None

    def _cancels(self) -> _Log:
        log = self._cancel_log
        if log is None:
            with _init_lock:
                if self._cancel_log is None:
                    self._cancel_log = _Log()
                log = self._cancel_log
        return log

    def cancel_jobs(self, job_ids: Sequence[uuid.UUID]) -> None:
        """See :meth:`SupportsCancellation.cancel_jobs`: every watcher is told at once."""
        log = self._cancels()
        ids = list(job_ids)
        with log.lock:
            log.ids.extend(ids)
            listeners = list(log.listeners)
        for listener in listeners:
            listener(ids)

    def watch_cancels(self, listener: CancelListener) -> _Watch:
        """See :meth:`SupportsCancellation.watch_cancels`."""
        log = self._cancels()
        with log.lock:
            known = list(log.ids)
            log.listeners.append(listener)
        if known:
            listener(known)
        return _Watch(log, listener)
