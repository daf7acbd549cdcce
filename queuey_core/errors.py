"""Everything queuey raises, in one tree.

::

    QueueyError                       anything the library raises on its own account
    ├── ConfigError                   a queue set, policy or worker option that cannot work
    │   ├── UnknownQueueError         a job bound to a queue the queue set does not declare
    │   ├── InvalidPriorityError      a priority the job's queue cannot hold
    │   └── DuplicateHandlerError     two handlers for one job type
    ├── DecodeError                   bytes or a payload that are not a valid envelope / job
    ├── BackendError                  the broker refused, or could not be reached
    │   ├── NotEnqueuedError          a publish that is surely not on the broker (refused,
    │   │   │                         nacked, unencodable, never sent): a retry is safe
    │   │   └── UnroutableError       a publish the broker could not route
    │   ├── EnqueueUnknownError       a publish that may or may not be on the broker (no
    │   │                             confirm in time, connection lost): a retry may duplicate
    │   ├── ConsumerStoppedError      a consumer ended without being asked to
    │   └── DeadLetterMoveError       a requeue of dead letters cut short: says what moved
    ├── MissingCapabilityError        the backend cannot do what was asked (dead-letter
    │                                 tools, inspection, control, schedules: see
    │                                 queuey_core.backends.capabilities)
    ├── DuplicateJobError             an enqueue refused: another job holds its unique key
    │                                 (nothing was published for it; the holder's id attached)
    ├── JobStoreError                 the job store refused, or could not be reached
    ├── LimitStateError               the store of rate and concurrency limits could not
    │                                 be reached (limited jobs wait: fail closed)
    ├── ResultTooLargeError           a handler's result over the [results] size limit
    ├── JobWaitTimeout                wait() gave up before the job finished
    ├── JobFailed                     wait(): the job ended without succeeding (its
    │                                 record and reason attached)
    └── KitError                      the testing kit (queuey_core.testing) could not do
                                      what a test asked: no such job waiting, a job held by
                                      a delay, a worker that never finished it

    JobError                          control-flow signals a handler raises (not failures
    ├── Retryable                     of queuey): transient failure, consult the retry policy
    ├── Fatal                         permanent failure, dead-letter at once
    ├── Deferred                      not a failure: run again later, attempt unchanged
    └── JobCancelled                  the job was cancelled (``queuey cancel``): stop here

    JobTimeout (BaseException)        raised asynchronously inside a handler's thread when
                                      the job outlives its timeout; a BaseException so that a
                                      handler's ``except Exception`` cannot swallow it

Any other exception escaping a handler is treated like ``Retryable``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from enum import StrEnum

from queuey_core.limits import check_delay


class QueueyError(Exception):
    """Base class of every error queuey raises on its own account."""


class ConfigError(QueueyError):
    """A queue set, retry policy, job binding or worker option that cannot work."""


class UnknownQueueError(ConfigError):
    """A job is bound to (or a command names) a queue the queue set does not declare."""

    def __init__(self, queue: str, known: list[str] | None = None) -> None:
        self.queue = queue
        hint = f" (declared: {', '.join(sorted(known))})" if known else ""
        super().__init__(f"unknown queue {queue!r}{hint}")


class InvalidPriorityError(ConfigError):
    """A priority outside what the job's queue supports."""

    def __init__(self, queue: str, priority: int, max_priority: int | None) -> None:
        self.queue = queue
        self.priority = priority
        self.max_priority = max_priority
        if max_priority is None:
            detail = "it is not a priority queue"
        else:
            detail = f"its maximum is {max_priority}"
        super().__init__(f"priority {priority} is not allowed on queue {queue!r}: {detail}")


class DuplicateHandlerError(ConfigError):
    """Two handlers were registered for the same job type."""

    def __init__(self, job_type: str, detail: str = "") -> None:
        self.job_type = job_type
        super().__init__(
            f"two handlers are registered for job type {job_type!r}"
            + (f": {detail}" if detail else "")
        )


class DecodeError(QueueyError):
    """Bytes that are not a valid envelope, or a payload that does not fit its job model."""


class BackendError(QueueyError):
    """The broker refused an operation or could not be reached."""


class PublishFailure(StrEnum):
    """Why a publish was not confirmed: what actually happened, for messages and metrics."""

    UNREACHABLE = "unreachable"  # the broker could not be reached (for recovery_timeout)
    LOST = "lost"  # the connection died with the message unconfirmed, not republished
    BLOCKED = "blocked"  # the broker blocks publishers (memory or disk alarm)
    NO_CONFIRM = "no confirm"  # the broker was up and did not confirm in publish_timeout
    REFUSED = "refused"  # the broker closed the channel on it (403, 404, 406)
    # The broker nacked it: its own state (a quorum queue electing a leader, an internal
    # error), never the message's content; sending it again later may well succeed.
    NACKED = "nacked"
    UNROUTABLE = "unroutable"  # no queue for its routing key
    UNENCODABLE = "unencodable"  # it could not be encoded into AMQP frames
    CLOSED = "closed"  # the backend was closed


class _PublishError(BackendError):
    """What a failed publish of one or many jobs knows about each job id.

    ``confirmed`` jobs are on the broker, ``not_enqueued`` ones surely are not, and
    ``unknown`` ones may or may not be. A single ``enqueue()`` has one id in one of the
    last two; a batch may have some of each.
    """

    default_reason = PublishFailure.REFUSED

    def __init__(
        self,
        message: str,
        *,
        reason: PublishFailure | None = None,
        confirmed: Iterable[uuid.UUID] = (),
        not_enqueued: Iterable[uuid.UUID] = (),
        unknown: Iterable[uuid.UUID] = (),
    ) -> None:
        super().__init__(message)
        self.reason = reason or self.default_reason
        self.with_jobs(confirmed=confirmed, not_enqueued=not_enqueued, unknown=unknown)

    def with_jobs(
        self,
        *,
        confirmed: Iterable[uuid.UUID] = (),
        not_enqueued: Iterable[uuid.UUID] = (),
        unknown: Iterable[uuid.UUID] = (),
    ) -> None:
        """Say which jobs this is about (the producer fills in what a backend left out)."""
        self.confirmed: tuple[uuid.UUID, ...] = tuple(confirmed)
        self.not_enqueued: tuple[uuid.UUID, ...] = tuple(not_enqueued)
        self.unknown: tuple[uuid.UUID, ...] = tuple(unknown)
        #: Jobs of the batch refused as duplicates (never sent): refused id -> holder's id.
        self.duplicates: dict[uuid.UUID, uuid.UUID] = {}

    @property
    def job_ids(self) -> tuple[uuid.UUID, ...]:
        """The jobs not confirmed: ``unknown`` ones, then ``not_enqueued`` ones."""
        return self.unknown + self.not_enqueued


class NotEnqueuedError(_PublishError):
    """The job was not enqueued: the broker refused it (nack, closed channel), could not
    route it, it could not be encoded, or it was never sent (unreachable broker, blocked
    publishers, closed backend). Publishing it again cannot make a duplicate.

    In a batch, ``not_enqueued`` lists those jobs, and ``confirmed`` the ones that made
    it; ``unknown`` is empty (otherwise the error is an :class:`EnqueueUnknownError`).
    """


class UnroutableError(NotEnqueuedError):
    """The broker could not route a publish (no such queue)."""

    default_reason = PublishFailure.UNROUTABLE


class EnqueueUnknownError(_PublishError):
    """The job may or may not be on the broker: it was sent, and no confirm came back in
    time (publishers blocked by an alarm, no answer within ``publish_timeout``), or the
    connection died with it unconfirmed and it could not be republished in time.

    Publishing it again may make a duplicate: give jobs a caller-chosen ``job_id`` so a
    duplicate carries the same id. In a batch, ``unknown`` lists those jobs (and
    ``not_enqueued`` / ``confirmed`` the others).
    """

    default_reason = PublishFailure.NO_CONFIRM


class ConsumerStoppedError(BackendError):
    """A consumer ended on its own: the backend closed or the broker went away."""

    def __init__(self, queue: str, detail: str = "") -> None:
        self.queue = queue
        super().__init__(f"consumer of queue {queue!r} stopped" + (f": {detail}" if detail else ""))


class DeadLetterMoveError(BackendError):
    """A requeue of dead letters stopped part way (connection lost, broker gone).

    ``moved`` dead letters are back on their queue and gone from the dead letters; the
    rest are still dead letters, in order. At most ``in_doubt`` more (0 or 1 on the
    backends here) may be on the queue *and* still among the dead letters: requeueing
    it again runs it twice.
    """

    def __init__(self, queue: str, moved: int, cause: str, *, in_doubt: int = 0) -> None:
        self.queue = queue
        self.moved = moved
        self.in_doubt = in_doubt
        doubt = f", {in_doubt} may be on both" if in_doubt else ""
        super().__init__(
            f"requeue of the dead letters of {queue!r} interrupted after {moved} moved"
            f"{doubt}: {cause}"
        )


class MissingCapabilityError(QueueyError):
    """The backend in use lacks a capability a command or feature needs.

    Raised by :func:`queuey_core.backends.capabilities.require`, with one line naming
    the backend, what it cannot do, and what needed it.
    """


class DuplicateJobError(QueueyError):
    """The fourth outcome of an enqueue: not enqueued, because another job holds its
    unique key (docs/flow-control.md, "Unique jobs"). Nothing was published for it, so
    this is not a failure to retry: the job that holds the key will run.

    ``job_id`` is the refused job's id and ``existing`` the holder's (the same id when a
    job id the caller chose is already enqueued). From a batch, ``duplicates`` maps every
    refused id to its holder and ``confirmed`` lists the jobs that were enqueued.
    """

    def __init__(
        self,
        duplicates: dict[uuid.UUID, uuid.UUID],
        *,
        confirmed: Iterable[uuid.UUID] = (),
    ) -> None:
        if not duplicates:
            raise ValueError("a DuplicateJobError names at least one duplicate")
        self.duplicates = dict(duplicates)
        self.confirmed: tuple[uuid.UUID, ...] = tuple(confirmed)
        self.job_id, self.existing = next(iter(self.duplicates.items()))
        more = f" (+{len(self.duplicates) - 1} more)" if len(self.duplicates) > 1 else ""
        super().__init__(f"job {self.job_id} is a duplicate of {self.existing}{more}")


class JobStoreError(QueueyError):
    """The job store refused an operation or could not be reached (one line, no secret)."""


class LimitStateError(QueueyError):
    """The store of rate and concurrency limits could not be reached (one line, no
    secret): a limited job waits rather than run outside its limit."""


class ResultTooLargeError(QueueyError):
    """A handler's result is larger than the ``[results] max_result_size`` allows."""


class JobWaitTimeout(QueueyError):
    """The job did not finish within the time ``wait()`` was given."""


class JobFailed(QueueyError):
    """The job ended without succeeding (dead-lettered or cancelled).

    ``record`` is its :class:`~queuey_core.results.JobRecord`; the message says its
    state and reason.
    """

    def __init__(self, message: str, record: object) -> None:
        super().__init__(message)
        self.record = record


class KitError(QueueyError):
    """The testing kit could not do what a test asked (see :mod:`queuey_core.testing`)."""


class JobError(Exception):
    """Base of the control-flow signals a handler raises to say how its job ended."""


class Retryable(JobError):
    """A transient failure: the retry policy decides between another attempt and a dead letter."""


class Fatal(JobError):
    """A permanent failure: the job is dead-lettered at once, whatever its retry policy."""


class Deferred(JobError):
    """Not a failure: run the job again after ``delay`` seconds, without spending an attempt.

    The job comes back at its queue's top priority, ahead of the backlog that built up
    while it waited. The retry policy is never consulted.

    Raises:
        ValueError: a delay that is negative, NaN, infinite or longer than the broker's
            delay ladder holds (:data:`queuey_core.limits.MAX_DELAY_SECONDS`).
    """

    def __init__(self, delay: float, reason: str = "deferred") -> None:
        # Refused here, in the handler's own frame, rather than when the worker settles
        # it: a delay the broker cannot hold would fail that settle on every redelivery.
        self.delay = check_delay(delay, "a deferral's delay")
        self.reason = reason
        super().__init__(f"deferred for {self.delay:g}s: {reason}")


class JobCancelled(JobError):
    """The job was cancelled while it ran: raised by ``ctx.raise_if_cancelled()``.

    A handler lets it through (or raises it itself): the job is settled as cancelled,
    never retried.
    """


class JobTimeout(BaseException):
    """Raised inside a handler's thread when its job outlives the job timeout.

    Deliberately not an ``Exception``: a handler's broad ``except Exception`` must not
    swallow it. ``finally`` blocks and context managers still run.
    """
