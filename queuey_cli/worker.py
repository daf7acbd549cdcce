"""``queuey worker``: the daemon. A container entrypoint: SIGTERM drains it gracefully.

The options are mapped onto :func:`queuey_core.process.run_worker`, which runs it.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from queuey_cli.common import cli_errors, ends_with_command, state, usage
from queuey_core.limits import MAX_PROCESSES, check_positive
from queuey_core.process.running import exit_process
from queuey_core.process.stops import StopRequests

# What running a worker needs (the settings, the worker, pydantic, pika) is imported when
# it runs: `queuey --help` and `queuey worker --help` go without.


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
    # Installed before the configuration is read: a signal from now on is recorded,
    # and one during start-up drains the worker as soon as it runs.
    from queuey_core.process.worker import stop_signals  # noqa: PLC0415 - see the imports

    stops = StopRequests().install(stop_signals(supervised=supervised_fd is not None))
    try:
        code = _worker(
            ctx,
            stops,
            queues,
            concurrency,
            job_timeout,
            burst,
            with_scheduler,
            metrics_port,
            processes,
            max_jobs_per_child,
            supervised_fd,
        )
    finally:
        if ends_with_command():
            # The process ends now: a late signal must not kill a worker that already
            # drained (Python puts SIGTERM's default action back as it exits).
            stops.retire()
        else:
            stops.close()  # a caller that goes on (CliRunner) gets its handlers back
    if ends_with_command():
        exit_process(code)  # at once: the interpreter's teardown is not worth waiting for
    raise typer.Exit(code)


def _worker(
    ctx: typer.Context,
    stops: StopRequests,
    queues: str | None,
    concurrency: int | None,
    job_timeout: str | None,
    burst: bool,
    with_scheduler: bool,
    metrics_port: int | None,
    processes: int | None,
    max_jobs_per_child: int | None,
    supervised_fd: int | None,
) -> int:
    """The options, checked and mapped onto :func:`run_worker`; its exit code."""
    from queuey_core.process.scheduler import load_schedules  # noqa: PLC0415
    from queuey_core.process.worker import run_worker  # noqa: PLC0415
    from queuey_core.settings import duration  # noqa: PLC0415

    seconds = None
    if job_timeout is not None:
        try:
            seconds = duration(job_timeout)
        except ValueError as exc:
            raise usage(f"--job-timeout: {exc}") from None
        try:
            check_positive(seconds, "--job-timeout")
        except ValueError as exc:
            raise usage(str(exc)) from None
    st = state(ctx)
    settings = st.settings()
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
    schedules = None
    if with_scheduler:
        schedules = load_schedules(settings, (d.handler for d in found), where=st.where())
        if not schedules:
            raise usage("--with-scheduler: no schedules configured (schedules.NAME tables)")
    return run_worker(
        settings,
        handlers=[d.handler for d in found],
        queues=consume,
        concurrency=concurrency,
        processes=processes,
        max_jobs_per_child=max_jobs_per_child,
        job_timeout=seconds,
        metrics_port=metrics_port,
        burst=burst,
        with_scheduler=with_scheduler,
        schedules=schedules,
        child_command=global_options(ctx),
        supervised_fd=supervised_fd,
        stops=stops,
    )


def global_options(ctx: typer.Context) -> list[str]:
    """How a supervisor's child starts: this ``queuey``, with the same global options
    (the library adds ``worker`` and the worker's options)."""
    root = ctx.find_root().params
    command = [sys.executable, "-m", "queuey_cli"]
    for path in root.get("config_path") or []:
        command += ["--config", str(path)]
    log_format = root.get("log_format")
    if log_format is not None:
        command += ["--log-format", str(getattr(log_format, "value", log_format))]
    if root.get("log_level"):
        command += ["--log-level", str(root["log_level"])]
    return command
