"""The job store in memory (``memory://NAME``): one process, for tests and demos.

Owns: the stores by name, so that a worker and a reader of one process that open the
same URL share one store. It is the SQLite store on an in-memory database: one set of
rules for every store.
"""

from __future__ import annotations

import threading

from queuey_core.results.sqlite_store import SqliteJobStore
from queuey_core.results.store import DEFAULT_RETENTION

_stores: dict[str, SqliteJobStore] = {}
_lock = threading.Lock()


def open_store(url: str, *, retention: float = DEFAULT_RETENTION) -> SqliteJobStore:
    """The in-memory store named by ``url`` (``memory://`` alone is the name ""), made on
    first use and kept for the life of the process (closing it forgets it)."""
    name = url.partition("://")[2]
    with _lock:
        store = _stores.get(name)
        if store is None or store.closed:
            store = _stores[name] = SqliteJobStore(":memory:", retention=retention)
        return store
