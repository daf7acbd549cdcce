"""``queuey dlq``: list, show, requeue and purge dead letters.

Besides each queue's ``<queue>.dlq``, the tools reach ``queuey.unroutable`` (delayed
messages that no queue took at the end of the delay ladder): with ``--queue
queuey.unroutable``, and in every listing while it holds anything. A message requeued
from it goes to the queue its envelope names, once that queue exists.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, state, usage
from queuey_cli.output import Column, err, listing, print_json, say
from queuey_core import DeadLetter
from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetterTools,
    Inspectable,
    UndecodableDeadLetter,
    require,
)
from queuey_core.logs import escape_controls

app = typer.Typer(help="Dead letters: list, show, requeue, delete, purge.", no_args_is_help=True)

QueueOption = Annotated[
    str | None,
    typer.Option(
        "--queue",
        "-q",
        help="One queue, or queuey.unroutable (default: all, with queuey.unroutable).",
    ),
]

#: The queue of delayed messages that no queue took (topology.UNROUTABLE; spelled here
#: so that importing the CLI does not import pika).
UNROUTABLE = "queuey.unroutable"


def _names(ctx: typer.Context, queue: str | None) -> list[str]:
    """The configured queues to look at: one, checked, or all."""
    names = list(state(ctx).settings().queue_set())
    if queue == UNROUTABLE:
        return [UNROUTABLE]
    if queue is not None:
        if queue not in names:
            raise usage(f"unknown queue {queue!r} (configured: {', '.join(names)})")
        return [queue]
    return names


def _queues(ctx: typer.Context, queue: str | None) -> tuple[Any, list[str], list[str]]:
    """A backend, the chosen queues whose dead-letter queue exists, and those not
    declared yet (listing one would be a NOT_FOUND: there is nothing in it to list)."""
    names = _names(ctx, queue)
    broker = backend(state(ctx).settings())
    try:
        require(broker, DeadLetterTools, f"`{ctx.command_path}`")
        wanted = [n for n in names if n != UNROUTABLE]
        inspection = require(broker, Inspectable, f"`{ctx.command_path}`").inspect(wanted)
        seen = inspection.queues
        there = [n for n in wanted if (c := seen[n]) is not None and c.dead_letters is not None]
        missing = [n for n in wanted if n not in there]
        # The unroutable queue is looked at only while it holds something (it does not
        # exist until a worker or producer of this version declared the ladder).
        if (queue is None or queue == UNROUTABLE) and inspection.unroutable:
            there.append(UNROUTABLE)
    except BaseException:
        broker.close()
        raise
    return broker, there, missing


def _not_declared(names: list[str]) -> list[str]:
    return [f"queue {escape_controls(repr(n))}: not declared yet, no dead letters" for n in names]


# A dead letter's reason and time come from message headers, which anything that can
# publish to a dead-letter queue can set: the backend reads them defensively, and the
# listing shows what it could not read as unknown. A message that is not an envelope
# at all is listed too, by its handle (message id, or #position), with a preview.

#: Where a dead letter was found: the queue whose dead-letter queue holds it.
Found = tuple[str, AnyDeadLetter]


def _dead_at(dead: AnyDeadLetter) -> int | None:
    """When it died (ms since the epoch), or None when the header is missing or odd."""
    value: object = dead.dead_at
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _when(dead: AnyDeadLetter) -> str:
    ms = _dead_at(dead)
    if ms is None:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    except (OverflowError, OSError, ValueError):  # a year beyond what the C library takes
        return "unknown"


def _reason(dead: AnyDeadLetter) -> str | None:
    value: object = dead.reason
    return value if isinstance(value, str) else None


def _as_dict(queue: str, dead: AnyDeadLetter) -> dict[str, Any]:
    common = {"handle": dead.handle, "dlq_of": queue, "reason": _reason(dead)}
    if isinstance(dead, UndecodableDeadLetter):
        return {
            **common,
            "decodable": False,
            "dead_at": _dead_at(dead),
            "error": dead.error,
            "preview": dead.preview,
        }
    env = dead.envelope
    return {
        **common,
        "decodable": True,
        "dead_at": _dead_at(dead),
        "job_id": str(env.job_id),
        "job_type": env.job_type,
        "queue": env.queue,
        "attempt": env.attempt,
        "deferrals": env.deferrals,
        "priority": env.priority,
        "enqueued_at": env.enqueued_at,
        "payload": env.payload,
    }


def _all(broker: Any, names: list[str], limit: int | None = None) -> list[Found]:
    return [(name, d) for name in names for d in broker.list_dead_letters(name, limit=limit)]


COLUMNS = [
    Column("job id / handle", "handle", no_wrap=True, min_width=36),
    Column("type", "job_type"),
    Column("queue", "dlq_of"),
    Column("attempts", "attempt"),
    Column("reason", "reason"),
    Column("when", "dead_at"),
]


def _cells(name: str, d: AnyDeadLetter) -> list[object]:
    reason = _reason(d)
    shown = "unknown" if reason is None else reason
    if isinstance(d, UndecodableDeadLetter):
        return [d.handle, f"(not an envelope: {d.error}) {d.preview}", name, None, shown, _when(d)]
    env = d.envelope
    return [d.handle, env.job_type, name, env.attempt, shown, _when(d)]


@app.command("list")
@cli_errors
def list_(
    ctx: typer.Context,
    queue: QueueOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many per queue.")] = 100,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """List dead letters, oldest first, without removing or reordering anything.

    Messages that are not queuey envelopes are listed too, by message id or #position.
    A queue not declared yet on the broker is named as such (on stderr with --json).
    """
    broker, names, missing = _queues(ctx, queue)
    try:
        found = _all(broker, names, limit)
    finally:
        broker.close()
    notes = _not_declared(missing)
    if as_json:
        print_json([_as_dict(name, d) for name, d in found])
        for note in notes:
            say(note, to=err)
        return
    listing("dead letters", COLUMNS, [_cells(name, d) for name, d in found], notes=notes)


def _find(broker: Any, names: list[str], handle: str) -> Found | None:
    for name, dead in _all(broker, names):
        if dead.handle == handle:
            return name, dead
    return None


@app.command("show")
@cli_errors
def show(
    ctx: typer.Context,
    handle: Annotated[str, typer.Argument(help="The job id (or handle, for a non-envelope).")],
    queue: QueueOption = None,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """Show one dead letter in full, as JSON (with or without --json)."""
    del as_json  # JSON either way; --json is taken so that every read command takes it
    broker, names, _ = _queues(ctx, queue)
    try:
        found = _find(broker, names, handle)
    finally:
        broker.close()
    if found is None:
        raise usage(f"no dead letter with job id {handle}")
    print_json(_as_dict(*found))


@app.command("requeue")
@cli_errors
def requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str] | None, typer.Argument(help="Job ids to requeue.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Requeue every dead letter.")] = False,
    queue: QueueOption = None,
) -> None:
    """Send dead letters back to their queue, at attempt 1.

    Messages that are not queuey envelopes stay where they are (they would only be
    refused again): `dlq delete` removes them.
    """
    if bool(job_ids) == all_:
        raise usage("give job ids or --all")
    broker, names, _ = _queues(ctx, queue)
    moved = 0
    if all_:
        for name in names:
            moved += broker.requeue_dead_letters(name)
        left = broker.inspect([]).unroutable if UNROUTABLE in names else 0
        broker.close()
        say(f"requeued {moved}")
        if left:
            say(f"{left} left in {UNROUTABLE}: the queue each names does not exist")
        return
    wanted = set(job_ids or [])
    stuck: set[str] = set()
    homeless: dict[str, str] = {}  # unroutable job id -> the queue it names, still missing
    for name in names:
        here = broker.list_dead_letters(name)
        stuck |= wanted.intersection(d.handle for d in here if isinstance(d, UndecodableDeadLetter))
        mine = sorted(wanted.intersection(d.handle for d in here if isinstance(d, DeadLetter)))
        if mine:
            moved += broker.requeue_dead_letters(name, mine)
            wanted -= set(mine)
            if name == UNROUTABLE:
                homeless = _still_there(broker, mine)
    broker.close()
    say(f"requeued {moved}")
    if homeless:
        where = ", ".join(
            f"{job_id} (queue {queue!r} does not exist)" for job_id, queue in homeless.items()
        )
        raise usage(f"still in {UNROUTABLE}: {where}; declare the queue, or dlq delete it")
    if stuck:
        raise usage(
            f"not a queuey envelope, cannot be requeued: {', '.join(sorted(stuck))} "
            "(dlq delete removes it)"
        )
    if wanted:
        raise usage(f"no dead letter with job id {', '.join(sorted(wanted))}")


def _still_there(broker: Any, job_ids: list[str]) -> dict[str, str]:
    """Those of ``job_ids`` still in the unroutable queue, with the queue each names."""
    return {
        d.handle: d.envelope.queue
        for d in broker.list_dead_letters(UNROUTABLE)
        if isinstance(d, DeadLetter) and d.handle in job_ids
    }


@app.command("delete")
@cli_errors
def delete(
    ctx: typer.Context,
    handles: Annotated[list[str], typer.Argument(help="Job ids or handles to delete.")],
    queue: QueueOption = None,
) -> None:
    """Delete chosen dead letters (envelopes or not); the others stay, in order."""
    broker, names, _ = _queues(ctx, queue)
    wanted = set(handles)
    deleted = 0
    for name in names:
        mine = sorted(wanted.intersection(d.handle for d in broker.list_dead_letters(name)))
        if mine:
            deleted += broker.delete_dead_letters(name, mine)
            wanted -= set(mine)
    broker.close()
    say(f"deleted {deleted}")
    if wanted:
        raise usage(f"no dead letter with job id or handle {', '.join(sorted(wanted))}")


@app.command("purge")
@cli_errors
def purge(
    ctx: typer.Context,
    queue: Annotated[str, typer.Option("--queue", "-q", help="The queue whose dead letters go.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every dead letter of one queue."""
    _names(ctx, queue)  # an unknown queue is refused before anyone is asked
    if not yes:
        if not sys.stdin.isatty():
            raise usage("not confirmed: stdin is not a terminal (use --yes in scripts)")
        if not typer.confirm(f"delete every dead letter of {escape_controls(queue)}?", err=True):
            raise usage("not confirmed")
    broker, there, _ = _queues(ctx, queue)
    try:
        purged = broker.purge_dead_letters(there[0]) if there else 0
    finally:
        broker.close()
    say(f"purged {purged}")
