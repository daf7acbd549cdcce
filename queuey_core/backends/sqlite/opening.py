"""Opening a SqliteBackend from ``[broker]`` settings (``sqlite:///path``).

Owns: which settings become the backend's arguments (the URL says everything: the
file, and its lease, poll and busy timeout). Reached through
:func:`queuey_core.backends.open.open_backend`, which imports it only for a sqlite URL.
"""

from __future__ import annotations

from queuey_core.backends.sqlite.backend import SqliteBackend
from queuey_core.settings import BrokerSettings


def open_from_settings(broker: BrokerSettings) -> SqliteBackend:
    """The embedded backend on the file ``broker``'s URL names."""
    return SqliteBackend(broker.url.get_secret_value())
