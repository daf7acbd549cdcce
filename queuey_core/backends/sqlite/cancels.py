"""Cancels in the file: a row per cancelled job id, kept for :data:`RETENTION`.

Owns: the ``queuey_cancels`` table (made on first use, beside the versioned schema: it
changes no other table) and :class:`FileCancels`, the
:class:`~queuey_core.backends.capabilities.SupportsCancellation` side of
:class:`~queuey_core.backends.sqlite.SqliteBackend` (a mixin, so the backend keeps its
one class line of capabilities). A watch reads every row of the window when it starts,
then a thread of its own reads new rows whenever another process has committed (a
cancel of this very backend is handed to its watchers at once). Must never: keep a row
past the window (each cancel deletes what expired) or stop a worker because the file
refused a read (the watch logs and tries again).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence

from queuey_core.backends.capabilities import CancelListener, SupportsCancellation
from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.options import SqliteOptions
from queuey_core.clock import Clock

logger = logging.getLogger(__name__)

#: How long a cancel is kept (ms): a worker that starts within it still sees it.
RETENTION = 7 * 24 * 3600 * 1000

_TABLE = (
    "CREATE TABLE IF NOT EXISTS queuey_cancels ("
    "id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, at INTEGER NOT NULL)"
)


class FileCancels(SupportsCancellation):
    """Cancels of a SqliteBackend (which provides ``_db``, ``_clock`` and ``options``)."""

    _db: Database
    _clock: Clock
    options: SqliteOptions
    _cancel_watches: list[_Watch] | None = None

    def cancel_jobs(self, job_ids: Sequence[uuid.UUID]) -> None:
        """See :meth:`SupportsCancellation.cancel_jobs`."""
        now = self._clock.wall_ms()
        with self._db.write() as conn:
            conn.execute(_TABLE)
            conn.executemany(
                "INSERT INTO queuey_cancels (job_id, at) VALUES (?, ?)",
                [(str(job_id), now) for job_id in job_ids],
            )
            conn.execute("DELETE FROM queuey_cancels WHERE at < ?", (now - RETENTION,))
        self._cancel_watches = [w for w in self._cancel_watches or () if not w.closed]
        for watch in self._cancel_watches:
            watch.look()

    def watch_cancels(self, listener: CancelListener) -> _Watch:
        """See :meth:`SupportsCancellation.watch_cancels`."""
        with self._db.write() as conn:
            conn.execute(_TABLE)
        watch = _Watch(self._db, listener, self._clock, poll=self.options.poll)
        watch.look()  # the whole window, before the worker takes a job
        if self._cancel_watches is None:
            self._cancel_watches = []
        self._cancel_watches.append(watch)
        watch.start()
        return watch


class _Watch:
    """One watcher's thread and where it has read up to."""

    def __init__(self, db: Database, listener: CancelListener, clock: Clock, *, poll: float):
        self._db = db
        self._listener = listener
        self._clock = clock
        self._poll = max(poll, 0.05)
        self._last = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="queuey-cancels", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def look(self) -> None:
        """Read the rows not seen yet and tell the listener."""
        with self._lock:
            since = self._clock.wall_ms() - RETENTION
            with self._db.read() as conn:
                rows = conn.execute(
                    "SELECT id, job_id FROM queuey_cancels WHERE id > ? AND at >= ? ORDER BY id",
                    (self._last, since),
                ).fetchall()
            if not rows:
                return
            self._last = rows[-1][0]
        ids = []
        for _, text in rows:
            try:
                ids.append(uuid.UUID(text))
            except ValueError:
                logger.warning("ignoring a cancel of %r: not a job id", text)
        if ids:
            self._listener(ids)

    def _run(self) -> None:
        seen = None
        while not self._closed.wait(self._poll):
            if self._db.closed:
                return
            try:
                version = self._db.data_version()
                if version != seen:
                    seen = version
                    self.look()
            except Exception:  # the watch must outlive any error: it tries again
                if self._db.closed:
                    return
                logger.warning("could not read cancels; trying again", exc_info=True)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop watching; idempotent."""
        self._closed.set()
