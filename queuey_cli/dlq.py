"""``queuey dlq``: list, show, requeue, delete and purge dead letters.

Every command goes through the backend's :class:`DeadLetterTools`: a page, a lookup or a
stream, never "everything, then pick" (what each costs as the queue grows:
``docs/dead-letters.md``). Besides each queue's ``<queue>.dlq``, the tools reach
``queuey.unroutable`` (delayed messages that no queue took at the end of the delay
ladder): with ``--queue queuey.unroutable``, and in every listing while it holds
anything. A message requeued from it goes to the queue its envelope names, once that
queue exists.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, state, usage
from queuey_cli.dlq_find import UNROUTABLE, delete_some, find, requeue_some
from queuey_cli.dlq_format import as_dict, cells, stream_json
from queuey_cli.dlq_import import import_first
from queuey_cli.dlq_listing import listed, write_rows
from queuey_cli.dlq_progress import moving
from queuey_cli.output import err, print_json, say
from queuey_core.logs import escape_controls

# The backends' types (pydantic, the envelope) are imported where they are used, so
# that `queuey dlq --help` goes without (docs/performance.md).

app = typer.Typer(
    help="Dead letters: list, show, requeue, delete, purge, import.", no_args_is_help=True
)

QueueOption = Annotated[
    str | None,
    typer.Option(
        "--queue",
        "-q",
        help="One queue, or queuey.unroutable (default: all, with queuey.unroutable).",
    ),
]


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


def _queues(
    ctx: typer.Context, queue: str | None, *, importing: bool = True
) -> tuple[Any, list[str], list[str]]:
    """A backend, the chosen queues whose dead-letter queue exists, and those not
    declared yet (listing one would be a NOT_FOUND: there is nothing in it to list).
    ``importing``: with a job store, what reached ``<queue>.dlq`` is imported first,
    with a bar (:mod:`.dlq_import`)."""
    from queuey_core.backends.capabilities import DeadLetterTools, Inspectable, require  # noqa: PLC0415

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
        if importing:
            import_first(broker, there)
    except BaseException:
        broker.close()
        raise
    return broker, there, missing


def _not_declared(names: list[str]) -> list[str]:
    return [f"queue {escape_controls(repr(n))}: not declared yet, no dead letters" for n in names]


JobTypeOption = Annotated[
    str | None, typer.Option("--job-type", "-t", help="Only dead letters of this job type.")
]
ReasonOption = Annotated[
    str | None,
    typer.Option("--reason", "-r", help="Only dead letters whose reason contains this (any case)."),
]


def _counts(broker: Any, names: list[str]) -> dict[str, int | None]:
    """How many dead letters each of ``names`` holds now (None: not known)."""
    from queuey_core.backends.capabilities import KeepsDeadLettersInStore  # noqa: PLC0415

    queues = [n for n in names if n != UNROUTABLE]
    inspection = broker.inspect(queues)
    if isinstance(broker, KeepsDeadLettersInStore):
        inspection = broker.with_stored_dead_letters(inspection)
    found: dict[str, int | None] = {
        n: (c.dead_letters if (c := inspection.queues.get(n)) is not None else None) for n in queues
    }
    if UNROUTABLE in names:
        found[UNROUTABLE] = inspection.unroutable
    return found


@app.command("list")
@cli_errors
def list_(
    ctx: typer.Context,
    queue: QueueOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many per queue.")] = 100,
    offset: Annotated[
        int, typer.Option(min=0, help="Skip this many (of those that match) per queue.")
    ] = 0,
    job_type: JobTypeOption = None,
    reason: ReasonOption = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every one, streamed (no --limit or --offset).")
    ] = False,
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """List dead letters, oldest first, without removing or reordering anything.

    A page at a time (--offset, --limit; the footer says where the next one starts), or
    everything with --all, written as it is read. Messages that are not queuey envelopes
    are listed too, by message id or #position. A queue not declared yet on the broker
    is named as such (on stderr with --json).
    """
    broker, names, missing = _queues(ctx, queue)
    notes = _not_declared(missing)
    window = (0, None) if all_ else (offset, limit)
    try:
        found = listed(broker, names, window, job_type, reason, notes)
        if as_json:
            stream_json(as_dict(name, d) for name, d in found)
        else:
            write_rows((cells(name, d) for name, d in found), notes)
    finally:
        broker.close()
    if as_json:
        for note in notes:
            say(note, to=err)


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
        found = find(broker, names, handle)
    finally:
        broker.close()
    if found is None:
        raise usage(f"no dead letter with job id {handle}")
    print_json(as_dict(*found))


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
    refused again): `dlq delete` removes them. With --all, a progress bar on a terminal;
    an interrupted requeue says how many it moved.
    """
    if bool(job_ids) == all_:
        raise usage("give job ids or --all")
    broker, names, _ = _queues(ctx, queue)
    if all_:
        moved = _requeue_all(broker, names)
        left = broker.inspect([]).unroutable if UNROUTABLE in names else 0
        broker.close()
        say(f"requeued {moved}")
        if left:
            say(f"{left} left in {UNROUTABLE}: the queue each names does not exist")
        return
    try:
        moved, wanted, stuck, homeless = requeue_some(broker, names, set(job_ids or []))
    finally:
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


def _requeue_all(broker: Any, names: list[str]) -> int:
    """Every queue's dead letters back; an interruption says what moved in all."""
    from queuey_core import DeadLetterMoveError  # noqa: PLC0415

    moved = 0
    counts = _counts(broker, names)
    try:
        for name in names:
            with moving(f"requeue {escape_controls(name)}", counts.get(name)) as progress:
                try:
                    moved += broker.requeue_dead_letters(name, progress=progress)
                except DeadLetterMoveError as exc:
                    say(f"requeued {moved + exc.moved}")
                    raise
    finally:
        broker.close()
    return moved


@app.command("delete")
@cli_errors
def delete(
    ctx: typer.Context,
    handles: Annotated[list[str], typer.Argument(help="Job ids or handles to delete.")],
    queue: QueueOption = None,
) -> None:
    """Delete chosen dead letters (envelopes or not); the others stay, in order."""
    broker, names, _ = _queues(ctx, queue)
    try:
        deleted, wanted = delete_some(broker, names, set(handles))
    finally:
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
    broker, there, _ = _queues(ctx, queue, importing=False)  # all goes: no need
    try:
        purged = 0
        if there:
            total = _counts(broker, there).get(there[0])
            with moving(f"purge {escape_controls(queue)}", total) as progress:
                purged = broker.purge_dead_letters(there[0], progress=progress)
    finally:
        broker.close()
    say(f"purged {purged}")


@app.command("import")
@cli_errors
def import_(ctx: typer.Context, queue: QueueOption = None) -> None:
    """Move what each <queue>.dlq holds into the job store, with a progress bar.

    Every dlq command does it first; this one does only that. Needs RabbitMQ with
    [results] url set (docs/dead-letters.md).
    """
    from queuey_core.backends.capabilities import KeepsDeadLettersInStore  # noqa: PLC0415

    broker, names, _ = _queues(ctx, queue, importing=False)
    try:
        stored = isinstance(broker, KeepsDeadLettersInStore) and broker.has_dead_letter_store()
        done = import_first(broker, names) if stored else 0
        if stored:
            # Empty dead-letter queues import without touching the store: look at it, so
            # that a store out of reach is said, not "imported 0".
            broker.stored_dead_letters()
    finally:
        broker.close()
    if not stored:
        raise usage("no job store: dead letters stay in <queue>.dlq (set [results] url)")
    say(f"imported {done}")
