"""The ``[results]`` section: where the job store is, how long it keeps records, and
how large a result may be.

On the embedded backend the store is on by default, in the broker's own file; on
RabbitMQ it is off until ``url`` is set (a ``sqlite:///`` file or a ``postgresql://``
server). :func:`queuey_core.results.setup.results_url` says which applies.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from queuey_core.settings.durations import Duration
from queuey_core.settings.sections import _Section

#: The one line a command that needs a store prints when none is configured.
NO_STORE = (
    "no job store is configured: set [results] url in queuey.toml (or QUEUEY_RESULTS__URL), "
    'e.g. url = "sqlite:///jobs.db" or "postgresql://user@host/db"'
)

_SCHEMES = ("sqlite://", "postgresql://", "postgres://", "memory://")


class ResultsSettings(_Section):
    """``[results]``: the job store (``docs/results.md``)."""

    url: SecretStr | None = None
    """The store's URL; unset: the broker's file on the embedded backend, none on RabbitMQ."""
    enabled: bool = True
    """``false`` turns recording off even on the embedded backend."""
    retention: Duration = 7 * 24 * 3600.0
    """Records (and cancels, and finished workflows) untouched this long are deleted."""
    max_result_size: int = Field(default=64 * 1024, ge=0)
    """Bytes of JSON a result may take; a larger one is not kept (the record says so)."""
    writer: Literal["auto", "thread", "process"] = "auto"
    """Where a worker writes its records from: ``process`` (a child process of its own,
    which spares the worker's GIL the database driver's work), ``thread`` (a thread of
    the worker), ``auto`` (a process for PostgreSQL, a thread for a SQLite file: there
    the file's one write lock, not the GIL, is what recording costs)."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().lower().startswith(_SCHEMES):
            raise ValueError(f"must start with one of {', '.join(_SCHEMES)}")
        return value

    @model_validator(mode="after")
    def _process_needs_a_shared_store(self) -> ResultsSettings:
        url = self.url.get_secret_value().lower() if self.url is not None else ""
        if self.writer == "process" and url.startswith("memory://"):
            raise ValueError(
                "writer = 'process' cannot write to memory:// (a store inside the worker's "
                "own process): use writer = 'thread'"
            )
        return self
