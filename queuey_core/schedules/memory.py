"""In-process election and schedule state, for tests and single-process demos.

A :class:`MemoryBallot` is the shared "broker" of an election: candidates stand in the
order they start, the first one still standing leads, and a test can kill the leader
(:meth:`MemoryBallot.kill`) to watch the next one take over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from queuey_core.errors import BackendError


class MemoryBallot:
    """Candidates in the order they stood; the first one standing leads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._standing: list[MemoryElection] = []

    def leader(self) -> MemoryElection | None:
        """The candidate leading now."""
        with self._lock:
            return self._standing[0] if self._standing else None

    def _stand(self, candidate: MemoryElection) -> None:
        with self._lock:
            self._standing.append(candidate)
        self._notify()

    def _leave(self, candidate: MemoryElection) -> None:
        with self._lock:
            if candidate not in self._standing:
                return
            self._standing.remove(candidate)
        candidate._changed()
        self._notify()

    def kill(self, candidate: MemoryElection, error: str = "killed") -> None:
        """The candidate dies, as if its connection dropped for good."""
        candidate._error = BackendError(error)
        self._leave(candidate)

    def _notify(self) -> None:
        with self._lock:
            everyone = list(self._standing)
        for c in everyone:
            c._changed()


class MemoryElection:
    """One candidate of a :class:`MemoryBallot`."""

    def __init__(self, ballot: MemoryBallot) -> None:
        self._ballot = ballot
        self._on_change: Callable[[], None] | None = None
        self._error: BackendError | None = None
        self.confirms = 0

    def start(self, on_change: Callable[[], None]) -> None:
        """See :meth:`Election.start`."""
        self._on_change = on_change
        self._ballot._stand(self)

    def is_leader(self) -> bool:
        """See :meth:`Election.is_leader`."""
        return self._ballot.leader() is self

    def confirm(self) -> bool:
        """See :meth:`Election.confirm`."""
        self.confirms += 1
        return self.is_leader()

    @property
    def error(self) -> BackendError | None:
        """See :attr:`Election.error`."""
        return self._error

    def close(self) -> None:
        """See :meth:`Election.close`."""
        self._ballot._leave(self)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


class MemoryScheduleState:
    """Last fired ticks in a dict, shared by whoever holds this object."""

    def __init__(self, initial: dict[str, int] | None = None) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, int] = dict(initial or {})
        self.records: list[tuple[str, int]] = []

    def last_fired(self, names: Sequence[str]) -> dict[str, int]:
        """See :meth:`ScheduleState.last_fired`."""
        with self._lock:
            return {n: self._last[n] for n in names if n in self._last}

    def record(self, name: str, tick_ms: int) -> None:
        """See :meth:`ScheduleState.record`."""
        with self._lock:
            self._last[name] = max(tick_ms, self._last.get(name, tick_ms))
            self.records.append((name, tick_ms))

    def close(self) -> None:
        """See :meth:`ScheduleState.close`."""
