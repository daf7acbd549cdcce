"""Opening a RabbitMQBackend from ``[broker]`` settings (``amqp://`` and ``amqps://``).

Owns: which settings become which of the backend's arguments. Reached through
:func:`queuey_core.backends.open.open_backend`, which imports it only for an AMQP URL.
"""

from __future__ import annotations

from queuey_core.backends.rabbitmq.backend import RabbitMQBackend
from queuey_core.settings import BrokerSettings


def open_from_settings(broker: BrokerSettings) -> RabbitMQBackend:
    """A RabbitMQ backend for ``broker``: its URLs, timeouts and TLS."""
    return RabbitMQBackend(
        broker.urls(),
        heartbeat=broker.heartbeat,
        connect_timeout=broker.connect_timeout,
        recovery_timeout=broker.recovery_timeout,
        publish_timeout=broker.publish_timeout,
        ssl_context=broker.ssl_context(),
        server_name=broker.tls.server_name,
    )
