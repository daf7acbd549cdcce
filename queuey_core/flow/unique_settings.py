"""Unique jobs as ``queuey.toml`` declares them: :class:`UniqueSettings`, one
``[unique.<job type>]`` table (``key``, ``period``), checked when the file is read.

Owns: the table's fields. Must never: import the settings (they import this); what a
process makes of them is :mod:`.unique_setup`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from queuey_core.flow.unique import QUEUED, Unique


class UniqueSettings(BaseModel):
    """``[unique.invoice.send]``: ``key = ["invoice_id"]`` (omitted: every argument),
    ``period = "queued"`` (or ``"queued_or_running"``, or a duration like ``"10m"``)."""

    model_config = ConfigDict(extra="forbid")

    key: list[str] | None = Field(default=None, min_length=1)
    period: str | float = QUEUED

    @model_validator(mode="after")
    def _works(self) -> UniqueSettings:
        self.declaration()  # a bad period or key is reported when the file is read
        return self

    def declaration(self) -> Unique:
        """The :class:`Unique` this table declares."""
        return Unique(key=None if self.key is None else tuple(self.key), period=self.period)
