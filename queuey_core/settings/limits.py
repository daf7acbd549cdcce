"""One ``[limits.NAME]`` table: a rate or concurrency limit (``docs/flow-control.md``).

Owns: the table's keys and their types, and the rate's spelling checked where it is
read. Whether a limit makes sense as a whole (something to limit, something it binds)
is :func:`queuey_core.flow.limit_spec.spec_from_table`'s, at the worker's start.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from queuey_core.flow.limit_spec import parse_rate
from queuey_core.settings.sections import _Section


class LimitSettings(_Section):
    """``[limits.NAME]``: ``rate = "20/s"`` (with ``burst``), ``concurrency = 3``, the
    payload field ``key`` it is counted per, and the ``jobs`` or ``queues`` it binds."""

    rate: str | None = None
    burst: int = Field(default=0, ge=0)
    concurrency: int | None = Field(default=None, ge=1)
    key: str | None = Field(default=None, min_length=1)
    jobs: list[str] = Field(default_factory=list)
    queues: list[str] = Field(default_factory=list)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)  # ValueError with the spelling to use
        return value
