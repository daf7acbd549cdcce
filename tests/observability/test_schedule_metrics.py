"""Schedule firings counted per schedule, in memory on the manual clock, and served over
HTTP by a lone scheduler's own endpoints. Real processes are in
``tests/integration/test_scheduler_rabbitmq.py``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from queuey_core.observability import MetricsServer
from queuey_core.observability import SchedulerMetrics
from queuey_core.observability import WorkerMetrics
from queuey_core.schedules import Schedule
from queuey_core.schedules import Scheduler
from tests.observability.test_metrics import get
from tests.schedules.test_scheduler import World
from tests.schedules.test_scheduler import every_minute

FIRINGS = "queuey_schedule_firings_total"
FAILURES = "queuey_schedule_firing_failures_total"


def value(metrics: SchedulerMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def counted(world: World, metrics: SchedulerMetrics, *schedules: Schedule) -> Scheduler:
    """A scheduler whose firings and failures go to ``metrics``, already standing."""
    scheduler, election = world.scheduler(
        *schedules, on_fire=metrics.fired, on_fire_failed=metrics.fire_failed
    )
    metrics.watch(scheduler)
    election.start(lambda: None)
    return scheduler


@pytest.fixture
def world() -> World:
    return World()


def test_firings_are_counted_per_schedule_from_zero(world: World) -> None:
    metrics = SchedulerMetrics(["ping", "pong"])
    assert value(metrics, FIRINGS, schedule="ping") == 0, "every series exists from the start"
    assert metrics.registry.get_sample_value(FIRINGS, {"schedule": "pong"}) == 0
    s = counted(world, metrics, every_minute("ping"), every_minute("pong"))
    for minute in range(1, 4):
        world.at(f"2026-01-01T00:0{minute}:00+00:00")
        s.step()
    assert value(metrics, FIRINGS, schedule="ping") == 3
    assert value(metrics, FIRINGS, schedule="pong") == 3
    assert len(world.backend.envelopes) == 6
    last = value(metrics, "queuey_schedule_last_fired_tick_seconds", schedule="ping")
    assert last * 1000 == world.clock.wall_ms(), "the latest tick, in seconds"


def test_a_firing_the_broker_refuses_is_counted_as_a_failure(world: World) -> None:
    metrics = SchedulerMetrics(["ping"])
    s = counted(world, metrics, every_minute("ping"))
    world.backend.refuse = True
    world.at("2026-01-01T00:01:00+00:00")
    s.step()
    s.step()  # tried again: counted again
    assert value(metrics, FAILURES, schedule="ping") == 2
    assert value(metrics, FIRINGS, schedule="ping") == 0
    world.backend.refuse = False
    s.step()
    assert value(metrics, FIRINGS, schedule="ping") == 1


def test_only_the_leader_counts_and_says_it_leads(world: World) -> None:
    first, second = SchedulerMetrics(["ping"]), SchedulerMetrics(["ping"])
    a = counted(world, first, every_minute("ping"))
    b = counted(world, second, every_minute("ping"))
    for minute in range(1, 3):
        world.at(f"2026-01-01T00:0{minute}:00+00:00")
        a.step()
        b.step()
    assert (value(first, FIRINGS, schedule="ping"), value(second, FIRINGS, schedule="ping")) == (
        2,
        0,
    )
    assert value(first, "queuey_scheduler_leader") == 1
    assert value(second, "queuey_scheduler_leader") == 0


def test_a_schedule_it_was_not_told_about_makes_no_series(world: World) -> None:
    metrics = SchedulerMetrics(["ping"])
    s = counted(world, metrics, every_minute("ping"), every_minute("stranger"))
    world.at("2026-01-01T00:01:00+00:00")
    s.step()
    names = {
        sample.labels.get("schedule")
        for family in metrics.registry.collect()
        for sample in family.samples
    }
    assert names == {None, "ping"}, "labels are the configured schedules only"


def test_beside_a_worker_the_firings_share_its_registry() -> None:
    worker = WorkerMetrics()
    SchedulerMetrics(["ping"], registry=worker.registry)
    names = {family.name for family in worker.registry.collect()}
    assert {"queuey_jobs", "queuey_schedule_firings", "queuey_scheduler_leader"} <= names


@pytest.fixture
def served() -> Iterator[tuple[SchedulerMetrics, str]]:
    metrics = SchedulerMetrics(["ping"], process_metrics=True)
    server = MetricsServer(metrics, port=0, host="127.0.0.1").start()
    try:
        yield metrics, f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


def test_a_lone_scheduler_serves_its_metrics_and_health(
    world: World, served: tuple[SchedulerMetrics, str]
) -> None:
    metrics, base = served
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["scheduler"]) == (503, "starting")
    assert get(f"{base}/healthz")[0] == 200, "alive while it starts"

    s = counted(world, metrics, every_minute("ping"))
    running = threading.Event()
    thread = threading.Thread(target=running.wait)
    metrics.watch(s, thread)
    thread.start()
    world.at("2026-01-01T00:01:00+00:00")
    s.step()
    status, content_type, text = get(f"{base}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    assert 'queuey_schedule_firings_total{schedule="ping"} 1.0' in text
    assert "process_cpu_seconds_total" in text
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)) == (
        200,
        {"ok": True, "reason": None, "scheduler": "active", "schedules": ["ping"]},
    )

    running.set()
    thread.join()
    status, _, body = get(f"{base}/healthz")
    assert (status, json.loads(body)["reason"]) == (503, "the scheduler has stopped")
    assert get(f"{base}/readyz")[0] == 503


def test_a_standby_scheduler_is_ready(world: World, served: tuple[SchedulerMetrics, str]) -> None:
    metrics, base = served
    counted(world, SchedulerMetrics(["ping"]), every_minute("ping")).step()  # leads
    standby = counted(world, metrics, every_minute("ping"))
    standby.step()
    status, _, body = get(f"{base}/readyz")
    assert (status, json.loads(body)["scheduler"]) == (200, "standby")
