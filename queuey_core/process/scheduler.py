"""The scheduler process: what ``queuey scheduler`` starts, and a scheduler beside a
worker (``worker --with-scheduler``).

The schedules are the ``[schedules.NAME]`` tables of the settings, each payload checked
against its job model before anything connects. Several schedulers may run at once:
they elect one leader through RabbitMQ, and only the leader fires
(:mod:`queuey_core.backends.rabbitmq.election`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from queuey_core.backends.capabilities import SupportsSchedules, require
from queuey_core.errors import ConfigError, QueueyError
from queuey_core.process.exits import Exit
from queuey_core.process.setup import backend_for, plugin_handlers
from queuey_core.process.stops import StopRequests
from queuey_core.queues import QueueSet
from queuey_core.settings import Settings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from queuey_core.observability import MetricsServer, SchedulerMetrics
    from queuey_core.schedules import Schedule, Scheduler

logger = logging.getLogger("queuey.scheduler")


def load_schedules(
    settings: Settings, handlers: Iterable[object], *, where: str = "configuration"
) -> list[Schedule]:
    """The schedules of ``settings``, each payload checked against its handler's model.

    Raises:
        ConfigError: naming ``where`` (the files) and the schedule.
    """
    from queuey_core.schedules import build_schedules, job_models  # noqa: PLC0415

    try:
        return build_schedules(settings.schedules, job_models(handlers), settings.queue_set())
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def make_scheduler(
    settings: Settings,
    queue_set: QueueSet,
    schedules: list[Schedule],
    broker: Any,
    metrics: SchedulerMetrics | None = None,
) -> Scheduler:
    """A scheduler electing through the broker and keeping its ticks there,
    counting its firings (and its duplicates) in ``metrics`` if given."""
    from queuey_core.flow.unique_setup import producer_options  # noqa: PLC0415
    from queuey_core.schedules import Scheduler  # noqa: PLC0415

    scheduling = require(broker, SupportsSchedules, "`queuey scheduler`")
    scheduler = Scheduler(
        broker,
        queue_set,
        schedules,
        election=scheduling.election(heartbeat=settings.scheduler.heartbeat),
        state=scheduling.schedule_state(),
        grace=settings.scheduler.grace,
        on_fire=metrics.fired if metrics is not None else None,
        on_fire_failed=metrics.fire_failed if metrics is not None else None,
        **producer_options(broker, settings),
    )
    if metrics is not None:
        from queuey_core.flow.unique_metrics import DuplicatesCollector  # noqa: PLC0415

        metrics.registry.register(DuplicatesCollector(scheduler.duplicates))
    return scheduler


def run_scheduler(
    settings: Settings,
    *,
    schedules: Sequence[Schedule] | None = None,
    metrics_port: int | None = None,
    on_error: Callable[[str], None] | None = None,
) -> int:
    """Run the schedules until SIGTERM or SIGINT (from the main thread); the exit code.

    Args:
        schedules: what to fire (default: the settings' ``[schedules]``, checked against
            the handlers that plugins register).
        metrics_port: serve ``/metrics``, ``/healthz`` and ``/readyz`` there (default:
            ``scheduler.metrics_port``, else none).
        on_error: told the one line that says why the scheduler stopped, if it failed
            (default: logged at error).

    Raises:
        ConfigError: no schedules, or one that does not fit its job model or its queue.
    """
    if schedules is None:
        schedules = load_schedules(settings, plugin_handlers(settings.queue_set()))
    if not schedules:
        raise ConfigError("no schedules to run: add schedules.NAME tables to the configuration")
    port = settings.scheduler.metrics_port if metrics_port is None else metrics_port
    metrics, server = _serve_metrics(port, list(schedules))
    try:
        broker = backend_for(settings)
        try:
            sched = make_scheduler(settings, settings.queue_set(), list(schedules), broker, metrics)
            return _run(sched, metrics, on_error or _log_error)
        finally:
            broker.close()
    finally:
        if server is not None:
            server.close()


def _log_error(message: str) -> None:
    logger.error("%s", message)


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


def _run(
    sched: Scheduler, metrics: SchedulerMetrics | None, on_error: Callable[[str], None]
) -> int:
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
    # The handler only records a signal; this loop logs it and stops the scheduler.
    stops = StopRequests().install()
    thread.start()
    try:
        while thread.is_alive():
            for what in stops.take():
                logger.info("%s: stopping; another scheduler takes over", what)
                sched.stop()
            stops.wait(0.2)
    finally:
        stops.close()
    failure = outcome["error"]
    if failure is None:
        logger.info("scheduler exited")
        return Exit.OK
    if isinstance(failure, ConfigError):
        on_error(str(failure))
        return Exit.USAGE
    if isinstance(failure, QueueyError):
        on_error(str(failure))
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
