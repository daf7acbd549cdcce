"""The scheduler's state and election through the file.

The last fired tick of each schedule is a row of ``queuey_schedule_ticks``. The one
active scheduler holds the row of ``queuey_leader`` with a lease it renews every
``heartbeat`` seconds; a candidate takes the row only when its lease has expired, so
a scheduler that dies (``kill -9``) is replaced within three heartbeats. Owns: those
two tables. Must never: say it leads without having renewed within its lease.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.options import SqliteOptions
from queuey_core.errors import BackendError, QueueyError

logger = logging.getLogger(__name__)

#: The name of the one leader row.
LEADER = "scheduler"


class SqliteScheduleState:
    """See :class:`~queuey_core.schedules.state.ScheduleState`; a connection of its own."""

    def __init__(self, options: SqliteOptions) -> None:
        self._db = Database(options)

    def last_fired(self, names: Sequence[str]) -> dict[str, int]:
        """See :meth:`ScheduleState.last_fired`."""
        with self._db.read() as conn:
            found = {}
            for name in names:
                row = conn.execute(
                    "SELECT tick_ms FROM queuey_schedule_ticks WHERE name = ?", (name,)
                ).fetchone()
                if row is not None:
                    found[name] = int(row[0])
            return found

    def record(self, name: str, tick_ms: int) -> None:
        """See :meth:`ScheduleState.record`: committed before it returns."""
        with self._db.write() as conn:
            conn.execute(
                "INSERT INTO queuey_schedule_ticks (name, tick_ms) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET tick_ms = max(tick_ms, excluded.tick_ms)",
                (name, tick_ms),
            )

    def close(self) -> None:
        """See :meth:`ScheduleState.close`."""
        self._db.close()


class SqliteElection:
    """See :class:`~queuey_core.schedules.election.Election`: a leader row with a lease."""

    def __init__(self, options: SqliteOptions, *, heartbeat: float) -> None:
        self._options = options
        self._heartbeat = max(0.1, float(heartbeat))
        self._lease = 3 * self._heartbeat
        self.name = uuid.uuid4().hex
        self._db: Database | None = None
        self._on_change: Callable[[], None] = lambda: None
        self._leader = False
        self._valid_until = 0.0
        self._error: QueueyError | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, on_change: Callable[[], None]) -> None:
        """See :meth:`Election.start`: the file must open now."""
        self._on_change = on_change
        self._db = Database(self._options)
        self._round()
        self._thread = threading.Thread(target=self._run, name="queuey-election", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """See :meth:`Election.is_leader`: only within the lease last renewed."""
        with self._lock:
            return self._leader and time.monotonic() < self._valid_until

    def confirm(self) -> bool:
        """See :meth:`Election.confirm`: renews now."""
        try:
            self._round()
        except BackendError:
            return False
        return self.is_leader()

    @property
    def error(self) -> QueueyError | None:
        """See :attr:`Election.error`."""
        return self._error

    def close(self) -> None:
        """See :meth:`Election.close`: the row is let go, another candidate takes it."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        db, self._db = self._db, None
        if db is None:
            return
        try:
            with db.write() as conn:
                conn.execute(
                    "DELETE FROM queuey_leader WHERE name = ? AND owner = ?", (LEADER, self.name)
                )
        except BackendError as exc:
            logger.warning("could not step down: %s; the lease runs out", exc)
        db.close()
        self._set(False)

    def _run(self) -> None:
        failing_since: float | None = None
        while not self._stopping.wait(self._heartbeat / 2):
            try:
                self._round()
                failing_since = None
            except BackendError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                self._set(False)
                if now - failing_since > 10 * self._lease:
                    self._error = exc
                    self._on_change()
                    return

    def _round(self) -> None:
        """Take or renew the leader row if it is free or ours; note who leads."""
        db = self._db
        if db is None:
            return
        started = time.monotonic()
        now = time.time_ns() // 1_000_000
        until = now + int(self._lease * 1000)
        with db.write() as conn:
            conn.execute(
                "INSERT INTO queuey_leader (name, owner, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "expires_at = excluded.expires_at "
                "WHERE queuey_leader.owner = excluded.owner OR queuey_leader.expires_at < ?",
                (LEADER, self.name, until, now),
            )
            owner = conn.execute(
                "SELECT owner FROM queuey_leader WHERE name = ?", (LEADER,)
            ).fetchone()[0]
        with self._lock:
            self._valid_until = started + self._lease
        self._set(owner == self.name)

    def _set(self, leader: bool) -> None:
        with self._lock:
            changed = leader != self._leader
            self._leader = leader
        if changed:
            self._on_change()
