"""The ``[results]`` section: where the job store is, how long it keeps records, and
how large a result may be.

On the embedded backend the store is on by default, in the broker's own file; on
RabbitMQ it is off until ``url`` is set (a ``sqlite:///`` file or a ``postgresql://``
server). :func:`queuey_core.results.setup.results_url` says which applies.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

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
    """Records (and cancels) untouched this long are deleted."""
    max_result_size: int = Field(default=64 * 1024, ge=0)
    """Bytes of JSON a result may take; a larger one is not kept (the record says so)."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().lower().startswith(_SCHEMES):
            raise ValueError(f"must start with one of {', '.join(_SCHEMES)}")
        return value
