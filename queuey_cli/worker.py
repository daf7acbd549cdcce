"""``queuey worker``: the daemon. A container entrypoint: SIGTERM drains it gracefully."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from queuey_cli.common import backend, cli_errors, control_secret, state, usage
from queuey_cli.output import Exit
from queuey_core import ConsumerStoppedError, QueueyError, Worker
from queuey_core.limits import check_positive
from queuey_core.settings import MAX_PROCESSES, duration

if TYPE_CHECKING:
    from queuey_cli.supervised import SupervisorLink
    from queuey_core.observability import MetricsServer, WorkerMetrics

logger = logging.getLogger("queuey.worker")


@cli_errors
def worker(
    ctx: typer.Context,
    queues: Annotated[
        str | None, typer.Option(help="Comma-separated queues to consume (default: all).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Jobs at once (default: sum of prefetch).")
    ] = None,
    job_timeout: Annotated[
        str | None, typer.Option(help="Interrupt and retry a job after this long, e.g. 30s.")
    ] = None,
    burst: Annotated[
        bool,
        typer.Option(
            help="Stop once the chosen queues are empty and no retry or deferral is held (exit 0)."
        ),
    ] = False,
    with_scheduler: Annotated[
        bool,
        typer.Option(
            "--with-scheduler",
            help="Also run the configured schedules; of several schedulers, one fires at a time.",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve /metrics, /healthz and /readyz on this port (0: any free one, "
            "logged). Default: worker.metrics_port in the config, else off.",
        ),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_PROCESSES,
            help="Worker processes under one supervisor, each with --concurrency threads "
            "(default: worker.processes in the config, else 1: no supervisor).",
        ),
    ] = None,
    max_jobs_per_child: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Replace a worker process after this many jobs (for handlers that leak; "
            "runs a supervisor even for one process); its replacement starts first.",
        ),
    ] = None,
    supervised_fd: Annotated[int | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run jobs until SIGTERM or SIGINT; a second signal stops at once."""
    overrides: dict[str, Any] = {}
    if concurrency is not None:
        overrides["worker"] = {"concurrency": concurrency}
    if processes is not None:
        overrides.setdefault("worker", {})["processes"] = processes
    if max_jobs_per_child is not None:
        overrides.setdefault("worker", {})["max_jobs_per_child"] = max_jobs_per_child
    if job_timeout is not None:
        try:
            seconds = duration(job_timeout)
        except ValueError as exc:
            raise usage(f"--job-timeout: {exc}") from None
        try:
            check_positive(seconds, "--job-timeout")
        except ValueError as exc:
            raise usage(str(exc)) from None
        overrides.setdefault("worker", {})["job_timeout"] = seconds
    if metrics_port is not None:
        overrides.setdefault("worker", {})["metrics_port"] = metrics_port
    st = state(ctx)
    settings = st.settings(**overrides)
    queue_set = settings.queue_set()
    consume = None
    if queues is not None:
        consume = [q.strip() for q in queues.split(",") if q.strip()]
        unknown = [q for q in consume if q not in queue_set]
        if not consume or unknown:
            raise usage(
                f"--queues: unknown queue {', '.join(map(repr, unknown)) or '(none given)'} "
                f"(configured: {', '.join(queue_set)})"
            )
    found = st.handlers(queue_set)
    schedules = []
    if with_scheduler:
        # Imported here: a worker without schedules loads neither them nor croniter.
        from queuey_cli.scheduler import run_beside, schedules_beside  # noqa: PLC0415

        schedules = schedules_beside(st, settings, found)
    link = None
    if supervised_fd is not None:
        # Imported here, as the supervisor below: one process needs neither (nor ctypes).
        from queuey_cli.supervised import attach  # noqa: PLC0415

        link = attach(supervised_fd, max_jobs=settings.worker.max_jobs_per_child)
    elif settings.worker.processes > 1 or settings.worker.max_jobs_per_child is not None:
        if burst:
            raise usage(
                "--burst runs in one process, without a supervisor: drop --processes and "
                "--max-jobs-per-child (worker.processes, worker.max_jobs_per_child), or --burst"
            )
        # Imported here: one process does not pay for the supervisor.
        from queuey_cli.supervised import child_command  # noqa: PLC0415
        from queuey_cli.supervisor import Supervisor  # noqa: PLC0415

        command = child_command(ctx, settings, consume, job_timeout, with_scheduler)
        raise typer.Exit(Supervisor(command, settings).run())
    metrics, server = _serve_metrics(settings.worker.metrics_port, link)
    try:
        broker = backend(settings)
        w = Worker(
            broker,
            queue_set,
            [d.handler for d in found],
            consume=consume,
            concurrency=settings.worker.concurrency,
            job_timeout=settings.worker.job_timeout,
            timeout_grace=settings.worker.timeout_grace,
            close_backend_on_shutdown=True,
            hooks=[h for h in (link, metrics) if h is not None],
            on_shutdown_request=lambda: _as_sigterm(link),
            control_secret=control_secret(settings),
        )
        registry = metrics.registry if metrics is not None else None
        beside = run_beside(settings, schedules, broker, w.handle, registry) if schedules else None
        code = _run(w, broker, settings.worker.shutdown_timeout, burst, link)
        if beside is not None:
            beside.stop()
    finally:
        if server is not None:
            server.close()
    raise typer.Exit(code)


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


def _run(
    w: Worker,
    broker: Any,
    shutdown_timeout: float,
    burst: bool,
    link: SupervisorLink | None = None,
) -> int:
    """Run ``w`` on a thread while this (main) thread waits for signals."""
    outcome: dict[str, BaseException | None] = {"error": None}

    def target() -> None:
        try:
            w.run()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="queuey-worker")
    signals = {"count": 0, "deadline": float("inf")}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signals["count"] += 1
        name = signal.Signals(signum).name
        if signals["count"] == 1:
            logger.warning(
                "%s: draining (up to %gs); send it again to stop at once", name, shutdown_timeout
            )
            signals["deadline"] = time.monotonic() + shutdown_timeout
            w.handle.shutdown()
        else:
            _stop_now(w, f"second {name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    if link is not None:
        # The supervisor is gone (killed, or it died before our parent-death signal was
        # set): drain as if it had sent SIGTERM, and as the one signal, not a second.
        def orphaned() -> None:
            logger.warning("the supervisor is gone: draining (up to %gs)", shutdown_timeout)
            signals["deadline"] = min(signals["deadline"], time.monotonic() + shutdown_timeout)
            w.handle.shutdown()

        link.watch(orphaned)
        if link.orphaned():
            orphaned()
    thread.start()
    if burst:
        threading.Thread(target=_burst_watch, args=(w, broker), daemon=True).start()
    try:
        while thread.is_alive():
            thread.join(0.2)
            if time.monotonic() > signals["deadline"]:
                _stop_now(w, f"shutdown took longer than {shutdown_timeout:g}s")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

    settle_failures = w.handle.settle_failures()
    logger.info("worker exited", extra={"settle_failures": settle_failures})
    error = outcome["error"]
    if isinstance(error, ConsumerStoppedError):
        logger.error("lost the broker: %s", error)
        return Exit.BROKER_LOST
    if isinstance(error, QueueyError):
        logger.error("%s", error)
        return Exit.FAILURE
    if error is not None:
        raise error
    return Exit.OK


def _as_sigterm(link: SupervisorLink | None) -> None:
    """A shutdown asked over the control channel (``queuey workers shutdown``) drains
    exactly as SIGTERM does: the same log, ``shutdown_timeout``, a second signal, exit 0.

    A child of ``--processes`` first tells its supervisor, which would otherwise take
    the exit for a crash and start another process in its place."""
    if link is not None:
        link.send("stop")
    if callable(signal.getsignal(signal.SIGTERM)):  # _run's handler: the worker runs
        os.kill(os.getpid(), signal.SIGTERM)


def _stop_now(w: Worker, why: str) -> None:
    """Exit at once: unsettled deliveries go back to the broker with the connection."""
    logger.error(
        "%s: stopping at once; %d unsettled deliveries go back to the broker",
        why,
        w.handle.in_flight(),
    )
    logging.shutdown()
    os._exit(Exit.FORCED)


def _burst_watch(w: Worker, broker: Any) -> None:
    """Shut the worker down once its queues are empty, it holds nothing, and no retry or
    deferral is still held in the delay ladder (which any queue shares)."""
    names = [q.name for q in w.queues]
    quiet = 0
    while not w.handle.is_shutdown():
        time.sleep(0.2)
        try:
            # inspect(): every backend that can count (RabbitMQ, a SQLite file) has it.
            seen = broker.inspect(names)
            empty = all(c is not None and c.ready == 0 for c in seen.queues.values())
            empty = empty and not seen.held
        except QueueyError:
            continue
        quiet = quiet + 1 if empty and w.handle.in_flight() == 0 else 0
        if quiet >= 3:  # three looks in a row: nothing was on its way in between
            logger.info("burst: queues empty, stopping")
            w.handle.shutdown()
