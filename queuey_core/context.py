"""What a handler is told about the job it runs."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

from queuey_core.errors import JobCancelled


@dataclass(frozen=True, slots=True)
class JobContext:
    """The identity and history of the running job, and its cancellation flag.

    ``cancelled`` is set when the job times out, the worker is forced to stop, or the
    job is cancelled (``queuey cancel``): a long handler should poll it (or wait on it
    with :meth:`wait`) and stop early, best with :meth:`raise_if_cancelled`.
    ``redelivered`` says the broker handed this very message out before and it was
    never settled (a lost connection, a worker that died): the job may have run, in
    part or in full, so an idempotent handler checks ``job_id`` before acting again.
    """

    job_id: uuid.UUID
    job_type: str
    queue: str
    attempt: int
    max_attempts: int
    deferrals: int
    priority: int
    age: float
    """Seconds since the job was first enqueued."""
    redelivered: bool = False
    cancel_event: threading.Event = field(default_factory=threading.Event, compare=False)

    def is_last_attempt(self) -> bool:
        """Whether a transient failure now dead-letters the job instead of retrying it."""
        return self.attempt >= self.max_attempts

    @property
    def cancelled(self) -> bool:
        """Whether the job has been asked to stop (timed out, or the worker is stopping)."""
        return self.cancel_event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on cancellation; True if cancelled."""
        return self.cancel_event.wait(seconds)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`~queuey_core.errors.JobCancelled` if the job was asked to stop.

        Let it through: a cancelled job is settled as cancelled (never retried); on a
        timeout or a forced stop it counts as a failure, as before.
        """
        if self.cancel_event.is_set():
            raise JobCancelled("cancelled while it ran")
