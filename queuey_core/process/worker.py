"""The worker process: what ``queuey worker`` starts, as one call (:func:`run_worker`).

One process runs a :class:`~queuey_core.Worker` on a thread while the main thread
watches for signals and the shutdown deadline; with ``processes`` above 1 (or
``max_jobs_per_child``) it runs a supervisor of worker processes instead
(:mod:`queuey_core.process.supervisor`). The metrics server and a scheduler run beside
the worker when asked for.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from queuey_core.errors import ConfigError
from queuey_core.flow.limit_setup import check_limits, limit_gate_for
from queuey_core.flow.unique_setup import check_key_store, unique_keys_for
from queuey_core.process.running import run_until_stopped
from queuey_core.process.setup import backend_for, plugin_handlers
from queuey_core.process.stops import STOP_SIGNALS, StopRequests
from queuey_core.results.setup import recorder_for
from queuey_core.settings import Settings, WorkerSettings
from queuey_core.worker import Worker
from queuey_core.workflows.setup import workflow_hook_for

if TYPE_CHECKING:
    from queuey_core.observability import MetricsServer, WorkerMetrics
    from queuey_core.process.supervised import SupervisorLink
    from queuey_core.schedules import Schedule

logger = logging.getLogger("queuey.worker")


def run_worker(
    settings: Settings,
    *,
    handlers: Sequence[Any] | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int | None = None,
    processes: int | None = None,
    max_jobs_per_child: int | None = None,
    job_timeout: float | None = None,
    metrics_port: int | None = None,
    burst: bool = False,
    with_scheduler: bool = False,
    schedules: Sequence[Schedule] | None = None,
    child_command: Sequence[str] | None = None,
    supervised_fd: int | None = None,
    stops: StopRequests | None = None,
) -> int:
    """Run what ``queuey worker`` runs until SIGTERM or SIGINT; returns the exit code.

    Call it from the main thread (it handles SIGTERM and SIGINT while it runs). The
    keyword options override ``[worker]`` of ``settings`` as the command's options do.

    Args:
        handlers: the handlers to run (default: those plugins register).
        queues: the queues to consume (default: all configured).
        burst: stop once the queues are empty and no retry or deferral is held.
        with_scheduler: run the schedules beside the worker (``schedules``, default:
            the settings' ``[schedules]``).
        child_command: with a supervisor, the command that starts a child up to its
            ``worker`` options (default: ``python -m queuey_cli``; its configuration
            comes from ``$QUEUEY_CONFIG`` or ``./queuey.toml``, as ``queuey``'s does).
        supervised_fd: set by a supervisor in its children only.
        stops: what records SIGTERM and SIGINT (and SIGHUP in a supervisor's child),
            installed by the caller, who keeps it past the return (the command line
            does, so that a signal while the process exits changes nothing). By
            default one is installed here and the previous handlers are put back
            when this returns.

    Raises:
        ConfigError: an unknown queue, a bad override, no schedules to run beside.
    """
    settings = _with_worker(
        settings,
        concurrency=concurrency,
        processes=processes,
        max_jobs_per_child=max_jobs_per_child,
        job_timeout=job_timeout,
        metrics_port=metrics_port,
    )
    queue_set = settings.queue_set()
    unknown = [q for q in queues or () if q not in queue_set]
    if unknown or (queues is not None and not queues):
        raise ConfigError(
            f"unknown queue {', '.join(map(repr, unknown)) or '(none given)'} "
            f"(configured: {', '.join(queue_set)})"
        )
    consume = list(queues) if queues is not None else None
    if handlers is None:
        handlers = plugin_handlers(queue_set)
    # Refused here, before a supervisor starts its children.
    check_limits(settings, [h.job_type for h in handlers])
    if with_scheduler and schedules is None:
        from queuey_core.process.scheduler import load_schedules  # noqa: PLC0415

        schedules = load_schedules(settings, handlers)
    if with_scheduler and not schedules:
        raise ConfigError("with_scheduler: no schedules configured (schedules.NAME tables)")
    schedules = schedules if with_scheduler else None
    # From here on a signal is recorded, never lost nor acted on inside its handler: one
    # during start-up (connecting, say) is applied as soon as the worker runs.
    own = stops is None
    if stops is None:
        stops = StopRequests().install(stop_signals(supervised=supervised_fd is not None))
    try:
        if supervised_fd is None and (
            settings.worker.processes > 1 or settings.worker.max_jobs_per_child is not None
        ):
            # Imported here: one process does not pay for the supervisor.
            from queuey_core.process.supervised import worker_arguments  # noqa: PLC0415
            from queuey_core.process.supervisor import Supervisor  # noqa: PLC0415

            prefix = list(child_command or [sys.executable, "-m", "queuey_cli"])
            options = worker_arguments(settings, consume, job_timeout, with_scheduler, burst)
            return Supervisor(prefix + options, settings, burst=burst, stops=stops).run()
        return _run_one(settings, stops, handlers, consume, burst, schedules, supervised_fd)
    finally:
        if own:
            stops.close()


def stop_signals(*, supervised: bool) -> tuple[signal.Signals, ...]:
    """The signals a worker process records: SIGTERM and SIGINT, and SIGHUP (its
    parent-death signal) in a supervisor's child."""
    return (*STOP_SIGNALS, signal.SIGHUP) if supervised else STOP_SIGNALS


def _run_one(
    settings: Settings,
    stops: StopRequests,
    handlers: Sequence[Any],
    consume: list[str] | None,
    burst: bool,
    schedules: Sequence[Schedule] | None,
    supervised_fd: int | None,
) -> int:
    """One worker (a supervisor's child if ``supervised_fd``), until it stops."""
    link = None
    if supervised_fd is not None:
        # Imported here: one process on its own needs no link (nor ctypes).
        from queuey_core.process.supervised import attach  # noqa: PLC0415

        link = attach(supervised_fd, max_jobs=settings.worker.max_jobs_per_child)
        link.watch(lambda: stops.request("orphaned"), stops.request)
    queue_set = settings.queue_set()
    metrics, server = _serve_metrics(settings.worker.metrics_port, link)
    recorder = recorder_for(settings)
    if recorder is not None and metrics is not None:
        metrics.registry.register(recorder.collector())
    gate = None
    try:
        check_key_store(settings)  # before connecting: one line, nothing consumed
        gate = limit_gate_for(settings, job_types=[h.job_type for h in handlers])
        broker = backend_for(settings)
        workflows = workflow_hook_for(settings, broker)
        if workflows is not None and metrics is not None:
            metrics.registry.register(workflows.collector())
        w = Worker(
            broker,
            queue_set,
            list(handlers),
            consume=consume,
            concurrency=settings.worker.concurrency,
            async_concurrency=settings.worker.async_concurrency,
            job_timeout=settings.worker.job_timeout,
            timeout_grace=settings.worker.timeout_grace,
            close_backend_on_shutdown=True,
            hooks=[h for h in (link, metrics, recorder, workflows) if h is not None],
            on_shutdown_request=lambda: _shutdown_requested(stops, link),
            control_secret=_control_secret(settings),
            unique_keys=unique_keys_for(broker, settings),
            limits=gate,
        )
        beside = None
        if schedules:
            from queuey_core.process.scheduler import run_beside  # noqa: PLC0415

            registry = metrics.registry if metrics is not None else None
            beside = run_beside(settings, list(schedules), broker, w.handle, registry)
        code = run_until_stopped(w, broker, settings.worker.shutdown_timeout, burst, link, stops)
        if beside is not None:
            beside.stop()
    finally:
        if gate is not None:
            gate.close()
        if recorder is not None:
            recorder.close()
        if server is not None:
            server.close()
    return code


def _with_worker(settings: Settings, **changes: Any) -> Settings:
    """``settings`` with the ``[worker]`` keys of ``changes`` that are not None, checked."""
    given = {k: v for k, v in changes.items() if v is not None}
    if not given:
        return settings
    try:
        worker = WorkerSettings.model_validate({**settings.worker.model_dump(), **given})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"worker options: {problems}") from None
    return settings.model_copy(update={"worker": worker})


def _serve_metrics(
    port: int | None, link: SupervisorLink | None = None
) -> tuple[WorkerMetrics | None, MetricsServer | None]:
    """The worker's metrics and their HTTP server, started, when a port is set.

    Started before the broker is reached, so a container's health check sees a live
    process (not ready yet) while the worker connects; a port that cannot be used stops
    everything before that (exit 2). A supervisor's child serves on a free port of
    127.0.0.1 only, which it tells its supervisor: the supervisor serves the real port.
    """
    if port is None:
        return None, None
    # Imported here: a worker without metrics does not pay for prometheus_client.
    from queuey_core.observability import MetricsServer, WorkerMetrics  # noqa: PLC0415

    metrics = WorkerMetrics()
    if link is None:
        return metrics, MetricsServer(metrics, port=port).start()
    server = MetricsServer(metrics, port=0, host="127.0.0.1").start()
    link.send("metrics", port=server.port)
    return metrics, server


def _shutdown_requested(stops: StopRequests, link: SupervisorLink | None) -> None:
    """A shutdown asked over the control channel (``queuey workers shutdown``) drains
    exactly as SIGTERM does: the same log, ``shutdown_timeout``, a second signal, exit 0.

    A child of ``--processes`` first tells its supervisor, which would otherwise take
    the exit for a crash and start another process in its place."""
    if link is not None:
        link.send("stop")
    stops.request("shutdown")


def _control_secret(settings: Settings) -> str | None:
    """``[control] secret``: what checks control requests (signed by ``queuey workers``);
    None when unset."""
    secret = settings.control.secret
    return secret.get_secret_value() if secret is not None else None
