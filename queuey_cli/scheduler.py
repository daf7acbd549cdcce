"""``queuey scheduler``, ``queuey schedules`` and ``worker --with-scheduler``: periodic jobs.

The schedules are the ``[schedules.NAME]`` tables of the configuration, each payload
checked against its job model (found by handler discovery) before anything connects.
Several schedulers may run at once: they elect one leader through RabbitMQ, and only
the leader fires (:mod:`queuey_core.backends.rabbitmq.election`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from queuey_cli.common import JsonOption, State, backend, cli_errors, state, usage
from queuey_cli.output import Column, Exit, error, listing, out, print_json
from queuey_core import ConfigError, QueueSet, QueueyError, Schedule, Scheduler
from queuey_core.backends.capabilities import SupportsSchedules, require
from queuey_core.handlers import Discovered
from queuey_core.schedules import Cron, build_schedules, job_models
from queuey_core.schedules.fire import enqueue_with_id
from queuey_core.settings import Settings, find_config

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from queuey_core.observability import MetricsServer, SchedulerMetrics

logger = logging.getLogger("queuey.scheduler")

schedules_app = typer.Typer(
    help="The schedules of the configuration: list them with their last and next firing "
    "(the default), or fire one now.",
    invoke_without_command=True,
)


def load_schedules(st: State, settings: Settings, found: list[Discovered]) -> list[Schedule]:
    """The configured schedules, checked; ConfigError naming the file and the schedule."""
    where = " + ".join(str(p) for p in find_config(st.config or None)) or "configuration"
    try:
        return build_schedules(
            settings.schedules, job_models(d.handler for d in found), settings.queue_set()
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _configured(ctx: typer.Context) -> tuple[Settings, QueueSet, list[Schedule]]:
    st = state(ctx)
    settings = st.settings()
    queue_set = settings.queue_set()
    return settings, queue_set, load_schedules(st, settings, st.handlers(queue_set))


def make_scheduler(
    settings: Settings,
    queue_set: QueueSet,
    schedules: list[Schedule],
    broker: Any,
    metrics: SchedulerMetrics | None = None,
) -> Scheduler:
    """A scheduler electing through the broker and keeping its ticks there,
    counting its firings in ``metrics`` if given."""
    scheduling = require(broker, SupportsSchedules, "`queuey scheduler`")
    return Scheduler(
        broker,
        queue_set,
        schedules,
        election=scheduling.election(heartbeat=settings.scheduler.heartbeat),
        state=scheduling.schedule_state(),
        grace=settings.scheduler.grace,
        on_fire=metrics.fired if metrics is not None else None,
        on_fire_failed=metrics.fire_failed if metrics is not None else None,
    )


@cli_errors
def scheduler(
    ctx: typer.Context,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve /metrics (firings per schedule), /healthz and /readyz on this port "
            "(0: any free one, logged). Default: scheduler.metrics_port, else off.",
        ),
    ] = None,
) -> None:
    """Run the schedules until SIGTERM or SIGINT. Run several for availability: exactly
    one of them fires at a time, and another takes over within seconds if it dies."""
    st = state(ctx)
    overrides = {"scheduler": {"metrics_port": metrics_port}} if metrics_port is not None else {}
    settings = st.settings(**overrides)
    queue_set = settings.queue_set()
    schedules = load_schedules(st, settings, st.handlers(queue_set))
    if not schedules:
        raise usage("no schedules to run: add schedules.NAME tables to the configuration")
    metrics, server = _serve_metrics(settings.scheduler.metrics_port, schedules)
    try:
        broker = backend(settings)
        try:
            code = _run(make_scheduler(settings, queue_set, schedules, broker, metrics), metrics)
        finally:
            broker.close()
    finally:
        if server is not None:
            server.close()
    raise typer.Exit(code)


def _serve_metrics(
    port: int | None, schedules: list[Schedule]
) -> tuple[SchedulerMetrics | None, MetricsServer | None]:
    """A lone scheduler's metrics and their HTTP server, started, when a port is set
    (before the broker is reached, as a worker's are)."""
    if port is None:
        return None, None
    # Imported here: a scheduler without metrics does not pay for prometheus_client.
    from queuey_core.observability import MetricsServer, SchedulerMetrics  # noqa: PLC0415

    metrics = SchedulerMetrics([s.name for s in schedules], process_metrics=True)
    return metrics, MetricsServer(metrics, port=port).start()


def _run(sched: Scheduler, metrics: SchedulerMetrics | None = None) -> int:
    """Run ``sched`` on a thread while this (main) thread waits for signals."""
    outcome: dict[str, BaseException | None] = {"error": None}

    def target() -> None:
        try:
            sched.run()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="queuey-scheduler")
    if metrics is not None:
        metrics.watch(sched, thread)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("%s: stopping; another scheduler takes over", signal.Signals(signum).name)
        sched.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    failure = outcome["error"]
    if failure is None:
        logger.info("scheduler exited")
        return Exit.OK
    if isinstance(failure, ConfigError):
        error(str(failure))
        return Exit.USAGE
    if isinstance(failure, QueueyError):
        error(str(failure))
        return Exit.BROKER_LOST if sched.lost_the_broker else Exit.FAILURE
    raise failure


class Beside:
    """A scheduler running on a thread beside a worker, stopped when the worker stops."""

    def __init__(self, sched: Scheduler, handle: Any) -> None:
        self._sched = sched
        self._thread = threading.Thread(target=self._run, name="queuey-scheduler", daemon=True)
        self._watch = threading.Thread(
            target=self._follow, args=(handle,), name="queuey-scheduler-watch", daemon=True
        )
        self._done = threading.Event()
        self._thread.start()
        self._watch.start()

    def _run(self) -> None:
        try:
            self._sched.run()
        except QueueyError as exc:
            logger.error("the scheduler stopped: %s", exc)
        finally:
            self._done.set()

    def _follow(self, handle: Any) -> None:
        while not self._done.is_set() and not handle.is_shutdown():
            time.sleep(0.2)
        self._sched.stop()

    def stop(self) -> None:
        """Stop the scheduler and wait for it to step down."""
        self._sched.stop()
        self._thread.join(10)


def schedules_beside(st: State, settings: Settings, found: list[Discovered]) -> list[Schedule]:
    """``worker --with-scheduler``: the schedules, checked before the worker connects."""
    schedules = load_schedules(st, settings, found)
    if not schedules:
        raise usage("--with-scheduler: no schedules configured (schedules.NAME tables)")
    return schedules


def run_beside(
    settings: Settings,
    schedules: list[Schedule],
    broker: Any,
    handle: Any,
    registry: CollectorRegistry | None = None,
) -> Beside:
    """Run ``schedules`` on a thread beside a worker, publishing through its backend, and
    stop them as soon as the worker starts shutting down (``handle.is_shutdown()``).
    With the worker's metrics ``registry``, their firings are counted there."""
    metrics = None
    if registry is not None:
        from queuey_core.observability import SchedulerMetrics  # noqa: PLC0415

        metrics = SchedulerMetrics([s.name for s in schedules], registry=registry)
    sched = make_scheduler(settings, settings.queue_set(), schedules, broker, metrics)
    if metrics is not None:
        metrics.watch(sched)
    return Beside(sched, handle)


# -- queuey schedules --------------------------------------------------------------------


SCHEDULE_COLUMNS = [
    Column("schedule", "name"),
    Column("job", "job_type"),
    Column("when", "trigger"),
    Column("catch-up", "catch_up"),
    Column("last firing", "last_firing"),
    Column("next firing", "next_firing"),
]


def _moment(ms: int | None, schedule: Schedule) -> str | None:
    if ms is None:
        return None
    zone = schedule.trigger.zone if isinstance(schedule.trigger, Cron) else UTC
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone).isoformat()


@schedules_app.callback()
@cli_errors
def schedules(
    ctx: typer.Context,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """List each schedule with its last and next firing."""
    if ctx.invoked_subcommand is not None:
        return
    settings, _queue_set, configured = _configured(ctx)
    if not configured:
        if as_json:
            print_json([])
        else:
            out.print("no schedules configured (schedules.NAME tables)", highlight=False)
        return
    broker = backend(settings)
    try:
        store = require(broker, SupportsSchedules, "`queuey schedules`").schedule_state()
        try:
            last = store.last_fired([s.name for s in configured])
        finally:
            store.close()
    finally:
        broker.close()
    now = int(time.time() * 1000)
    rows: list[dict[str, Any]] = []
    for s in configured:
        nxt = s.trigger.next_after(now)
        rows.append(
            {
                "name": s.name,
                "job_type": s.job_type,
                "payload": s.job.model_dump(mode="json"),
                "priority": s.priority,
                "trigger": s.trigger.describe(),
                "catch_up": s.catch_up.value,
                "last_firing": _moment(last.get(s.name), s),
                "last_firing_ms": last.get(s.name),
                "next_firing": _moment(nxt, s),
                "next_firing_ms": nxt,
            }
        )
    if as_json:
        print_json(rows)
        return
    fields = ("name", "job_type", "trigger", "catch_up", "last_firing", "next_firing")
    cells = [[r[f] or "never" if f == "last_firing" else r[f] for f in fields] for r in rows]
    listing("schedules", SCHEDULE_COLUMNS, cells)


@schedules_app.command("fire")
@cli_errors
def fire(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The schedule to fire now.")],
) -> None:
    """Enqueue one job of a schedule now (prints its id); its ticks are unchanged."""
    settings, queue_set, configured = _configured(ctx)
    chosen = {s.name: s for s in configured}.get(name)
    if chosen is None:
        known = ", ".join(s.name for s in configured) or "none configured"
        raise usage(f"unknown schedule {name!r} (known: {known})")
    broker = backend(settings)
    try:
        broker.declare([queue_set[chosen.job.QUEUE]])
        envelope = enqueue_with_id(
            broker,
            queue_set,
            chosen.job,
            job_id=uuid.uuid4(),
            priority=chosen.priority,
            enqueued_at=int(time.time() * 1000),
        )
    finally:
        broker.close()
    out.print(str(envelope.job_id), highlight=False)
