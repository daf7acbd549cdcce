"""Prometheus metrics of a scheduler: firings per schedule, failures, leadership.

Beside a worker (``queuey worker --with-scheduler``) they go into the worker's registry
and its endpoints; a scheduler on its own (``queuey scheduler``) has a registry and
endpoints of its own, with :class:`SchedulerStatus` answering ``/healthz`` and
``/readyz``. Every name and label is listed in ``docs/operations.md``.

Owns: the schedule metric names and labels, and the scheduler's health checks. Must
never: label a series with anything but a configured schedule's name (the label set is
fixed when the metrics are made), or use the global registry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from queuey_core.errors import QueueyError
from queuey_core.observability.health import Check

if TYPE_CHECKING:
    from queuey_core.schedules.scheduler import Firing, Scheduler


class SchedulerMetrics:
    """The metrics of one scheduler: pass :meth:`fired` and :meth:`fire_failed` to
    ``Scheduler(on_fire=..., on_fire_failed=...)`` and :meth:`watch` the scheduler.

    Args:
        schedules: the names of the schedules it fires; each gets its series at 0.
        registry: where the metrics go (a worker's, to share its ``/metrics``); default
            a new registry of this scheduler's own.
        process_metrics: also collect the process's own metrics (leave it off in a
            worker's registry, which has them already).
    """

    def __init__(
        self,
        schedules: Iterable[str],
        *,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = False,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.status = SchedulerStatus()
        r = self.registry
        self._firings = Counter(
            "queuey_schedule_firings",
            "Ticks fired (enqueued and confirmed by the broker), by schedule. Only the "
            "active scheduler fires: sum over every scheduler process.",
            ["schedule"],
            registry=r,
        )
        self._failures = Counter(
            "queuey_schedule_firing_failures",
            "Firings the broker did not take, by schedule (each is tried again).",
            ["schedule"],
            registry=r,
        )
        self._last = Gauge(
            "queuey_schedule_last_fired_tick_seconds",
            "The tick (Unix time) of the schedule's latest firing by this process.",
            ["schedule"],
            registry=r,
        )
        self._leader = Gauge(
            "queuey_scheduler_leader",
            "1 while this scheduler is the active one (the one that fires), else 0.",
            registry=r,
        )
        self._leader.set_function(lambda: 1.0 if self.status.is_leader() else 0.0)
        self._known = frozenset(schedules)
        for name in sorted(self._known):
            self._firings.labels(name)
            self._failures.labels(name)
        if process_metrics:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def watch(self, scheduler: Scheduler, thread: threading.Thread | None = None) -> None:
        """Follow ``scheduler`` (for leadership) and the thread running it (for health)."""
        self.status.watch(scheduler, thread)

    def fired(self, firing: Firing) -> None:
        """A firing was enqueued: count it (``on_fire``)."""
        if firing.schedule in self._known:
            self._firings.labels(firing.schedule).inc()
            self._last.labels(firing.schedule).set(firing.tick_ms / 1000)

    def fire_failed(self, schedule: str, error: QueueyError) -> None:
        """A firing failed: count it (``on_fire_failed``)."""
        if schedule in self._known:
            self._failures.labels(schedule).inc()


class SchedulerStatus:
    """The health of a scheduler running on its own: alive while its thread runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        self._thread: threading.Thread | None = None

    def watch(self, scheduler: Scheduler, thread: threading.Thread | None) -> None:
        """Follow ``scheduler`` and the thread that runs it."""
        with self._lock:
            self._scheduler, self._thread = scheduler, thread

    def is_leader(self) -> bool:
        """Whether the watched scheduler is the active one."""
        with self._lock:
            scheduler = self._scheduler
        return scheduler is not None and scheduler.is_leader()

    def liveness(self) -> Check:
        """Alive: not started yet, or its thread runs."""
        details = self._details()
        reason = "the scheduler has stopped" if details["scheduler"] == "stopped" else ""
        return Check(not reason, reason, details)

    def readiness(self) -> Check:
        """Ready: running and standing for election, leading or not (a standby is
        ready to take over)."""
        details = self._details()
        state = details["scheduler"]
        reason = "" if state in ("active", "standby") else f"the scheduler is {state}"
        return Check(not reason, reason, details)

    def _details(self) -> dict[str, object]:
        with self._lock:
            scheduler, thread = self._scheduler, self._thread
        if scheduler is None:
            state = "starting"
        elif thread is not None and not thread.is_alive():
            state = "stopped"
        else:
            state = "active" if scheduler.is_leader() else "standby"
        details: dict[str, object] = {"scheduler": state}
        if scheduler is not None:
            details["schedules"] = sorted(s.name for s in scheduler.schedules)
        return details
