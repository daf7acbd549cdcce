"""Everything queuey raises, in one tree.

::

    QueueyError                       anything the library raises on its own account
    ├── ConfigError                   a queue set, policy or worker option that cannot work
    │   ├── UnknownQueueError         a job bound to a queue the queue set does not declare
    │   ├── InvalidPriorityError      a priority the job's queue cannot hold
    │   └── DuplicateHandlerError     two handlers for one job type
    ├── DecodeError                   bytes or a payload that are not a valid envelope / job
    ├── BackendError                  the broker refused, or could not be reached
    │   ├── UnroutableError           a publish the broker could not route or refused
    │   └── ConsumerStoppedError      a consumer ended without being asked to

    JobError                          control-flow signals a handler raises (not failures
    ├── Retryable                     of queuey): transient failure, consult the retry policy
    ├── Fatal                         permanent failure, dead-letter at once
    └── Deferred                      not a failure: run again later, attempt unchanged

    JobTimeout (BaseException)        raised asynchronously inside a handler's thread when
                                      the job outlives its timeout; a BaseException so that a
                                      handler's ``except Exception`` cannot swallow it

Any other exception escaping a handler is treated like ``Retryable``.
"""

from __future__ import annotations

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


class UnroutableError(BackendError):
    """The broker could not route a publish (no such queue) or refused it."""


class ConsumerStoppedError(BackendError):
    """A consumer ended on its own: the backend closed or the broker went away."""

    def __init__(self, queue: str, detail: str = "") -> None:
        self.queue = queue
        super().__init__(f"consumer of queue {queue!r} stopped" + (f": {detail}" if detail else ""))


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


class JobTimeout(BaseException):
    """Raised inside a handler's thread when its job outlives the job timeout.

    Deliberately not an ``Exception``: a handler's broad ``except Exception`` must not
    swallow it. ``finally`` blocks and context managers still run.
    """
