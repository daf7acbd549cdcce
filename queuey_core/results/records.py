"""What the job store holds: a job's record, its attempts, and the events that build them.

Owns: :class:`JobState`, :class:`Attempt`, :class:`JobRecord` (what readers get) and
:class:`JobEvent` (what the producer and the worker's recorder write). Values only: no
I/O here, so the dashboard, the CLI and every store share one shape.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple


class JobState(enum.StrEnum):
    """Where a job is: the last thing the store was told of it."""

    QUEUED = "queued"
    """Enqueued by a producer that records (no worker has taken it yet)."""
    RUNNING = "running"
    """A worker runs its handler."""
    RETRYING = "retrying"
    """An attempt failed; it comes back after its backoff."""
    DEFERRED = "deferred"
    """The handler deferred it; it comes back after the delay, attempt unchanged."""
    SUCCEEDED = "succeeded"
    """The handler returned; its result (if any) is kept."""
    DEAD_LETTERED = "dead_lettered"
    """Fatal, out of attempts, no handler, or a payload that does not fit."""
    CANCELLED = "cancelled"
    """Cancelled before it ran, or stopped by its handler after a cancel."""

    @property
    def finished(self) -> bool:
        """Whether the job is over: it will never run again."""
        return self in _FINISHED


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.DEAD_LETTERED, JobState.CANCELLED})


def from_ms(ms: int) -> datetime:
    """Milliseconds since the Unix epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(when: datetime) -> int:
    """An aware datetime (a naive one is taken as UTC) as milliseconds since the epoch."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a job's handler, on one worker.

    ``number`` is the envelope's attempt (a deferral, or a worker that died mid-run,
    gives two attempts the same number: each run is its own row). ``ended_at`` is None
    while it runs, or when its worker died before saying how it ended; ``outcome`` is the
    state it left the job in.
    """

    number: int
    host: str
    pid: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: JobState | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (times as ISO 8601 in UTC)."""
        return {
            "number": self.number,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "outcome": None if self.outcome is None else self.outcome.value,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's history as the store knows it.

    ``result`` is the handler's return value as JSON data (None when it returned None or
    has not succeeded). ``error`` is the last failure's text, or the reason of a dead
    letter or a cancel. Results may be sensitive: print them only when asked.
    """

    job_id: uuid.UUID
    job_type: str
    queue: str
    state: JobState
    attempts: tuple[Attempt, ...]
    result: Any
    created_at: datetime
    updated_at: datetime
    error: str = ""

    def to_json(self, *, with_result: bool = True) -> dict[str, Any]:
        """Plain JSON data; ``with_result=False`` leaves the result out."""
        data: dict[str, Any] = {
            "job_id": str(self.job_id),
            "job_type": self.job_type,
            "queue": self.queue,
            "state": self.state.value,
            "attempts": [a.to_json() for a in self.attempts],
            "error": self.error,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }
        if with_result:
            data["result"] = self.result
        return data


class JobEvent(NamedTuple):
    """One thing that happened to a job, as a store is told it (in batches).

    A named tuple, not a frozen dataclass: a worker that records makes two for every job,
    and a frozen dataclass costs four times as much to build (a setattr per field).

    ``state`` is where the job is after it. A RUNNING event opens an attempt (with
    ``attempt``, ``host``, ``pid``); the events after it close the attempt that the same
    host and pid opened last. ``result`` is JSON text already (checked against the size
    limit by whoever made the event). ``at`` and ``enqueued_at`` are ms since the epoch.
    """

    job_id: uuid.UUID
    job_type: str
    queue: str
    state: JobState
    at: int
    enqueued_at: int
    attempt: int = 0
    host: str = ""
    pid: int = 0
    error: str = ""
    result: str | None = None
    ran: bool = True
    """Whether an attempt ended with this event (False: a dead letter before any run, a
    cancel before the start)."""
