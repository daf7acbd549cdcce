"""A backend's acks, committed together (group commit).

A job thread's ack waits for a commit that carries it and every other ack waiting then:
whoever holds the connection's lock next commits all of them in one transaction, each
still its own delete with its own outcome (a lost lease fails only that ack). A commit
writes the pages it changed to the WAL, about 11 KB for one ack: acks that share a
commit share those pages.

Owns: :class:`GroupAcks`. Must never: report an ack done before the commit that carries
it returned, or done when that commit failed (every ack it carried then fails, and its
row is still this backend's).
"""

from __future__ import annotations

import threading

from queuey_core.backends.sqlite import messages
from queuey_core.backends.sqlite.database import Database, SqliteError
from queuey_core.errors import BackendError

_LOST = "the delivery's lease was lost (another worker holds the job now)"


class _Ack:
    __slots__ = ("done", "error", "owner", "row_id")

    def __init__(self, row_id: int, owner: str) -> None:
        self.row_id = row_id
        self.owner = owner
        self.done = False
        self.error: BackendError | None = None


class GroupAcks:
    """The acks of one :class:`Database`'s users, committed in groups."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._mutex = threading.Lock()
        self._waiting: list[_Ack] = []

    def ack(self, row_id: int, owner: str) -> None:
        """Delete row ``row_id``, which ``owner`` holds, once a commit carries it.

        Raises:
            SqliteError: the commit failed; the row is still this backend's.
            BackendError: the lease was lost: another worker holds the row now.
        """
        me = _Ack(row_id, owner)
        with self._mutex:
            self._waiting.append(me)
        with self._db.lock:
            # Whoever gets the connection commits every ack waiting, its own included
            # unless the commit before it carried it.
            if not me.done:
                with self._mutex:
                    group, self._waiting = self._waiting, []
                self._commit(group)
        if me.error is not None:
            raise me.error

    def _commit(self, group: list[_Ack]) -> None:
        failed: BaseException | None = None
        try:
            with self._db.write() as conn:
                for ack in group:
                    if not messages.take(conn, ack.row_id, owner=ack.owner):
                        ack.error = BackendError(_LOST)
        except BaseException as exc:
            failed = exc
            raise
        finally:
            for ack in group:
                if failed is not None:
                    ack.error = _failure(failed)
                ack.done = True


def _failure(exc: BaseException) -> SqliteError:
    """What each ack of a failed commit raises: an error of its own (raising one object
    from several threads at once would tangle their tracebacks)."""
    if isinstance(exc, BackendError):
        return SqliteError(str(exc), maybe_committed=getattr(exc, "maybe_committed", False))
    # Interrupted (a signal in the committing thread): the commit ran or did not.
    return SqliteError(
        f"interrupted while committing acks ({type(exc).__name__})", maybe_committed=True
    )
