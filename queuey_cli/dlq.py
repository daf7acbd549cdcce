"""``queuey dlq``: list, show, requeue and purge dead letters."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from queuey_cli.common import backend, cli_errors, state, usage
from queuey_cli.output import add_row, out, print_json, printable, say, table
from queuey_core import DeadLetter

app = typer.Typer(help="Dead letters: list, show, requeue, purge.", no_args_is_help=True)

QueueOption = Annotated[str | None, typer.Option("--queue", "-q", help="One queue (default: all).")]


def _names(ctx: typer.Context, queue: str | None) -> list[str]:
    """The configured queues to look at: one, checked, or all."""
    names = list(state(ctx).settings().queue_set())
    if queue is not None:
        if queue not in names:
            raise usage(f"unknown queue {queue!r} (configured: {', '.join(names)})")
        return [queue]
    return names


def _queues(ctx: typer.Context, queue: str | None) -> tuple[Any, list[str]]:
    names = _names(ctx, queue)
    return backend(state(ctx).settings()), names


# A dead letter's reason and time come from message headers, which anything that can
# publish to a dead-letter queue can set: whatever they hold, the listing goes on.


def _dead_at(dead: DeadLetter) -> int | None:
    """When it died (ms since the epoch), or None when the header is missing or odd."""
    value: object = dead.dead_at
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _when(dead: DeadLetter) -> str:
    ms = _dead_at(dead)
    if ms is None:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    except (OverflowError, OSError, ValueError):  # a year beyond what the C library takes
        return "unknown"


def _reason(dead: DeadLetter) -> str | None:
    value: object = dead.reason
    return value if isinstance(value, str) else None


def _as_dict(dead: DeadLetter) -> dict[str, Any]:
    env = dead.envelope
    return {
        "job_id": str(env.job_id),
        "job_type": env.job_type,
        "queue": env.queue,
        "attempt": env.attempt,
        "deferrals": env.deferrals,
        "reason": _reason(dead),
        "dead_at": _dead_at(dead),
        "payload": env.payload,
    }


@app.command("list")
@cli_errors
def list_(
    ctx: typer.Context,
    queue: QueueOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many per queue.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """List dead letters, oldest first, without removing or reordering anything."""
    broker, names = _queues(ctx, queue)
    found = [d for name in names for d in broker.list_dead_letters(name, limit=limit)]
    broker.close()
    if as_json:
        print_json([_as_dict(d) for d in found])
        return
    t = table(title="dead letters")
    t.add_column("job id", no_wrap=True, min_width=36)
    for column in ("type", "queue", "attempts", "reason", "when"):
        t.add_column(column, overflow="fold")
    for d in found:
        env = d.envelope
        reason = _reason(d)
        add_row(
            t,
            env.job_id,
            env.job_type,
            env.queue,
            env.attempt,
            "unknown" if reason is None else reason,
            _when(d),
        )
    out.print(t)


def _find(broker: Any, names: list[str], job_id: str) -> DeadLetter | None:
    for name in names:
        for dead in broker.list_dead_letters(name):
            if str(dead.envelope.job_id) == job_id:
                return dead  # type: ignore[no-any-return]
    return None


@app.command("show")
@cli_errors
def show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    queue: QueueOption = None,
) -> None:
    """Show one dead letter in full, as JSON."""
    broker, names = _queues(ctx, queue)
    dead = _find(broker, names, job_id)
    broker.close()
    if dead is None:
        raise usage(f"no dead letter with job id {job_id}")
    print_json(_as_dict(dead))


@app.command("requeue")
@cli_errors
def requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job ids to requeue.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Requeue every dead letter.")] = False,
    queue: QueueOption = None,
) -> None:
    """Send dead letters back to their queue, at attempt 1."""
    if bool(job_ids) == all_:
        raise usage("give job ids or --all")
    broker, names = _queues(ctx, queue)
    moved = 0
    if all_:
        for name in names:
            moved += broker.requeue_dead_letters(name)
    else:
        wanted = set(job_ids or [])
        for name in names:
            here = [str(d.envelope.job_id) for d in broker.list_dead_letters(name)]
            mine = sorted(wanted.intersection(here))
            if mine:
                moved += broker.requeue_dead_letters(name, mine)
                wanted -= set(mine)
        if wanted:
            broker.close()
            say(f"requeued {moved}")
            raise usage(f"no dead letter with job id {', '.join(sorted(wanted))}")
    broker.close()
    say(f"requeued {moved}")


@app.command("purge")
@cli_errors
def purge(
    ctx: typer.Context,
    queue: Annotated[str, typer.Option("--queue", "-q", help="The queue whose dead letters go.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every dead letter of one queue."""
    names = _names(ctx, queue)
    if not yes:
        if not sys.stdin.isatty():
            raise usage("not confirmed: stdin is not a terminal (use --yes in scripts)")
        if not typer.confirm(f"delete every dead letter of {printable(queue)}?", err=True):
            raise usage("not confirmed")
    broker = backend(state(ctx).settings())
    purged = broker.purge_dead_letters(names[0])
    broker.close()
    say(f"purged {purged}")
