"""What a queuey process is built from: the backend its settings name, and the handlers
its plugins register."""

from __future__ import annotations

from typing import Any

from queuey_core.backends.open import open_backend
from queuey_core.handlers import check_queues, discover
from queuey_core.queues import QueueSet
from queuey_core.results.setup import with_dead_letter_store
from queuey_core.settings import Settings


def backend_for(settings: Settings) -> Any:
    """The backend ``settings`` name (pika is imported only now, for an AMQP URL), with
    its dead letters in the job store when one is configured."""
    return with_dead_letter_store(open_backend(settings.broker), settings)


def plugin_handlers(queues: QueueSet) -> list[Any]:
    """The handlers plugins register (entry points), checked against ``queues``.

    Raises:
        ConfigError: a handler bound to a queue ``queues`` does not declare, or two
            handlers of one job type.
    """
    found = discover()
    check_queues(found, queues)
    return [d.handler for d in found]
