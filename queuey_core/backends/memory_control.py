"""The control channel of :class:`~queuey_core.backends.memory.MemoryBackend`.

Every handler serving is called, in the asking thread, with each broadcast request, and
the replies come back in the order the handlers were started: what RabbitMQ's fanout
exchange and direct reply-to do for ``RabbitMQBackend``, without a broker, so the
library's unit tests can exercise a worker's responder.

Owns: the list of serving handlers. Must never: let a handler that raises stop the
others from being asked (it is logged and counts as no reply).
"""

from __future__ import annotations

import logging
import threading

from queuey_core.backends.capabilities import ControlHandler

logger = logging.getLogger(__name__)


class MemoryControl:
    """Handlers serving the control channel of one in-memory backend. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: list[_MemoryControlServer] = []

    def serve(self, handler: ControlHandler) -> _MemoryControlServer:
        """Start answering with ``handler`` until the returned server is closed."""
        server = _MemoryControlServer(self, handler)
        with self._lock:
            self._servers.append(server)
        return server

    def broadcast(self, request: bytes) -> list[bytes]:
        """Every serving handler's reply to ``request`` (None is no reply)."""
        with self._lock:
            servers = list(self._servers)
        replies = []
        for server in servers:
            try:
                reply = server.handler(request)
            except Exception:
                logger.error("a control handler failed; ignored", exc_info=True)
                continue
            if reply is not None:
                replies.append(bytes(reply))
        return replies

    def serving(self) -> int:
        """How many handlers serve now (tests)."""
        with self._lock:
            return len(self._servers)

    def close_all(self) -> None:
        """Close every server (the backend is closing)."""
        with self._lock:
            self._servers.clear()

    def _remove(self, server: _MemoryControlServer) -> None:
        with self._lock:
            if server in self._servers:
                self._servers.remove(server)


class _MemoryControlServer:
    def __init__(self, bus: MemoryControl, handler: ControlHandler) -> None:
        self._bus = bus
        self.handler = handler

    def close(self) -> None:
        self._bus._remove(self)
