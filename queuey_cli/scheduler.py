"""``queuey scheduler`` and ``queuey schedules``: periodic jobs.

The schedules are the ``[schedules.NAME]`` tables of the configuration, each payload
checked against its job model (found by handler discovery) before anything connects.
``queuey scheduler`` maps its options onto :func:`queuey_core.process.run_scheduler`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, state, usage
from queuey_cli.output import Column, Exit, error, listing, out, print_json

if TYPE_CHECKING:
    from queuey_core import QueueSet, Schedule
    from queuey_core.settings import Settings

# The schedules, the producer and the settings (pydantic) are imported where they are
# used, so that `queuey scheduler --help` goes without (docs/performance.md).

schedules_app = typer.Typer(
    help="The schedules of the configuration: list them with their last and next firing "
    "(the default), or fire one now.",
    invoke_without_command=True,
)


def _configured(ctx: typer.Context) -> tuple[Settings, QueueSet, list[Schedule]]:
    from queuey_core.process.scheduler import load_schedules  # noqa: PLC0415

    st = state(ctx)
    settings = st.settings()
    queue_set = settings.queue_set()
    found = st.handlers(queue_set)
    handlers = [d.handler for d in found]
    return settings, queue_set, load_schedules(settings, handlers, where=st.where())


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
    from queuey_core.process.scheduler import run_scheduler  # noqa: PLC0415

    settings, _queue_set, schedules = _configured(ctx)
    if not schedules:
        raise usage("no schedules to run: add schedules.NAME tables to the configuration")
    code = run_scheduler(settings, schedules=schedules, metrics_port=metrics_port, on_error=error)
    raise typer.Exit(code)


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
    from queuey_core.schedules import Cron  # noqa: PLC0415

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
    from queuey_core.backends.capabilities import SupportsSchedules, require  # noqa: PLC0415

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
    from queuey_core import DuplicateJobError, QueueSet  # noqa: PLC0415
    from queuey_core.flow.unique_setup import check_key_store, producer_options  # noqa: PLC0415
    from queuey_core.producer import Producer  # noqa: PLC0415

    settings, queue_set, configured = _configured(ctx)
    chosen = {s.name: s for s in configured}.get(name)
    if chosen is None:
        known = ", ".join(s.name for s in configured) or "none configured"
        raise usage(f"unknown schedule {name!r} (known: {known})")
    check_key_store(settings)
    broker = backend(settings)
    try:
        # A producer of this schedule's queue only: it declares that one, as before.
        producer = Producer(
            broker,
            QueueSet([queue_set[chosen.job.QUEUE]]),
            **producer_options(broker, settings),
        )
        job_id = producer.enqueue(chosen.job, priority=chosen.priority)
    except DuplicateJobError as exc:
        out.print(str(exc.existing), highlight=False)
        error(f"not fired: a duplicate of job {exc.existing}, which holds its unique key")
        raise typer.Exit(Exit.DUPLICATE) from None
    finally:
        broker.close()
    out.print(str(job_id), highlight=False)
