"""The embedded backend's :class:`Inspectable`: each queue's counts, consumers and dead
letters.

Owns: reading the counts for
:class:`~queuey_core.backends.sqlite.backend.SqliteBackend`, a mixin of it, from the
tables the triggers of :mod:`.counts` keep (what only time changes, held and running,
from the indexes), so no count reads the rows of a long queue. Must never: write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from queuey_core.backends.capabilities import Inspectable, Inspection, QueueCounts
from queuey_core.backends.sqlite import counts as tally
from queuey_core.backends.sqlite.consumer import SqliteSubscription
from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.writes import Writer, other_consumers
from queuey_core.clock import Clock


class FileInspection(Inspectable):
    """Inspection of the file; see the module docstring."""

    owner: str
    _db: Database
    _clock: Clock
    _writer: Writer
    _subs: list[SqliteSubscription]
    _lease_ms: int

    def inspect(self, names: Sequence[str]) -> Inspection:
        """See :meth:`Inspectable.inspect`; ``held`` is what waits for its delay. One
        read of the counts tables (see :mod:`.counts` for what it costs)."""
        found: dict[str, QueueCounts | None] = {}
        with self._db.read() as conn:
            every = tally.counted(conn, now=self._clock.wall_ms())
            looked = self._looked(conn, names, every)
        for name in names:
            c = looked.get(name)
            found[name] = None if c is None else QueueCounts(c[0].ready, c[1], c[2])
        return Inspection(found, sum(c.held for c in every.values()))

    def counts(self, names: Sequence[str]) -> dict[str, tuple[tally.Counts, int, int]]:
        """For each declared queue of ``names``: its counts (ready, leased, held), its
        live consumers and its dead letters."""
        with self._db.read() as conn:
            return self._looked(conn, names, tally.counted(conn, now=self._clock.wall_ms()))

    def held_deferrals(self, queue: str) -> int:
        """How many held jobs of ``queue`` are deferrals (O(held): see
        :func:`.counts.held_deferrals`)."""
        with self._db.read() as conn:
            return tally.held_deferrals(conn, queue, now=self._clock.wall_ms())

    def _looked(
        self, conn: sqlite3.Connection, names: Sequence[str], every: dict[str, tally.Counts]
    ) -> dict[str, tuple[tally.Counts, int, int]]:
        """The declared queues of ``names``: their counts in ``every`` (none yet: all 0),
        live consumers and dead letters."""
        now = self._clock.wall_ms()
        return {
            name: (
                every.get(name, tally.Counts(0, 0, 0)),
                self._consumers(conn, name, now),
                tally.dead_letters(conn, name),
            )
            for name in names
            if self._writer.queue_info(name, conn) is not None
        }

    def _consumers(self, conn: sqlite3.Connection, queue: str, now: int) -> int:
        mine = sum(1 for s in list(self._subs) if s.queue == queue and not s.cancelled)
        return mine + other_consumers(conn, queue, self.owner, now - 3 * self._lease_ms)
