"""A schedule: a job, when it fires, and what to do with ticks missed while none ran.

Built in code (``Schedule("nightly", Report(day="today"), Cron("0 3 * * *"))``) or from
``[schedules.NAME]`` tables by :func:`build_schedules`, which checks each payload
against its job's model before anything starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from queuey_core.errors import ConfigError
from queuey_core.first_attempts import make_envelope
from queuey_core.jobs import Job, job_identity
from queuey_core.queues import QueueSet
from queuey_core.schedules.ticks import CatchUp, Trigger

if TYPE_CHECKING:
    from queuey_core.settings import ScheduleSettings

#: A schedule's name becomes part of a queue name on the broker: keep it plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")


@dataclass(frozen=True)
class Schedule:
    """A job enqueued at each tick of ``trigger``."""

    name: str
    job: Job
    trigger: Trigger
    priority: int | None = None
    catch_up: CatchUp = CatchUp.LATEST

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"schedule name {self.name!r}: use letters, digits, '_', '.', ':' or '-'"
            )
        job_identity(type(self.job))

    @property
    def job_type(self) -> str:
        """The job type on the wire."""
        return type(self.job).NAME

    def check(self, queues: QueueSet) -> None:
        """ConfigError naming this schedule if its job's queue or priority cannot work."""
        try:
            make_envelope(self.job, queues, priority=self.priority, enqueued_at=0)
        except ConfigError as exc:
            raise ConfigError(f"schedules.{self.name}: {exc}") from None


def build_schedules(
    configured: Mapping[str, ScheduleSettings],
    models: Mapping[str, type[Job]],
    queues: QueueSet,
) -> list[Schedule]:
    """The schedules of the configuration, each payload validated against its job model.

    Raises:
        ConfigError: one line naming the schedule: an unknown job type, a payload that
            does not fit, a queue or priority the configuration cannot take.
    """
    built = []
    for name, item in configured.items():
        where = f"schedules.{name}"
        model = models.get(item.job)
        if model is None:
            known = ", ".join(sorted(models)) or "none: install a handlers plugin"
            raise ConfigError(f"{where}.job: unknown job type {item.job!r} (known: {known})")
        try:
            job = model.model_validate(item.payload)
        except ValidationError as exc:
            raise ConfigError(
                f"{where}.payload: does not fit job type {item.job!r}: {_first(exc)}"
            ) from None
        schedule = Schedule(name, job, item.trigger(), item.priority, item.catch_up)
        schedule.check(queues)
        built.append(schedule)
    return built


def job_models(handlers: Iterable[object]) -> dict[str, type[Job]]:
    """``{job type: model}`` of handlers (anything with a ``job_type`` that is a Job)."""
    models: dict[str, type[Job]] = {}
    for h in handlers:
        model = getattr(h, "job_type", None)
        if isinstance(model, type) and issubclass(model, Job):
            models[model.NAME] = model
    return models


def _first(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    key = ".".join(str(p) for p in first["loc"]) or "payload"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{key}: {first['msg']}{more}"
