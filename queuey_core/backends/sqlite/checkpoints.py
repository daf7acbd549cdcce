"""The embedded backend's checkpoints, run by a thread of their own.

A checkpoint copies the WAL's pages back into the database file, with two ``fsync``
calls. Left to SQLite, it runs inside whichever commit takes the WAL past 1,000 pages:
8-25 ms, every few hundred commits, paid by a job thread's ack, the pump's claim or a
producer's enqueue, while the process's other threads wait for the connection (the
bursts in the embedded backend's p99 start latency). Here the backend's connection
never checkpoints (``wal_autocheckpoint=0``): every :data:`EVERY_COMMITS` of its commits,
or sooner once they changed :data:`EVERY_ROWS` rows (an ``enqueue --file`` commits a
thousand rows at a time), wake a thread that runs a ``PASSIVE`` checkpoint on a
connection of its own, which waits for no reader or writer and holds no lock they need.

Owns: that thread (started at the first checkpoint due, so that a process that commits
a few times never has one) and its connection. Must never: block a commit, or outlive
its :class:`~queuey_core.backends.sqlite.database.Database`. The last connection to
close checkpoints what is left, as SQLite always does.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading

logger = logging.getLogger(__name__)

#: Commits of the backend's connection between two checkpoints. An ack's or a claim's
#: commit writes 3-4 pages to the WAL, so this is about SQLite's own 1,000 pages; a
#: worker under load reaches it a few times a second, an idle one never.
EVERY_COMMITS = 250
#: Rows the backend's commits inserted, changed or deleted between two checkpoints
#: (SQLite's ``total_changes``, which counts what triggers change too: a job enqueued
#: or settled is two, its row and its queue's count, see :mod:`.counts`): 5,000 jobs, a
#: few megabytes of WAL for jobs of a few hundred bytes, so that large batches do not
#: grow it for 250 commits.
EVERY_ROWS = 10_000


class Checkpointer:
    """Checkpoints of one file, run on a thread of their own every
    :data:`EVERY_COMMITS` commits of the connection that calls :meth:`committed`."""

    def __init__(self, path: str, busy_timeout: float) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._commits = 0
        self._rows_at_last = 0
        self._wake = threading.Event()
        self._stopping = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failing = False
        #: Checkpoints run, and the last one's (busy, WAL frames, frames checkpointed).
        self.runs = 0
        self.last: tuple[int, int, int] | None = None

    def committed(self, rows: int) -> None:
        """Count a commit of the connection whose rows changed so far are ``rows``
        (``total_changes``; its caller holds the connection's lock); every
        :data:`EVERY_COMMITS` commits or :data:`EVERY_ROWS` rows, wake the thread."""
        self._commits += 1
        if self._commits < EVERY_COMMITS and rows - self._rows_at_last < EVERY_ROWS:
            return
        self._commits = 0
        self._rows_at_last = rows
        if self._thread is None:
            self._start()
        self._wake.set()

    def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes first) and close its
        connection; idempotent."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2)

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _start(self) -> None:
        with self._lock:
            if self._stopping or self._thread is not None:
                return
            thread = threading.Thread(
                target=self._run, name="queuey-sqlite-checkpoint", daemon=True
            )
            try:
                thread.start()
            except RuntimeError as exc:
                # No thread to be had (the process's limit): the commits went in; the
                # WAL grows until a later try starts one.
                logger.warning("%s: cannot start the checkpoint thread (%s)", self._path, exc)
                return
            self._thread = thread

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                if self._stopping:
                    return
                self._wake.clear()
                try:
                    if conn is None:
                        conn = self._connect()
                    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    self._failed(exc)
                    continue
                self.last = (int(row[0]), int(row[1]), int(row[2]))
                self.runs += 1
                if self._failing:
                    self._failing = False
                    logger.info("%s: checkpoints work again", self._path)
        finally:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )

    def _failed(self, exc: sqlite3.Error) -> None:
        """A failed checkpoint is tried again at the next wake (the WAL grows
        meanwhile; nothing is lost): one line when they start failing."""
        if not self._failing:
            self._failing = True
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.warning("%s: a checkpoint failed (%s); trying again later", self._path, first)
