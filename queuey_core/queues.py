"""Queue configuration: what each queue is on the broker and how its jobs are retried."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from queuey_core.errors import ConfigError, UnknownQueueError
from queuey_core.limits import MAX_PRIORITY, MAX_QUEUE_NAME_BYTES
from queuey_core.retry import RetryPolicy

#: Queue names are dot-separated words of these characters: they travel as words of a
#: topic routing key through the delay ladder, where ``*`` and ``#`` are wildcards.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_:-]+(\.[A-Za-z0-9_:-]+)*")

#: RabbitMQ accepts ``x-max-priority`` from 1 to 255 (and advises a handful of levels).
MAX_PRIORITY_LIMIT = MAX_PRIORITY


class QueueKind(StrEnum):
    """What kind of queue the broker keeps."""

    CLASSIC = "classic"
    QUORUM = "quorum"


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One queue: its name, prefetch, priorities, retry policy and job timeout.

    ``max_priority`` of ``None`` means the queue has no priorities: every job on it runs
    at priority 0, and a deferral comes back at 0 too. ``job_timeout`` overrides the
    worker's for jobs of this queue. ``async_concurrency`` gives the queue's ``async
    def`` jobs a cap of their own (a thousand awaiting coroutines cost what ten threads
    do); without it they share the worker's. Set prefetch at least as high, or the
    broker never hands the worker that many.
    """

    name: str
    prefetch: int = 10
    max_priority: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    kind: QueueKind = QueueKind.CLASSIC
    job_timeout: float | None = None
    async_concurrency: int | None = None

    def __post_init__(self) -> None:
        # The name is ASCII, and rides behind the delay bits in a routing key.
        if len(self.name) > MAX_QUEUE_NAME_BYTES or not _QUEUE_NAME.fullmatch(self.name):
            raise ConfigError(
                f"queue name {self.name!r} must be dot-separated words of letters, digits, "
                f"'_', ':' or '-' (at most {MAX_QUEUE_NAME_BYTES} characters)"
            )
        if self.name.endswith(".dlq") or self.name.startswith("queuey."):
            raise ConfigError(f"queue name {self.name!r} is reserved for queuey's own queues")
        if self.prefetch < 0:
            raise ConfigError(f"queue {self.name!r}: prefetch cannot be negative")
        if self.max_priority is not None and not 1 <= self.max_priority <= MAX_PRIORITY_LIMIT:
            raise ConfigError(
                f"queue {self.name!r}: max_priority must be between 1 and {MAX_PRIORITY_LIMIT}"
            )
        if self.async_concurrency is not None and self.async_concurrency < 1:
            raise ConfigError(f"queue {self.name!r}: async_concurrency must be at least 1")
        if self.job_timeout is not None and not 0 < self.job_timeout < math.inf:
            raise ConfigError(f"queue {self.name!r}: job_timeout must be positive and finite")

    @property
    def top_priority(self) -> int:
        """The highest priority a job on this queue can have (0 without priorities)."""
        return self.max_priority or 0

    @property
    def dead_letter_queue(self) -> str:
        """Name of the queue that holds this queue's dead letters."""
        return f"{self.name}.dlq"


class QueueSet(Mapping[str, QueueConfig]):
    """The named collection of queues an application uses, in declaration order."""

    def __init__(self, queues: Iterable[QueueConfig]) -> None:
        self._queues: dict[str, QueueConfig] = {}
        for queue in queues:
            if queue.name in self._queues:
                raise ConfigError(f"queue {queue.name!r} is declared twice")
            self._queues[queue.name] = queue
        if not self._queues:
            raise ConfigError("a queue set needs at least one queue")

    def __getitem__(self, name: str) -> QueueConfig:
        try:
            return self._queues[name]
        except KeyError:
            raise UnknownQueueError(name, list(self._queues)) from None

    def __contains__(self, name: object) -> bool:
        # Mapping's default goes through __getitem__ and catches only KeyError.
        return name in self._queues

    def get(self, name: str, default: QueueConfig | None = None) -> QueueConfig | None:  # type: ignore[override]
        """The config of ``name``, or ``default``."""
        return self._queues.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def __repr__(self) -> str:
        return f"QueueSet({list(self._queues)})"

    def select(self, names: Iterable[str] | None) -> list[QueueConfig]:
        """The configs of ``names`` in the order given, duplicates collapsed; all if None."""
        if names is None:
            return list(self._queues.values())
        chosen: dict[str, QueueConfig] = {}
        for name in names:
            chosen.setdefault(name, self[name])
        if not chosen:
            raise ConfigError("no queues were chosen")
        return list(chosen.values())
