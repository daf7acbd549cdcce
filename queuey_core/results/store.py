"""The job store's seam: :class:`JobStore`, and :func:`open_job_store`, which picks a
store by the URL's scheme (as :mod:`queuey_core.backends.open` picks a backend).

Stores: ``sqlite:///path`` (:mod:`.sqlite_store`: the embedded backend's file, or any
file), ``postgresql://...`` (:mod:`.postgres_store`, the ``postgres`` extra) and
``memory://`` (:mod:`.memory_store`: one process, tests and demos). Each module is
imported only when its scheme is used. A store expires its own records (every so many
writes, records untouched for ``retention`` seconds go): no separate process.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, cast, runtime_checkable

from queuey_core.errors import ConfigError
from queuey_core.results.records import JobEvent, JobRecord, JobState

#: Default retention: records untouched for 7 days are deleted.
DEFAULT_RETENTION = 7 * 24 * 3600.0

#: URL scheme -> the module whose ``open_store(url, retention=...)`` opens a store.
STORES: dict[str, str] = {
    "sqlite": "queuey_core.results.sqlite_store",
    "postgresql": "queuey_core.results.postgres_store",
    "postgres": "queuey_core.results.postgres_store",
    "memory": "queuey_core.results.memory_store",
}


@runtime_checkable
class JobStore(Protocol):
    """Where job records live. Safe to call from several threads."""

    def get(self, job_id: uuid.UUID | str) -> JobRecord | None:
        """The record of ``job_id``, or None when the store does not know it (never
        recorded, or expired)."""

    def search(
        self,
        *,
        state: JobState | None = None,
        job_type: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[JobRecord]:
        """Records matching every filter given, most recently updated first.

        ``since`` / ``until`` bound the last update (inclusive / exclusive).
        """

    def write(self, events: Sequence[JobEvent]) -> None:
        """Apply ``events`` in order, in one transaction when the store has them.

        Raises:
            JobStoreError: the store refused or could not be reached; nothing of the
                batch may be assumed written.
        """

    def close(self) -> None:
        """Release the store's connections; idempotent."""


def open_job_store(url: str, *, retention: float = DEFAULT_RETENTION) -> JobStore:
    """The store ``url`` names, open and with its tables made.

    Raises:
        ConfigError: a scheme no store knows, or a store whose extra is not installed.
        JobStoreError: the store cannot be reached or refuses the tables.
    """
    scheme = url.partition("://")[0].lower()
    module = STORES.get(scheme)
    if module is None or "://" not in url:
        known = ", ".join(sorted({f"{name}://" for name in STORES}))
        raise ConfigError(f"no job store for URLs starting {scheme}:// (known: {known})")
    opener = cast("Callable[..., JobStore]", importlib.import_module(module).open_store)
    return opener(url, retention=retention)
