"""The job store of a process, from the settings: what ``queuey worker`` records into
and what the commands read.

Owns: :func:`results_url` (which store applies), :func:`recorder_for` (the worker's
:class:`~.recording.JobRecorder`, or None), :func:`store_for` (an open store, or a
ConfigError with the one line that says how to configure one) and
:func:`with_dead_letter_store` (a RabbitMQ backend keeping its dead letters there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from queuey_core.backends.capabilities import KeepsDeadLettersInStore
from queuey_core.errors import ConfigError
from queuey_core.results.store import JobStore, open_job_store
from queuey_core.settings import NO_STORE, Settings

if TYPE_CHECKING:
    from queuey_core.results.recording import JobRecorder

T = TypeVar("T")


def results_url(settings: Settings) -> str | None:
    """The job store ``settings`` name: ``[results] url``, else the broker's file on the
    embedded backend; None when recording is off or no store is configured."""
    results = settings.results
    if not results.enabled:
        return None
    if results.url is not None:
        return results.url.get_secret_value()
    if settings.broker.is_embedded():
        return settings.broker.urls()[0].split("?", 1)[0]
    return None


def recorder_for(settings: Settings) -> JobRecorder | None:
    """The recorder of a worker run with ``settings``; None when no store is configured.

    The store is opened by the recorder's writer, not here: a store that is down does
    not keep the worker from starting (its events are counted as unrecorded until it
    is back). ``[results] writer`` says whether that writer is a thread of the worker or
    a process of its own (``auto``: a process for PostgreSQL).
    """
    url = results_url(settings)
    if url is None:
        return None
    # Imported here: a worker without a store (RabbitMQ's default) never loads it.
    from queuey_core.results.recording import JobRecorder  # noqa: PLC0415
    from queuey_core.results.writer_process import WriterProcess  # noqa: PLC0415

    results = settings.results
    writer = results.writer
    if writer == "auto":
        writer = "process" if url.lower().startswith("postgres") else "thread"
    store: WriterProcess | Callable[[], JobStore] = (
        WriterProcess(url, retention=results.retention)
        if writer == "process"
        else functools.partial(open_job_store, url, retention=results.retention)
    )
    return JobRecorder(store, max_result_size=results.max_result_size)


def store_for(settings: Settings) -> JobStore:
    """The job store ``settings`` name, open.

    Raises:
        ConfigError: none is configured (:data:`~queuey_core.settings.NO_STORE`).
        JobStoreError: it cannot be reached.
    """
    url = results_url(settings)
    if url is None:
        raise ConfigError(NO_STORE)
    return open_job_store(url, retention=settings.results.retention)


def with_dead_letter_store(backend: T, settings: Settings) -> T:
    """``backend``, keeping its dead letters in the job store ``settings`` name when it
    can (RabbitMQ with ``[results] url`` set: ``docs/dead-letters.md``); else as it is.

    The store is connected on first use: a store that is down does not keep a worker
    from starting (its dead letters go to ``<queue>.dlq`` meanwhile).
    """
    if not isinstance(backend, KeepsDeadLettersInStore):
        return backend
    url = results_url(settings)
    if url is None or not url.lower().startswith(("sqlite:", "postgres")):
        return backend
    from queuey_core.results.dead_letter_table import open_dead_letter_table  # noqa: PLC0415

    backend.keep_dead_letters_in(open_dead_letter_table(url))
    return backend
