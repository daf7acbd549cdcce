"""How a RabbitMQBackend's connections reach the broker: nodes, parameters, names.

Owns: the node list (:mod:`.nodes`), each connection's pika parameters (heartbeat,
timeouts, TLS, the name the management UI shows) and the arguments every link of the
backend is made with. Must never: let a URL's password into an error (it is redacted),
or accept an SSL context for a plain ``amqp://`` URL.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import pika

from queuey_core._version import __version__
from queuey_core.backends.rabbitmq.nodes import Nodes, Picker, as_urls
from queuey_core.errors import ConfigError
from queuey_core.urls import redact


class ConnectionPlan:
    """The broker's nodes and how to connect to them, for every connection of a backend.

    See :class:`~queuey_core.backends.rabbitmq.RabbitMQBackend` for the arguments.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        heartbeat: int,
        connect_timeout: float,
        recovery_timeout: float,
        publish_timeout: float,
        ssl_context: ssl.SSLContext | None,
        server_name: str | None,
        shuffle: bool,
    ) -> None:
        self.urls = as_urls(url)
        self._nodes = Nodes(self.urls, shuffle=shuffle)
        #: The broker as shown in messages: redacted URLs.
        self.where = self._nodes.where
        self.heartbeat = heartbeat
        self.connect_timeout = connect_timeout
        self.recovery_timeout = recovery_timeout
        self._publish_timeout = publish_timeout
        self._ssl_context = ssl_context
        self._server_name = server_name

    def picker(self, role: str, *, blocked_timeout: bool = True) -> Picker:
        """A connection's way through the nodes, with its parameters for each node.

        Without ``blocked_timeout``, a connection blocked by the broker (an alarm) is held
        rather than torn down after a while: the caller's deadline bounds its waits.
        Raises ConfigError for a URL that is not a valid AMQP URL.
        """
        return self._nodes.picker(lambda url: self._params_for(url, role, blocked_timeout))

    def link_args(self, role: str, *, blocked_timeout: bool = True) -> dict[str, Any]:
        """The keyword arguments of a :class:`~.link.Link` of this backend in ``role``."""
        return {
            "nodes": self.picker(role, blocked_timeout=blocked_timeout),
            "name": role,
            "where": self.where,
            "connect_timeout": self.connect_timeout,
            "recovery_timeout": self.recovery_timeout,
        }

    def _params_for(self, url: str, role: str, blocked_timeout: bool) -> pika.ConnectionParameters:
        try:
            params = pika.URLParameters(url)
        except Exception as exc:
            # The message of a URL error may quote the URL: keep the password out.
            raise ConfigError(f"invalid broker URL {redact(url)!r}") from exc
        params.heartbeat = self.heartbeat
        if blocked_timeout:
            params.blocked_connection_timeout = max(self._publish_timeout, 30.0)
        params.connection_attempts = 1
        params.socket_timeout = self.connect_timeout
        params.client_properties = {"connection_name": f"queuey {role} {whoami()}"}
        if params.ssl_options is not None:  # amqps://
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            # pika's own default names no server, and a verifying context needs one.
            params.ssl_options = pika.SSLOptions(
                self._ssl_context, self._server_name or params.host
            )
        elif self._ssl_context is not None:
            raise ConfigError(
                f"an SSL context was given for {redact(url)!r}: TLS needs an amqps:// URL"
            )
        return params


def whoami() -> str:
    """Who opens a connection, for the management UI: the machine, the process (read
    at each call: a forked child is another process), the version."""
    return f"host={socket.gethostname()} pid={os.getpid()} v={__version__}"
