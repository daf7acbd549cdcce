"""The control channel through the file: requests and replies are rows.

``queuey workers`` writes a request row with an expiry; every serving worker's thread
notices the file changed, answers each request newer than the last it saw, and writes
its reply row; the asker reads the replies until every live server answered or the
timeout passed. Servers record when they were last seen, so the asker knows how many
answers to wait for. Owns: the ``queuey_control_*`` tables. Must never: let a handler
that raises stop the others, or keep requests and replies longer than a minute.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable

from queuey_core.backends.capabilities import ControlHandler
from queuey_core.backends.sqlite.database import Database
from queuey_core.clock import Clock

logger = logging.getLogger(__name__)

#: How long (ms) requests and replies are kept after they expire.
KEEP_MS = 60_000
#: How often (s) the asker looks for replies.
REPLY_POLL = 0.01


class SqliteControl:
    """The control servers of one backend, and its asking end."""

    def __init__(
        self, db: Database, clock: Clock, *, lease: float, wake: Callable[[], None] = lambda: None
    ) -> None:
        self._db = db
        self._clock = clock
        self._lease_ms = int(lease * 1000)
        self._wake = wake
        self._lock = threading.Lock()
        self._servers: list[_Server] = []

    def serve(self, handler: ControlHandler) -> _Server:
        """Answer requests written from now on with ``handler``."""
        now = self._clock.wall_ms()
        server = _Server(self, handler)
        with self._db.write() as conn:
            server.last = int(
                conn.execute("SELECT coalesce(max(id), 0) FROM queuey_control_requests").fetchone()[
                    0
                ]
            )
            conn.execute(
                "INSERT OR REPLACE INTO queuey_control_servers (server, seen_at) VALUES (?, ?)",
                (server.name, now),
            )
        with self._lock:
            self._servers.append(server)
        return server

    def answer(self, now: int) -> None:
        """Answer every request newer than each server's last (the backend's thread)."""
        with self._lock:
            servers = list(self._servers)
        if not servers:
            return
        first = min(s.last for s in servers)
        with self._db.read() as conn:
            requests = conn.execute(
                "SELECT id, body FROM queuey_control_requests "
                "WHERE id > ? AND expires_at >= ? ORDER BY id",
                (first, now),
            ).fetchall()
        if not requests:
            return
        replies: list[tuple[int, str, bytes]] = []
        for server in servers:
            for request_id, body in requests:
                if request_id <= server.last:
                    continue
                try:
                    reply = server.handler(bytes(body))
                except Exception:
                    logger.error("a control handler failed; ignored", exc_info=True)
                    reply = None
                if reply is not None:
                    replies.append((request_id, server.name, bytes(reply)))
            server.last = max(server.last, requests[-1][0])
        if replies:
            with self._db.write() as conn:
                conn.executemany(
                    "INSERT INTO queuey_control_replies (request_id, server, body) "
                    "VALUES (?, ?, ?)",
                    replies,
                )

    def seen(self, conn: sqlite3.Connection, now: int) -> None:
        """Record that this backend's servers live, and drop old requests (renewal)."""
        with self._lock:
            names = [(now, s.name) for s in self._servers]
        conn.executemany("UPDATE queuey_control_servers SET seen_at = ? WHERE server = ?", names)
        old = now - KEEP_MS
        conn.execute(
            "DELETE FROM queuey_control_replies WHERE request_id IN "
            "(SELECT id FROM queuey_control_requests WHERE expires_at < ?)",
            (old,),
        )
        conn.execute("DELETE FROM queuey_control_requests WHERE expires_at < ?", (old,))
        conn.execute(
            "DELETE FROM queuey_control_servers WHERE seen_at < ?", (now - 10 * self._lease_ms,)
        )

    def forget(self, conn: sqlite3.Connection) -> None:
        """Remove every server of this backend (it is closing)."""
        with self._lock:
            servers, self._servers = self._servers, []
        conn.executemany(
            "DELETE FROM queuey_control_servers WHERE server = ?", [(s.name,) for s in servers]
        )

    def broadcast(self, request: bytes, *, timeout: float) -> list[bytes]:
        """Write ``request``; the replies of the live servers that came within ``timeout``."""
        now = self._clock.wall_ms()
        with self._db.write() as conn:
            cur = conn.execute(
                "INSERT INTO queuey_control_requests (body, expires_at) VALUES (?, ?)",
                (bytes(request), now + int(timeout * 1000)),
            )
            request_id = cur.lastrowid
            live = int(
                conn.execute(
                    "SELECT count(*) FROM queuey_control_servers WHERE seen_at >= ?",
                    (now - 3 * self._lease_ms,),
                ).fetchone()[0]
            )
        self._wake()
        # Real time: the asker is a command waiting for other processes.
        deadline = time.monotonic() + timeout
        while True:
            with self._db.read() as conn:
                replies = [
                    bytes(row[0])
                    for row in conn.execute(
                        "SELECT body FROM queuey_control_replies WHERE request_id = ? "
                        "ORDER BY rowid",
                        (request_id,),
                    )
                ]
            if len(replies) >= live or time.monotonic() >= deadline:
                return replies
            time.sleep(REPLY_POLL)

    def _remove(self, server: _Server) -> None:
        with self._lock:
            if server not in self._servers:
                return
            self._servers.remove(server)
        try:
            with self._db.write() as conn:
                conn.execute("DELETE FROM queuey_control_servers WHERE server = ?", (server.name,))
        except Exception as exc:  # closing must not fail: the row ages out
            logger.debug("could not remove a control server's row: %s", exc)


class _Server:
    def __init__(self, control: SqliteControl, handler: ControlHandler) -> None:
        self._control = control
        self.handler = handler
        self.name = uuid.uuid4().hex
        self.last = 0

    def close(self) -> None:
        self._control._remove(self)
