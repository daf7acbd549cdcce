"""What a backend does differently on purpose, declared as data beside its capabilities.

A capability (:mod:`queuey_core.backends.capabilities`) is something a backend can be
asked to *do*: a Protocol of methods. A feature here is how it *behaves* where backends
differ on purpose, which no method tells: whether another process can reach its
queues, whose clock its delays follow, how a killed worker's jobs come back. Each
backend declares its :class:`Features` in a module of its own (``memory_features.py``,
``sqlite/features.py``, ``rabbitmq/features.py``) and carries them as the class
attribute ``features``, as Django's database backends carry ``features.py``.

:func:`supports` answers both kinds by name, so the contract suite (``tests/contract/``)
skips by what a backend declares, never by its name; :func:`feature_table` is the table
of docs/backends.md, which a test keeps equal to these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from queuey_core.backends.capabilities import (
    ConnectionReporting,
    DeadLetterTools,
    HoldsUniqueKeys,
    Inspectable,
    PublishesAhead,
    PublishesEncoded,
    Republishes,
    SupportsCancellation,
    SupportsControl,
    SupportsPause,
    SupportsSchedules,
)

#: Every capability of a backend class, by the name a feature check uses.
CAPABILITIES: dict[str, type] = {
    "dead_letter_tools": DeadLetterTools,
    "inspectable": Inspectable,
    "control": SupportsControl,
    "schedules": SupportsSchedules,
    "publishes_encoded": PublishesEncoded,
    "publishes_ahead": PublishesAhead,
    "republishes": Republishes,
    "connection_reporting": ConnectionReporting,
    "cancellation": SupportsCancellation,
    "pause": SupportsPause,
    "unique_keys": HoldsUniqueKeys,
}


def _feature(what: str) -> Any:
    """A declared flag; ``what`` completes "the backend ..." for docs and skip reasons."""
    return field(metadata={"what": what})


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """A backend's behaviours that differ on purpose; each flag says why in its docs."""

    #: Other processes (a second worker, ``queuey`` commands, a ``kill -9`` and a
    #: restart) see the same queues. The memory backend lives in one process's dict: it
    #: is for tests and demos, so it is not openable from a broker URL.
    across_processes: bool = _feature("shares its queues with other processes")
    #: Delays, deferrals and leases follow the :class:`~queuey_core.clock.Clock` the
    #: backend was given, so a test drives them with a ManualClock. RabbitMQ's delays are
    #: the broker's own TTLs (the delay ladder), in the broker's real time.
    follows_given_clock: bool = _feature("times delays by the clock it is given")
    #: A killed worker's jobs come back only when their leases expire (the embedded
    #: file: no connection tells the file that a process died), not at once. RabbitMQ
    #: gives them back as soon as the dead worker's connection closes.
    leases: bool = _feature("gives a killed worker's jobs back when their leases expire")
    #: Jobs' results and history are recorded without a ``[results]`` store: the
    #: embedded backend records in its own file. RabbitMQ keeps no such record, so it
    #: needs a store (SQLite or PostgreSQL) for ``queuey job`` and cancelling by store.
    store_built_in: bool = _feature("records results and history without a [results] store")
    #: A publish can end neither confirmed nor refused (``EnqueueUnknownError``): sent and
    #: not confirmed on RabbitMQ, a signal during the COMMIT on the embedded file. The
    #: memory backend's publish is a dict insert under a lock: it never can.
    uncertain_publish: bool = _feature("can end a publish unknown (EnqueueUnknownError)")


def declared_flags() -> dict[str, str]:
    """Each flag of :class:`Features` and what it means ("the backend ...")."""
    return {f.name: str(f.metadata["what"]) for f in fields(Features)}


def features_of(backend: object) -> Features:
    """The features ``backend`` (an instance or a class) declares.

    Raises:
        TypeError: the backend declares none.
    """
    kind = backend if isinstance(backend, type) else type(backend)
    declared = getattr(kind, "features", None)
    if not isinstance(declared, Features):
        raise TypeError(f"{kind.__name__} declares no Features (a `features` class attribute)")
    return declared


def supports(backend: object, feature: str) -> bool:
    """Whether ``backend`` (an instance or a class) has ``feature``: a declared flag of
    :class:`Features` or a capability of :data:`CAPABILITIES`, by name.

    Raises:
        KeyError: no flag or capability has that name.
    """
    capability = CAPABILITIES.get(feature)
    if capability is not None:
        # Declared by inheritance, as every backend declares a capability (a Protocol
        # with a property cannot be asked with issubclass).
        kind = backend if isinstance(backend, type) else type(backend)
        return capability in kind.__mro__
    if feature not in declared_flags():
        raise KeyError(f"no feature or capability named {feature!r}")
    return bool(getattr(features_of(backend), feature))


def feature_table(backends: dict[str, type]) -> str:
    """The Markdown table of every flag and capability (rows) of ``backends`` (columns,
    by name), as docs/backends.md shows it."""
    names = list(backends)
    lines = [
        "| feature | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    rows = [(f"`{name}`", name) for name in declared_flags()]
    rows += [(f"`{cap.__name__}`", name) for name, cap in CAPABILITIES.items()]
    for label, name in rows:
        cells = ["yes" if supports(backends[b], name) else "no" for b in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
