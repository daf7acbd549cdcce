"""queuey: typed background jobs for Python on RabbitMQ."""

from __future__ import annotations

from queuey_core.backends.base import Backend, ConsumerEnded, DeadLetter, Delivery, Subscription
from queuey_core.backends.memory import MemoryBackend
from queuey_core.clock import Clock, ManualClock, SystemClock
from queuey_core.context import JobContext
from queuey_core.envelope import Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    ConsumerStoppedError,
    DecodeError,
    Deferred,
    DuplicateHandlerError,
    Fatal,
    InvalidPriorityError,
    JobError,
    JobTimeout,
    QueueyError,
    Retryable,
    UnknownQueueError,
    UnroutableError,
)
from queuey_core.handlers import Handler, JobHandler, handler
from queuey_core.jobs import Job
from queuey_core.producer import Producer
from queuey_core.queues import QueueConfig, QueueKind, QueueSet
from queuey_core.retry import Backoff, BackoffKind, GiveUp, Retry, RetryDecision, RetryPolicy
from queuey_core.schedules import CatchUp, Cron, Every, Schedule, Scheduler
from queuey_core.worker import Worker, WorkerHandle

__version__ = "0.1.0"

__all__ = [
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
    "DecodeError",
    "Deferred",
    "Delivery",
    "DuplicateHandlerError",
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
    "JobTimeout",
    "ManualClock",
    "MemoryBackend",
    "Producer",
    "QueueConfig",
    "QueueKind",
    "QueueSet",
    "QueueyError",
    "Retry",
    "RetryDecision",
    "RetryPolicy",
    "Retryable",
    "Schedule",
    "Scheduler",
    "Subscription",
    "SystemClock",
    "UnknownQueueError",
    "UnroutableError",
    "Worker",
    "WorkerHandle",
    "__version__",
    "handler",
]
