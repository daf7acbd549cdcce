"""``queuey workers``: the live workers, asked over the broker; ``workers shutdown``.

The asking is :mod:`queuey_core.control`'s; this module chooses, prints and exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from queuey_cli import output
from queuey_cli.common import backend, cli_errors, control_secret, state, usage
from queuey_cli.output import Exit, add_row, err, error, out, print_json, say, table
from queuey_core.limits import CONTROL_REPLY_WINDOW, check_positive
from queuey_core.logs import escape_controls
from queuey_core.text import short_duration

if TYPE_CHECKING:
    from queuey_core.control import WorkerStatus

# The control plane and the settings (pydantic) are imported where they are used, so
# that `queuey workers --help` goes without (docs/performance.md).

app = typer.Typer(
    help="Live workers: list them (--json for scripts), or shut some down.",
    no_args_is_help=False,
)

#: The longest window accepted: a live worker answers within milliseconds.
MAX_TIMEOUT = 60.0

_Hosts = Annotated[
    list[str] | None, typer.Option("--host", help="Only workers on this host (repeatable).")
]
_Pids = Annotated[
    list[int] | None,
    typer.Option("--pid", min=1, help="Only the worker with this pid (repeatable)."),
]
_Ids = Annotated[
    list[str] | None,
    typer.Option("--id", help="Only the worker with this id, host:pid:xxxxxx (repeatable)."),
]
_Json = Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")]
_Timeout = Annotated[
    str,
    typer.Option(help="How long to gather replies, e.g. 500ms or 2s."),
]

#: The JSON fields shown, piped (tab-separated, under a header of these names).
FIELDS = (
    "host",
    "pid",
    "state",
    "queues",
    "concurrency",
    "running",
    "succeeded",
    "failed",
    "dead_lettered",
    "settle_failures",
    "stuck_job_threads",
    "uptime",
    "paused",
)
#: The table's headings, on a terminal: the same, a little closer together.
HEADINGS = (
    "worker",
    "state",
    "queues",
    "running",
    "succeeded",
    "failed",
    "dead letters",
    "settle failures",
    "stuck",
    "uptime",
)


@app.callback(invoke_without_command=True)
@cli_errors
def workers(
    ctx: typer.Context,
    host: _Hosts = None,
    pid: _Pids = None,
    worker_id: _Ids = None,
    as_json: _Json = False,
    timeout: _Timeout = f"{CONTROL_REPLY_WINDOW:g}s",
) -> None:
    """Every live worker (or those chosen), from the replies within --timeout."""

    if ctx.invoked_subcommand is not None:
        return
    from queuey_core.control import Selection, worker_statuses  # noqa: PLC0415

    window = _window(timeout)
    select = Selection(ids=tuple(worker_id or ()), hosts=tuple(host or ()), pids=tuple(pid or ()))
    settings = state(ctx).settings()
    broker = backend(settings)
    try:
        found = worker_statuses(broker, select, timeout=window, secret=control_secret(settings))
    finally:
        broker.close()
    if as_json:
        print_json([s.model_dump(mode="json") for s in found])
    elif found:
        _show(found)
        if len(found) > 1:
            say(totals(found), to=err)
    if not found:
        chosen = "" if select.is_everyone else f" ({select.describe()})"
        say(f"no worker answered within {window:g}s{chosen}", to=err)


@app.command("shutdown")
@cli_errors
def shutdown(
    ctx: typer.Context,
    host: _Hosts = None,
    pid: _Pids = None,
    worker_id: _Ids = None,
    everyone: Annotated[
        bool, typer.Option("--all", help="Every live worker (required when none is chosen).")
    ] = False,
    as_json: _Json = False,
    timeout: _Timeout = f"{CONTROL_REPLY_WINDOW:g}s",
) -> None:
    """Drain the chosen workers as SIGTERM would; exit 1 if none accepted."""
    from queuey_core.control import Selection, shutdown_workers  # noqa: PLC0415

    window = _window(timeout)
    select = Selection(ids=tuple(worker_id or ()), hosts=tuple(host or ()), pids=tuple(pid or ()))
    if select.is_everyone and not everyone:
        raise usage("choose workers with --host, --pid or --id, or say --all to stop every one")
    if everyone and not select.is_everyone:
        raise usage("--all stops every worker: leave out --host, --pid and --id, or --all")
    select = select.model_copy(update={"all": everyone})
    settings = state(ctx).settings()
    broker = backend(settings)
    try:
        accepted = shutdown_workers(broker, select, timeout=window, secret=control_secret(settings))
    finally:
        broker.close()
    if as_json:
        print_json([s.model_dump(mode="json") for s in accepted])
    else:
        for s in accepted:
            say(f"shutting down: host={s.host} pid={s.pid} id={s.id} (draining as on SIGTERM)")
    if not accepted:
        error(f"no worker matched ({select.describe()}) within {window:g}s")
        raise typer.Exit(Exit.FAILURE)


def _window(text: str) -> float:
    from queuey_core.settings import duration  # noqa: PLC0415

    try:
        seconds = duration(text)
    except ValueError as exc:
        raise usage(f"--timeout: {exc}") from None
    try:
        check_positive(seconds, "--timeout")
    except ValueError as exc:
        raise usage(str(exc)) from None
    if seconds > MAX_TIMEOUT:
        raise usage(f"--timeout: at most {MAX_TIMEOUT:g}s (a live worker answers at once)")
    return seconds


def totals(found: list[WorkerStatus]) -> str:
    """One line adding the workers up (the children of ``--processes`` supervisors too,
    each of which answers for itself): on stderr, so piped records stay records."""
    children = [s for s in found if s.supervisor_pid is not None]
    supervisors = {(s.host, s.supervisor_pid) for s in children}
    grouped = (
        f" ({len(children)} of them the processes of {len(supervisors)} --processes supervisors)"
        if children
        else ""
    )
    return (
        f"total: {len(found)} workers{grouped}: running "
        f"{sum(s.running for s in found)}/{sum(s.concurrency for s in found)}, "
        f"succeeded {sum(s.succeeded for s in found)}, failed {sum(s.failed for s in found)}, "
        f"dead letters {sum(s.dead_lettered for s in found)}, settle failures "
        f"{sum(s.settle_failures for s in found)}, stuck {sum(s.stuck_job_threads for s in found)}"
    )


def _show(found: list[WorkerStatus]) -> None:
    """A table on a terminal; piped, a header and one tab-separated line a worker."""
    if output.is_terminal():  # as every listing decides (output.listing)
        t = table(*HEADINGS, title="workers")
        for s in found:
            add_row(
                t,
                f"{s.host}:{s.pid}",
                s.state,
                ", ".join(f"{q} (paused)" if q in s.paused else q for q in s.queues),
                f"{s.running}/{s.concurrency}",
                s.succeeded,
                s.failed,
                s.dead_lettered,
                s.settle_failures,
                s.stuck_job_threads,
                short_duration(s.uptime),
            )
        out.print(t)
        return
    lines = ["\t".join(FIELDS)]
    for s in found:
        data = {
            **s.model_dump(),
            "queues": ",".join(s.queues),
            "uptime": f"{s.uptime:.0f}",
            "paused": ",".join(s.paused),
        }
        lines.append("\t".join(escape_controls(data[field]) for field in FIELDS))
    # Straight to the file: Rich would turn the tabs into spaces.
    out.file.write("\n".join(lines) + "\n")
