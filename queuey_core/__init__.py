"""queuey: typed background jobs for Python on RabbitMQ."""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core._version import __version__
from queuey_core.errors import (
    BackendError,
    ConfigError,
    ConsumerStoppedError,
    DeadLetterMoveError,
    DecodeError,
    Deferred,
    DuplicateHandlerError,
    DuplicateJobError,
    EnqueueUnknownError,
    Fatal,
    InvalidPriorityError,
    JobError,
    JobTimeout,
    MissingCapabilityError,
    NotEnqueuedError,
    PublishFailure,
    QueueyError,
    Retryable,
    UnknownQueueError,
    UnroutableError,
)

if TYPE_CHECKING:
    from queuey_core.aio import AsyncProducer
    from queuey_core.backends.base import Backend, ConsumerEnded, Delivery, Subscription
    from queuey_core.backends.capabilities import DeadLetter, DeadLetterPage, UndecodableDeadLetter
    from queuey_core.backends.memory import MemoryBackend
    from queuey_core.backends.rabbitmq import RabbitMQBackend
    from queuey_core.clock import Clock, ManualClock, SystemClock
    from queuey_core.context import JobContext
    from queuey_core.envelope import Envelope
    from queuey_core.flow.limit_spec import Limit
    from queuey_core.handlers import Handler, JobHandler, handler
    from queuey_core.jobs import Job
    from queuey_core.pending import PendingBatch
    from queuey_core.producer import Producer, job_id_for
    from queuey_core.queues import QueueConfig, QueueKind, QueueSet
    from queuey_core.retry import Backoff, BackoffKind, GiveUp, Retry, RetryDecision, RetryPolicy
    from queuey_core.schedules import CatchUp, Cron, Every, Schedule, Scheduler
    from queuey_core.worker import JobInfo, Worker, WorkerHandle, WorkerHooks


#: Imported on first use (only the errors are imported with the package): importing a
#: module of the package (``queuey_core.logs``, say) loads neither pydantic nor pika, so
#: the command line's ``--help`` does without them; a worker without schedules never
#: loads them (nor croniter), `queuey worker` neither the in-memory backend nor the
#: producer, and `import queuey_core` never pika (it comes with `RabbitMQBackend`).
_LAZY = {
    **dict.fromkeys(
        ("Backend", "ConsumerEnded", "Delivery", "Subscription"), "queuey_core.backends.base"
    ),
    **dict.fromkeys(
        ("DeadLetter", "DeadLetterPage", "UndecodableDeadLetter"),
        "queuey_core.backends.capabilities",
    ),
    **dict.fromkeys(("Clock", "ManualClock", "SystemClock"), "queuey_core.clock"),
    "JobContext": "queuey_core.context",
    "Envelope": "queuey_core.envelope",
    "Limit": "queuey_core.flow.limit_spec",
    **dict.fromkeys(("Handler", "JobHandler", "handler"), "queuey_core.handlers"),
    "Job": "queuey_core.jobs",
    **dict.fromkeys(("QueueConfig", "QueueKind", "QueueSet"), "queuey_core.queues"),
    **dict.fromkeys(
        ("Backoff", "BackoffKind", "GiveUp", "Retry", "RetryDecision", "RetryPolicy"),
        "queuey_core.retry",
    ),
    **dict.fromkeys(("JobInfo", "Worker", "WorkerHandle", "WorkerHooks"), "queuey_core.worker"),
    "AsyncProducer": "queuey_core.aio",
    **dict.fromkeys(("CatchUp", "Cron", "Every", "Schedule", "Scheduler"), "queuey_core.schedules"),
    "MemoryBackend": "queuey_core.backends.memory",
    "PendingBatch": "queuey_core.pending",
    "Producer": "queuey_core.producer",
    "RabbitMQBackend": "queuey_core.backends.rabbitmq",
    "job_id_for": "queuey_core.producer",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "AsyncProducer",
    "Backend",
    "BackendError",
    "Backoff",
    "BackoffKind",
    "CatchUp",
    "Clock",
    "ConfigError",
    "ConsumerEnded",
    "ConsumerStoppedError",
    "Cron",
    "DeadLetter",
    "DeadLetterMoveError",
    "DeadLetterPage",
    "DecodeError",
    "Deferred",
    "Delivery",
    "DuplicateHandlerError",
    "DuplicateJobError",
    "EnqueueUnknownError",
    "Envelope",
    "Every",
    "Fatal",
    "GiveUp",
    "Handler",
    "InvalidPriorityError",
    "Job",
    "JobContext",
    "JobError",
    "JobHandler",
    "JobInfo",
    "JobTimeout",
    "Limit",
    "ManualClock",
    "MemoryBackend",
    "MissingCapabilityError",
    "NotEnqueuedError",
    "PendingBatch",
    "Producer",
    "PublishFailure",
    "QueueConfig",
    "QueueKind",
    "QueueSet",
    "QueueyError",
    "RabbitMQBackend",
    "Retry",
    "RetryDecision",
    "RetryPolicy",
    "Retryable",
    "Schedule",
    "Scheduler",
    "Subscription",
    "SystemClock",
    "UndecodableDeadLetter",
    "UnknownQueueError",
    "UnroutableError",
    "Worker",
    "WorkerHandle",
    "WorkerHooks",
    "__version__",
    "handler",
    "job_id_for",
]
