"""Limit declarations: what ``[limits.NAME]`` says, checked, and which jobs each one binds.

A limit has a rate (``"20/s"``, ``"1000 per hour"``) with a burst, a concurrency (jobs
running at once), or both; it applies to job types (``jobs``) or to every job of some
queues (``queues``), and is counted per value of one payload field (``key``) or for all
its jobs together. :class:`LimitBook` answers, for a job type, which limits bind it:
once, at start-up, so that a job type with no limit costs the worker nothing per job.

Owns: parsing and checking declarations (one clear line per mistake), and
:func:`key_of` (a job's partition key). Must never: touch a store, or decide admission
(:mod:`.limit_state` does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from queuey_core.errors import ConfigError

_PERIODS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:/|per)\s*(\d+(?:\.\d+)?)?\s*([a-z]+?)s?\s*")
#: The longest a partition key may be once written as text (it is a key in a table).
MAX_KEY_CHARS = 200
#: Where a job with no value for the limit's key field is counted.
MISSING_KEY = ""


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` jobs per ``period`` seconds."""

    count: float
    period: float

    @property
    def interval_ms(self) -> float:
        """Milliseconds between two admissions at the steady rate."""
        return self.period * 1000 / self.count

    def __str__(self) -> str:
        return f"{self.count:g} per {self.period:g}s"


def parse_rate(text: str) -> Rate:
    """``"20/s"``, ``"20 per second"``, ``"1000 per hour"``, ``"5 per 10s"`` -> a Rate.

    Raises:
        ValueError: anything else, a count of 0, or a period of 0.
    """
    match = _RATE.fullmatch(text.lower()) if isinstance(text, str) else None
    unit = match.group(3) if match else None
    if match is None or unit not in _PERIODS:
        raise ValueError(
            f"{text!r} is not a rate (write it like '20/s', '1000 per hour', '5 per 10s')"
        )
    count = float(match.group(1))
    period = float(match.group(2) or 1) * _PERIODS[unit]
    if count <= 0 or period <= 0 or not math.isfinite(count):
        raise ValueError(f"{text!r}: a rate needs a count and a period above 0")
    return Rate(count, period)


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """One limit, as the worker applies it.

    Args:
        name: the ``[limits.NAME]`` it was declared as (the state's key).
        rate: admissions per period, or None.
        burst: jobs that may start at once above the steady rate (GCRA tolerance): 0
            spaces every start by the rate's interval.
        concurrency: jobs running at once, or None.
        key: the payload field the limit is counted per (None: one count for all).
        jobs: job types it binds.
        queues: queues whose every job type it binds.
    """

    name: str
    rate: Rate | None = None
    burst: int = 0
    concurrency: int | None = None
    key: str | None = None
    jobs: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        where = f"[limits.{self.name}]"
        if self.rate is None and self.concurrency is None:
            raise ConfigError(f"{where} sets neither rate nor concurrency: add one")
        if not self.jobs and not self.queues:
            raise ConfigError(f"{where} binds nothing: add jobs = [...] or queues = [...]")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"{where} concurrency must be at least 1")
        if self.burst < 0:
            raise ConfigError(f"{where} burst cannot be negative")
        if self.burst and self.rate is None:
            raise ConfigError(f"{where} sets a burst without a rate")

    def binds(self, job_type: str, queue: str) -> bool:
        """Whether jobs of ``job_type`` on ``queue`` count against this limit."""
        return job_type in self.jobs or queue in self.queues


def spec_from_table(name: str, table: Mapping[str, Any]) -> LimitSpec:
    """A :class:`LimitSpec` from one ``[limits.NAME]`` table (or a job class's dict).

    Raises:
        ConfigError: one line naming the limit and the mistake.
    """
    where = f"[limits.{name}]"
    known = {"rate", "burst", "concurrency", "key", "jobs", "queues"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown setting {unknown[0]!r} (known: {sorted(known)})")
    try:
        rate = parse_rate(table["rate"]) if table.get("rate") is not None else None
    except ValueError as exc:
        raise ConfigError(f"{where} rate: {exc}") from None
    key = table.get("key")
    if key is not None and (not isinstance(key, str) or not key):
        raise ConfigError(f"{where} key must be the name of a payload field")
    return LimitSpec(
        name=name,
        rate=rate,
        burst=_int(table.get("burst", 0), where, "burst"),
        concurrency=(
            None
            if table.get("concurrency") is None
            else _int(table["concurrency"], where, "concurrency")
        ),
        key=key,
        jobs=_names(table.get("jobs", ()), where, "jobs"),
        queues=_names(table.get("queues", ()), where, "queues"),
    )


def _int(value: object, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where} {what} must be a whole number")
    return value


def _names(value: object, where: str, what: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple | frozenset | set):
        raise ConfigError(f"{where} {what} must be a list of names")
    if not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where} {what} must be a list of names")
    return frozenset(value)


def key_of(spec: LimitSpec, job: Any) -> str:
    """The partition of ``spec`` a job counts in: its ``key`` field's value (``job`` is a
    job model, or a payload's mapping).

    A job without the field counts in :data:`MISSING_KEY`'s partition (it is limited,
    never let through unlimited); a value is written as JSON would show a scalar.
    """
    if spec.key is None:
        return MISSING_KEY
    value = job.get(spec.key) if isinstance(job, Mapping) else getattr(job, spec.key, None)
    if value is None:
        return MISSING_KEY
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text[:MAX_KEY_CHARS]


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit declared on a job class, binding its job type::

        class Export(Job):
            NAME = "export"
            QUEUE = "reports"
            LIMITS = (Limit("exports_per_tenant", concurrency=3, key="tenant"),)
            tenant: str

    The same ``name`` on several job classes is one limit shared by them (declared the
    same on each); ``[limits.NAME]`` in the configuration may not reuse it.
    """

    name: str
    rate: str | None = None
    burst: int = 0
    concurrency: int | None = None
    key: str | None = None

    def table(self) -> dict[str, Any]:
        """The limit as a ``[limits.NAME]`` table would say it, without what it binds."""
        found = {"rate": self.rate, "burst": self.burst, "concurrency": self.concurrency}
        return {k: v for k, v in {**found, "key": self.key}.items() if v is not None}


def class_tables(declared: Iterable[tuple[str, tuple[Limit, ...]]]) -> dict[str, dict[str, Any]]:
    """The tables of limits declared on job classes (``(NAME, LIMITS)`` pairs), each
    binding the job types that declare it.

    Raises:
        ConfigError: one name declared differently by two job classes.
    """
    tables: dict[str, dict[str, Any]] = {}
    for job_type, limits in declared:
        for limit in limits:
            table = limit.table()
            known = tables.setdefault(limit.name, {**table, "jobs": []})
            if {k: v for k, v in known.items() if k != "jobs"} != table:
                raise ConfigError(
                    f"limit {limit.name!r} is declared differently by job types "
                    f"{known['jobs'][0]!r} and {job_type!r}: declare it the same on each"
                )
            known["jobs"].append(job_type)
    return tables


class LimitBook:
    """Every declared limit, and which bind each job type (worked out once)."""

    def __init__(self, specs: Iterable[LimitSpec]) -> None:
        self.specs: tuple[LimitSpec, ...] = tuple(sorted(specs, key=lambda s: s.name))
        self.by_name: dict[str, LimitSpec] = {s.name: s for s in self.specs}

    def __bool__(self) -> bool:
        return bool(self.specs)

    def binding(self, job_type: str, queue: str) -> tuple[LimitSpec, ...]:
        """The limits a job of ``job_type`` on ``queue`` counts against, by name."""
        return tuple(s for s in self.specs if s.binds(job_type, queue))

    def check_known(self, job_types: Iterable[str], queues: Iterable[str]) -> None:
        """Refuse a limit naming a job type or queue that does not exist (a typo would
        otherwise leave jobs silently unlimited).

        Raises:
            ConfigError: one line naming the limit and the unknown name.
        """
        types, names = set(job_types), set(queues)
        for spec in self.specs:
            for job in sorted(spec.jobs - types):
                raise ConfigError(f"[limits.{spec.name}] jobs: no job type named {job!r}")
            for queue in sorted(spec.queues - names):
                raise ConfigError(f"[limits.{spec.name}] queues: no queue named {queue!r}")


def book_from_tables(tables: Mapping[str, Mapping[str, Any]]) -> LimitBook:
    """A :class:`LimitBook` from the ``[limits]`` tables of the configuration."""
    return LimitBook(spec_from_table(name, table) for name, table in tables.items())
