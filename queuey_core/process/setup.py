"""What a queuey process is built from: the backend its settings name, and the handlers
its plugins register."""

from __future__ import annotations

from typing import Any

from queuey_core.handlers import check_queues, discover
from queuey_core.queues import QueueSet
from queuey_core.settings import Settings


def backend_for(settings: Settings) -> Any:
    """A RabbitMQ backend for ``settings`` (pika is imported only now)."""
    # Imported here: `queuey handlers` and `config show` should not pay for pika.
    from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

    return RabbitMQBackend(
        settings.broker.urls(),
        heartbeat=settings.broker.heartbeat,
        connect_timeout=settings.broker.connect_timeout,
        recovery_timeout=settings.broker.recovery_timeout,
        publish_timeout=settings.broker.publish_timeout,
        ssl_context=settings.broker.ssl_context(),
        server_name=settings.broker.tls.server_name,
    )


def plugin_handlers(queues: QueueSet) -> list[Any]:
    """The handlers plugins register (entry points), checked against ``queues``.

    Raises:
        ConfigError: a handler bound to a queue ``queues`` does not declare, or two
            handlers of one job type.
    """
    found = discover()
    check_queues(found, queues)
    return [d.handler for d in found]
