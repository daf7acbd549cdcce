"""Unique jobs: what a job type declares, and the key a job holds.

Owns: :class:`Unique` (a job type's declaration: which arguments make the key, and for
how long the key is held), :func:`key_of` (the key: the job type and the canonical JSON
of the chosen arguments, hashed), the key a caller-chosen job id is (:func:`job_id_key`),
and :class:`UniqueMark`, what an envelope carries so that a worker releases the key
without knowing the job's class (protocol 1.3). The claiming is
:mod:`.unique_keys`; the producer's side :mod:`.unique_claims`; the worker's
:mod:`.unique_release`. Must never: import a backend, or make a key from anything but
the job type and the payload (two processes must compute the same key).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: Held until the job starts: a second enqueue is refused while the first waits.
QUEUED = "queued"
#: Held until the job's final outcome (success, dead letter, cancel): retries and
#: deferrals keep it.
QUEUED_OR_RUNNING = "queued_or_running"

#: When a key is let go: at the job's start, at its final outcome, or at a time.
Until = Literal["start", "end", "time"]

#: The longest a key of a timed period is held, in seconds (a year).
MAX_PERIOD = 365 * 86400.0


@dataclass(frozen=True, slots=True)
class Unique:
    """A job type's uniqueness: ``UNIQUE: ClassVar = Unique(key=("invoice_id",))``.

    Args:
        key: the payload's fields that make the key (None: every field), or a function
            of the payload (a dict, as JSON would carry it) returning the key's text:
            an explicit key.
        period: :data:`QUEUED` (``"queued"``), :data:`QUEUED_OR_RUNNING`, or a duration
            (seconds, or ``"10m"``): from the enqueue, whatever becomes of the job.

    Raises:
        ValueError: an empty ``key``, or a period that is none of these.
    """

    key: tuple[str, ...] | Callable[[Mapping[str, Any]], str] | None = None
    period: str | float = QUEUED

    def __post_init__(self) -> None:
        if isinstance(self.key, tuple | list):
            fields = tuple(self.key)
            if not fields or not all(isinstance(f, str) and f for f in fields):
                raise ValueError("a unique key names at least one field")
            object.__setattr__(self, "key", fields)
        elif self.key is not None and not callable(self.key):
            raise ValueError("a unique key is a tuple of field names, a function or None")
        if self.period in (QUEUED, QUEUED_OR_RUNNING):
            return
        # Here, not at the top: the settings import the envelope, which imports this.
        from queuey_core.settings.durations import duration  # noqa: PLC0415

        seconds = duration(self.period)  # ValueError for what is not a duration
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_PERIOD):
            raise ValueError(
                f"a unique period is {QUEUED!r}, {QUEUED_OR_RUNNING!r} or a duration of "
                f"at most a year, not {self.period!r}"
            )
        object.__setattr__(self, "period", seconds)

    @property
    def until(self) -> Until:
        """When the key is let go: ``start``, ``end`` or ``time``."""
        if self.period == QUEUED:
            return "start"
        if self.period == QUEUED_OR_RUNNING:
            return "end"
        return "time"

    @property
    def seconds(self) -> float | None:
        """The period in seconds, for a timed one; else None."""
        return self.period if isinstance(self.period, float) else None

    def mark(self, job_type: str, payload: Mapping[str, Any], enqueued_at: int) -> UniqueMark:
        """The mark of a job of ``job_type`` with ``payload`` enqueued at ``enqueued_at``
        (ms); ValueError for a payload that lacks a field of the key, or an explicit key
        that is not a string."""
        seconds = self.seconds
        return UniqueMark(
            key=key_of(self, job_type, payload),
            until=self.until,
            expires_at=None if seconds is None else enqueued_at + round(seconds * 1000),
        )


def key_of(unique: Unique, job_type: str, payload: Mapping[str, Any]) -> str:
    """The key of a job: SHA-256 of the canonical JSON of ``[job_type, chosen]``, in hex.

    ``chosen`` is the whole payload, the named fields (a missing one is a ValueError),
    or ``["key", text]`` for an explicit key. Canonical: keys sorted, no blanks, UTF-8,
    so that every producer, in any process, computes the same key.
    """
    chosen: Any
    if unique.key is None:
        chosen = dict(payload)
    elif isinstance(unique.key, tuple):
        missing = [f for f in unique.key if f not in payload]
        if missing:
            raise ValueError(f"the unique key's field {missing[0]!r} is not in the payload")
        chosen = {f: payload[f] for f in unique.key}
    else:
        text = unique.key(payload)
        if not isinstance(text, str):
            raise ValueError(f"an explicit unique key is a str, not {type(text).__name__}")
        chosen = ["key", text]
    canonical = json.dumps(
        [job_type, chosen], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def job_id_key(job_id: object) -> str:
    """The key a caller-chosen job id holds on a backend that keeps job ids unique."""
    return f"job-id:{job_id}"


class UniqueMark(BaseModel):
    """What an envelope carries of a key it holds: the key and when it is let go."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    key: str = Field(
        min_length=1,
        max_length=128,
        pattern="^[0-9A-Za-z:-]+$",
        description="The key the job holds (a SHA-256 in hex, or job-id:<job id>).",
    )
    until: Until = Field(
        description="When a worker lets the key go: 'start' (the job starts), 'end' (its "
        "final outcome: success, dead letter or cancel) or 'time' (never: it expires)."
    )
    expires_at: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda value: value is None,
        description="For 'time': when the key frees itself, ms since the Unix epoch.",
    )
