"""The embedded backend: queuey on a SQLite file (``sqlite:///path``), no server.

See :mod:`.backend` for how it works and docs/embedded.md for how to use it. The
modules, one duty each: :mod:`.options` (the URL), :mod:`.schema` (the tables),
:mod:`.database` (the connection, transactions and errors), :mod:`.messages` and
:mod:`.dead` (the SQL of jobs and dead letters), :mod:`.writes` (multi-statement
writes), :mod:`.consumer` (subscriptions and deliveries), :mod:`.pump` (the thread),
:mod:`.control` (``queuey workers``) and :mod:`.schedules` (the scheduler's state and
election). The backend is imported on first use: the settings read the URL through
:mod:`.options` alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.backends.sqlite.options import SqliteOptions, is_sqlite_url, parse_url

if TYPE_CHECKING:
    from queuey_core.backends.sqlite.backend import SqliteBackend

__getattr__ = lazy_exports(__name__, {"SqliteBackend": "queuey_core.backends.sqlite.backend"})

__all__ = ["SqliteBackend", "SqliteOptions", "is_sqlite_url", "parse_url"]
