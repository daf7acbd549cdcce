"""The embedded backend's dead-letter tools (:class:`DeadLetterTools`), as lookups.

Owns: paging, finding, iterating, requeueing, deleting and purging the rows of
``queuey_dead`` (their SQL is :mod:`.dead`'s) for
:class:`~queuey_core.backends.sqlite.backend.SqliteBackend`, a mixin of it. Every
command is a query on the ``(queue, id)`` index, or a filter SQLite applies: none reads
the dead letters it does not return. A requeue of all goes in transactions of
:data:`BATCH` rows (each moves its rows, or none of them), so a cut leaves nothing on
both sides and says how many moved. Must never: reorder dead letters, or requeue one
that is not an envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetterWindow
from queuey_core.backends.dead_letter_query import DeadLetterFilter, DeadLetterToolsBase, cut
from queuey_core.backends.sqlite import dead
from queuey_core.backends.sqlite.database import Database
from queuey_core.backends.sqlite.pump import Pump
from queuey_core.backends.sqlite.writes import Writer
from queuey_core.errors import BackendError, DeadLetterMoveError

#: Rows per transaction of a requeue of all, and per read of an iteration.
BATCH = 1000


class SqliteDeadLetters(DeadLetterToolsBase):
    """Dead-letter tools on ``queuey_dead``; see the module docstring."""

    _db: Database
    _writer: Writer
    _pump: Pump

    def _check_open(self) -> None:
        raise NotImplementedError  # the backend's

    def _window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        """See :meth:`DeadLetterToolsBase._window`: the count and the first rows in one read,
        then :data:`BATCH` rows per read past the last row id, each read its own short
        transaction (writers are never held up)."""
        letters = self._rows(queue, wanted, offset, limit)
        return DeadLetterWindow(letters, offset=offset, limit=limit)

    def _rows(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> Generator[AnyDeadLetter, None, int]:
        size = BATCH if limit is None else min(limit, BATCH)
        with self._db.read() as conn:
            total = dead.counted(conn, queue, wanted)
            rows = dead.listed(conn, queue, limit=size, offset=offset, wanted=wanted)
        following = self._following(queue, wanted, rows, size)
        return (yield from cut(following, offset, limit, total=total, skipped=offset))

    def _following(
        self, queue: str, wanted: DeadLetterFilter, rows: list[tuple[int, AnyDeadLetter]], size: int
    ) -> Generator[AnyDeadLetter, None, None]:
        """``rows``, then the rows after them, a read at a time, for as long as asked."""
        while True:
            yield from (d for _, d in rows)
            if len(rows) < size:
                return
            with self._db.read() as conn:
                rows = dead.listed(conn, queue, limit=BATCH, wanted=wanted, after=rows[-1][0])
            size = BATCH

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`: a lookup."""
        with self._db.read() as conn:
            hit = dead.found(conn, queue, handle)
        return None if hit is None else hit[1]

    def _requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`: undecodable ones stay; chosen
        ids in one transaction, all in transactions of :data:`BATCH` rows."""
        self._check_open()
        if job_ids is not None:
            moved, _ = self._writer.requeue_dead(queue, job_ids)
            self._pump.wake()
            if progress is not None:
                progress(moved)
            return moved
        moved, after = 0, 0
        while True:
            try:
                batch, last = self._writer.requeue_dead(queue, None, after=after, limit=BATCH)
            except BackendError as exc:
                raise DeadLetterMoveError(queue, moved, str(exc)) from exc
            moved += batch
            self._pump.wake()
            if progress is not None:
                progress(moved)
            if last is None:
                return moved
            after = last

    def _delete(self, queue: str, handles: list[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`."""
        with self._db.write() as conn:
            return dead.delete(conn, queue, handles)

    def _purge(self, queue: str) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: one statement."""
        with self._db.write() as conn:
            return dead.purge(conn, queue)
