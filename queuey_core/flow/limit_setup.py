"""Limits from the settings: the book of ``[limits.NAME]`` and the store their state
lives in, or a refusal at start.

Where the state lives follows the backend: the in-memory backend keeps it in process;
the embedded backend in its own file; RabbitMQ in the store ``[results] url`` names (a
SQLite file or a PostgreSQL schema). RabbitMQ without one is refused with one line
saying what to add: limits are never silently kept per process, where each worker would
allow the whole limit.

Owns: that choice, :func:`limit_book`, :func:`limit_state_for` and
:func:`limit_gate_for`. Must never: open a store when no limit is declared (a worker
without limits pays nothing for them).
"""

from __future__ import annotations

from collections.abc import Iterable

from queuey_core.clock import Clock, SystemClock
from queuey_core.errors import ConfigError
from queuey_core.flow.limit_gate import LimitGate
from queuey_core.flow.limit_spec import LimitBook, class_tables, spec_from_table
from queuey_core.flow.limit_state import LimitState
from queuey_core.jobs import Job
from queuey_core.settings import Settings

#: The one line a worker or ``queuey limits`` prints for limits on RabbitMQ without a
#: place to keep their state.
NO_LIMIT_STORE = (
    "[limits] on RabbitMQ need a place to keep their state shared by every worker: set "
    '[results] url in queuey.toml, e.g. url = "sqlite:///queuey-state.db" or '
    '"postgresql://user@host/db"'
)


def limit_book(settings: Settings, job_types: Iterable[type[Job]] = ()) -> LimitBook:
    """The limits ``settings`` declare, and those ``job_types`` declare on their class
    (``Job.LIMITS``); empty if none.

    Raises:
        ConfigError: a limit that cannot work (one line naming it), or a name declared
            both in the configuration and on a job class.
    """
    tables = {name: table.model_dump(exclude_none=True) for name, table in settings.limits.items()}
    declared = class_tables((job.NAME, job.LIMITS) for job in job_types if job.LIMITS)
    for name, table in declared.items():
        if name in tables:
            raise ConfigError(
                f"limit {name!r} is declared both in [limits.{name}] and on job type "
                f"{table['jobs'][0]!r}: give one of them another name"
            )
        tables[name] = table
    return LimitBook(spec_from_table(name, table) for name, table in tables.items())


def state_url(settings: Settings) -> str:
    """The URL of the store that keeps limits' state for ``settings``' backend
    (``memory:`` for the in-memory backend).

    Raises:
        ConfigError: RabbitMQ without ``[results] url`` (:data:`NO_LIMIT_STORE`), or a
            ``memory://`` job store (it would be one per process).
    """
    broker = settings.broker.urls()[0]
    if broker.lower().startswith("memory:"):
        return "memory:"
    if settings.broker.is_embedded():
        return broker.split("?", 1)[0]
    url = settings.results.url.get_secret_value() if settings.results.url else None
    if url is None or url.lower().startswith("memory:"):
        raise ConfigError(NO_LIMIT_STORE)
    return url


def check_limits(settings: Settings, job_types: Iterable[type[Job]] = ()) -> None:
    """Refuse at start limits that cannot work, or that have no place to keep their
    state (one line: :class:`~queuey_core.errors.ConfigError`); nothing is opened."""
    book = limit_book(settings, job_types)
    if book:
        book.check_known((job.NAME for job in job_types), settings.queues)
        state_url(settings)


def limit_state_for(url: str, book: LimitBook) -> LimitState:
    """The limits' state in the store ``url`` names (see :func:`state_url`).

    Raises:
        LimitStateError: the store cannot be reached.
    """
    # Imported here: only a process with limits opens their store.
    from queuey_core.flow import limit_stores  # noqa: PLC0415

    lowered = url.lower()
    if lowered.startswith("memory:"):
        return LimitState(limit_stores.in_process(), book)
    if lowered.startswith("sqlite:"):
        return LimitState(limit_stores.sqlite_file(url), book)
    return LimitState(limit_stores.postgres(url), book)


def limit_gate_for(
    settings: Settings,
    *,
    job_types: Iterable[type[Job]],
    clock: Clock | None = None,
) -> LimitGate | None:
    """The worker's gate for the limits ``settings`` and ``job_types`` declare; None
    when there are none.

    Args:
        job_types: the job classes the worker's application knows, with their
            ``LIMITS`` (a limit naming another job type is refused: a typo would leave
            its jobs unlimited).

    Raises:
        ConfigError: a bad limit, or no place to keep their state.
        LimitStateError: that place cannot be reached at start.
    """
    job_types = list(job_types)
    book = limit_book(settings, job_types)
    if not book:
        return None
    book.check_known((job.NAME for job in job_types), settings.queues)
    state = limit_state_for(state_url(settings), book)
    return LimitGate(book, state, clock=clock or SystemClock())
