"""Paused queues in the file: a row per paused queue, in ``queuey_paused``.

Owns: :class:`FilePauses` (the table's DDL is :mod:`.pause_table`'s),
the :class:`~queuey_core.flow.pause_capability.SupportsPause` side of
:class:`~queuey_core.backends.sqlite.SqliteBackend` (a mixin). The claim
(:mod:`.messages`) skips a queue with a row here, so a pause holds for every process
that opens the file from the commit on, whatever its workers have read; a worker's watch
only stops its consumer, so that it says what it is doing. Must never: delete or touch a
message: a paused queue's rows wait where they are, their priorities and order kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from queuey_core.backends.sqlite.database import Database
from queuey_core.clock import Clock
from queuey_core.flow.pause_capability import SupportsPause

#: Seconds between two looks of a worker's watch: one read of a table of a few rows.
POLL = 0.5


class FilePauses(SupportsPause):
    """Paused queues of a SqliteBackend (which provides ``_db`` and ``_clock``)."""

    _db: Database
    _clock: Clock

    def set_paused(self, queue: str, paused: bool) -> bool:
        """See :meth:`SupportsPause.set_paused`."""
        with self._db.write() as conn:
            if paused:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO queuey_paused (queue, paused_at) VALUES (?, ?)",
                    (queue, self._clock.wall_ms()),
                )
            else:
                cur = conn.execute("DELETE FROM queuey_paused WHERE queue = ?", (queue,))
            return cur.rowcount > 0

    def paused_queues(self, names: Sequence[str]) -> frozenset[str]:
        """See :meth:`SupportsPause.paused_queues`."""
        with self._db.read() as conn:
            rows = conn.execute("SELECT queue FROM queuey_paused").fetchall()
        return frozenset(row[0] for row in rows).intersection(names)

    def pause_poll(self) -> float:
        """See :meth:`SupportsPause.pause_poll`."""
        return POLL
