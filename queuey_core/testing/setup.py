"""What a :class:`~queuey_core.testing.QueueyKit` is set up from: its handlers (given,
or modules of them) and its queue set, and the hook that tells it its worker consumes.

Owns: turning the kit's arguments into a worker's. Must never: open a backend.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterable
from pathlib import Path

from queuey_core.errors import KitError
from queuey_core.handlers import Handler, JobHandler
from queuey_core.queues import QueueConfig, QueueSet
from queuey_core.settings import Settings, find_config, load_settings
from queuey_core.testing.gate import GateState
from queuey_core.worker import WorkerHooks
from queuey_core.worker.running import RunningWorker


def read_settings(config: str | Path | None) -> Settings | None:
    """The settings of ``config`` (or of ./queuey.toml or ``$QUEUEY_CONFIG``), if there
    is one to read.

    Raises:
        ConfigError: a config that cannot be read (one line).
    """
    if config is not None or find_config(None):
        return load_settings(config)[0]
    return None


def queue_set(
    queues: QueueSet | Iterable[QueueConfig] | None,
    settings: Settings | None,
    handlers: list[JobHandler],
) -> QueueSet:
    """The kit's queue set: ``queues``, else the config's (``settings``), else a queue
    with default settings for each queue the handlers name."""
    if isinstance(queues, QueueSet):
        return queues
    if queues is not None:
        return QueueSet(queues)
    if settings is not None:
        return settings.queue_set()
    names = sorted({h.job_type.QUEUE for h in handlers})
    if not names:
        raise KitError("no handler to run: give handlers=, or install a handler package")
    return QueueSet(QueueConfig(name) for name in names)


def handlers_from(items: Iterable[object]) -> list[JobHandler]:
    """The handlers ``items`` give: each a handler, or a module (its top-level handlers).

    Raises:
        KitError: an item is neither.
    """
    found: list[JobHandler] = []
    for item in items:
        if isinstance(item, types.ModuleType):
            found += [v for v in vars(item).values() if isinstance(v, Handler)]
        elif isinstance(item, JobHandler):
            found.append(item)
        else:
            raise KitError(f"{item!r} is neither a handler nor a module of handlers")
    return found


class Consuming(WorkerHooks):
    """Sets ``event`` once the worker consumes (the kit waits for it before a test runs),
    and wakes whoever waits at ``gate`` (set once the backend is open)."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event
        self.gate: GateState | None = None

    def on_worker_consuming(self, worker: RunningWorker) -> None:
        """See :meth:`WorkerHooks.on_worker_consuming`."""
        self._event.set()
        if self.gate is not None:
            self.gate.poke()
