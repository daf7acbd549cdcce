"""Opening the backend a broker URL names: the one place that maps a scheme to a backend.

Owns: :data:`OPENERS`, the URL schemes queuey knows and the module that opens each,
and :func:`open_backend`. Each module is imported only when its scheme is used, so a
command that needs no broker (or one on another backend) never imports pika.

Adding a backend is one line here: ``"scheme": "package.module"``, where the module has
``open_from_settings(broker: BrokerSettings) -> Backend`` (see ``docs/backends.md``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from queuey_core.errors import ConfigError

if TYPE_CHECKING:
    from queuey_core.backends.base import Backend
    from queuey_core.settings import BrokerSettings

#: URL scheme -> the module whose ``open_from_settings`` opens a backend for it.
OPENERS: dict[str, str] = {
    "amqp": "queuey_core.backends.rabbitmq.opening",
    "amqps": "queuey_core.backends.rabbitmq.opening",
    "sqlite": "queuey_core.backends.sqlite.opening",
}


def open_backend(broker: BrokerSettings) -> Backend:
    """The backend for ``broker``'s URL (its scheme chooses), connected and ready.

    Raises:
        ConfigError: a scheme no backend knows, or URLs of different schemes.
        BackendError: the broker cannot be reached.
    """
    schemes = {url.partition("://")[0].lower() for url in broker.urls()}
    if len(schemes) != 1:
        raise ConfigError(f"the broker URLs mix schemes ({', '.join(sorted(schemes))})")
    scheme = schemes.pop()
    module = OPENERS.get(scheme)
    if module is None:
        known = ", ".join(f"{name}://" for name in sorted(OPENERS))
        raise ConfigError(f"no backend for broker URLs starting {scheme}:// (known: {known})")
    opener = cast(
        "Callable[[BrokerSettings], Backend]",
        importlib.import_module(module).open_from_settings,
    )
    return opener(broker)
