"""Periodic jobs: schedules fired exactly once per tick across many schedulers.

One module a duty:

* :mod:`.ticks`: when a schedule's ticks fall (cron in a time zone, or every so
  often), which missed ticks to catch up, and each tick's job id; pure maths;
* :mod:`.schedule`: :class:`Schedule`, and building schedules from ``[schedules.NAME]``
  with each payload checked against its job model;
* :mod:`.election` and :mod:`.state`: the protocols for electing the one scheduler
  that fires and for keeping the last fired tick (with the backend, never in a local
  file beside a broker); :mod:`.memory` implements both in-process for tests;
* :mod:`.scheduler`: :class:`Scheduler`, the loop; it fires through
  ``Producer.enqueue(job, job_id=...)`` under its tick's job id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.schedules.ticks import CatchUp, Cron, Every, Trigger, firing_id

if TYPE_CHECKING:
    from queuey_core.schedules.election import Election
    from queuey_core.schedules.memory import (
        MemoryBallot,
        MemoryElection,
        MemoryScheduleState,
    )
    from queuey_core.schedules.schedule import Schedule, build_schedules, job_models
    from queuey_core.schedules.scheduler import Firing, Scheduler
    from queuey_core.schedules.state import ScheduleState

#: Imported on first use: the settings read the ticks only, and a worker without
#: schedules loads none of the rest.
_LAZY = {
    "Election": "election",
    "MemoryBallot": "memory",
    "MemoryElection": "memory",
    "MemoryScheduleState": "memory",
    "Schedule": "schedule",
    "build_schedules": "schedule",
    "job_models": "schedule",
    "Firing": "scheduler",
    "Scheduler": "scheduler",
    "ScheduleState": "state",
}


__getattr__ = lazy_exports(
    __name__, {name: f"queuey_core.schedules.{module}" for name, module in _LAZY.items()}
)


__all__ = [
    "CatchUp",
    "Cron",
    "Election",
    "Every",
    "Firing",
    "MemoryBallot",
    "MemoryElection",
    "MemoryScheduleState",
    "Schedule",
    "ScheduleState",
    "Scheduler",
    "Trigger",
    "build_schedules",
    "firing_id",
    "job_models",
]
