"""Unique jobs in a queuey process: where its keys are kept, from its settings.

Owns: :func:`unique_keys_for` (the backend's own, else the job store's table, else
None), :func:`open_key_table` (the keys a settings' producers keep, for an operator),
:func:`check_key_store` (the one line when the settings declare unique jobs and
name no place for their keys, before anything connects), :func:`unique_problem` (a key
naming a field the job's model lacks) and :func:`producer_options`.
Must never: let a process with unique jobs declared start without a place for their
keys (no silent per-process fallback).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from queuey_core.backends.capabilities import HoldsUniqueKeys
from queuey_core.errors import ConfigError
from queuey_core.flow.unique import Unique
from queuey_core.flow.unique_claims import NO_KEY_STORE
from queuey_core.flow.unique_keys import SqlUniqueKeys, UniqueKeys
from queuey_core.jobs import Job
from queuey_core.results.setup import results_url
from queuey_core.settings import Settings


def declared(settings: Settings) -> dict[str, Unique]:
    """The job types ``[unique.*]`` declares unique, by name."""
    return {name: table.declaration() for name, table in settings.unique.items()}


def unique_problem(job_type: type[Job], settings: Settings) -> str | None:
    """Why no job of ``job_type`` could make its key (a field of ``[unique.*]``'s or
    ``UNIQUE``'s key the model lacks), in one line; None when it can."""
    unique = declared(settings).get(job_type.NAME) or job_type.UNIQUE
    if unique is None or not isinstance(unique.key, tuple):
        return None
    missing = [f for f in unique.key if f not in job_type.model_fields]
    if not missing:
        return None
    return f"the unique key of {job_type.NAME!r} names {missing[0]!r}, which is not a field of it"


def check_key_store(settings: Settings) -> None:
    """ConfigError when ``[unique.*]`` declares unique jobs and the settings name no
    place for their keys (RabbitMQ without a SQL ``[results] url``): before connecting.
    """
    if settings.unique and not settings.broker.is_embedded() and _store_url(settings) is None:
        raise ConfigError(NO_KEY_STORE)


def _store_url(settings: Settings) -> str | None:
    """The SQL job store ``settings`` name (SQLite or PostgreSQL), or None."""
    url = results_url(settings)
    return url if url is not None and url.lower().startswith(("sqlite:", "postgres")) else None


def unique_keys_for(backend: Any, settings: Settings) -> UniqueKeys | None:
    """Where a process of ``settings`` on ``backend`` keeps unique keys: the backend's
    own (the file, the in-memory backend), else a table of the job store
    ``[results] url`` names (RabbitMQ), else None.

    Raises:
        ConfigError: ``[unique.*]`` declares unique jobs and there is nowhere to keep
            their keys.
    """
    if isinstance(backend, HoldsUniqueKeys):
        return backend.unique_keys()
    url = _store_url(settings)
    if url is not None:
        # On use: a worker without a store never loads the store's connections.
        from queuey_core.flow.unique_store import open_unique_keys  # noqa: PLC0415

        return open_unique_keys(url)
    check_key_store(settings)
    return None


def producer_options(backend: Any, settings: Settings) -> dict[str, Any]:
    """The keyword arguments of unique jobs for a ``Producer`` of ``settings`` on
    ``backend``: where its keys are kept, and ``[unique.*]``'s declarations.

    Raises:
        ConfigError: as :func:`unique_keys_for`.
    """
    return {"unique_keys": unique_keys_for(backend, settings), "unique": declared(settings)}


@contextlib.contextmanager
def open_key_table(settings: Settings) -> Iterator[UniqueKeys]:
    """The unique keys the producers of ``settings`` keep, open for this block
    (:func:`unique_keys_for`): in the embedded backend's file, or the table of the job
    store ``[results] url`` names (RabbitMQ, which it never connects to).

    Raises:
        ConfigError: no place keeps them (RabbitMQ without a SQL ``[results] url``).
        BackendError: the file cannot be opened.
    """
    from queuey_core.backends.open import open_backend  # noqa: PLC0415

    backend = open_backend(settings.broker) if settings.broker.is_embedded() else None
    try:
        keys = unique_keys_for(backend, settings)
        if keys is None:  # no unique job declared, and no store named either
            raise ConfigError(NO_KEY_STORE)
        try:
            yield keys
        finally:
            if isinstance(keys, SqlUniqueKeys):  # a job store's connections (the file's: none)
                keys.close()
    finally:
        if backend is not None:
            backend.close()
