"""``queuey queues``: what is waiting where, once (table, plain text or JSON) or live;
``queuey queues pause NAME`` and ``resume NAME`` (:mod:`queuey_core.flow.pause`).

A configured queue that does not exist on the broker yet (nothing declared it: no
worker or enqueue has run) is shown as "not declared yet", never a NOT_FOUND failure.
Unacked counts come from the management API only (:mod:`queuey_core.management_api`); on
the embedded backend (``sqlite://``) they are the jobs running (leased to a live
worker), and the delay ladder's count is what waits for its delay.
"""

from __future__ import annotations

import math
from typing import Annotated

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, control_secret, state, usage
from queuey_cli.output import is_terminal, listing, print_json, say
from queuey_cli.queue_limits import (
    HELD_COLUMN,
    KEY_COLUMNS,
    key_cells,
    key_notes,
    limit_fields,
    read_limits,
)
from queuey_cli.queue_samples import (
    COLUMNS,
    EMBEDDED_COLUMNS,
    cells,
    held_note,
    records,
    take,
    unroutable_note,
)


def interval_seconds(text: str) -> float:
    """``--interval`` in seconds: a duration (``500ms``, ``2s``) or a number, >= 0.1 s."""
    from queuey_core.settings import duration  # noqa: PLC0415 - not for `queuey queues --help`

    try:
        seconds = duration(text)
    except ValueError as exc:
        raise usage(f"--interval: {exc}") from None
    if not math.isfinite(seconds) or seconds < 0.1:
        raise usage(f"--interval: {text!r}: must be at least 100ms")
    return seconds


app = typer.Typer(
    help="Each queue's counts (--watch: live); pause or resume a queue.",
    no_args_is_help=False,
)


@app.callback(invoke_without_command=True)
@cli_errors
def queues(
    ctx: typer.Context,
    as_json: Annotated[bool, JsonOption] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="A live table, refreshed until Ctrl-C.")
    ] = False,
    interval: Annotated[
        str | None, typer.Option(help="With --watch: seconds between refreshes (default 2s).")
    ] = None,
) -> None:
    """Each queue: ready, unacked, consumers, dead letters, paused; and what the ladder holds."""
    from queuey_core.backends.capabilities import Inspectable, require  # noqa: PLC0415

    if ctx.invoked_subcommand is not None:
        return
    if watch and as_json:
        raise usage("--watch and --json do not go together: run --json at each interval instead")
    if interval is not None and not watch:
        raise usage("--interval goes with --watch")
    seconds = interval_seconds(interval) if interval is not None else 2.0
    settings = state(ctx).settings()
    names = list(settings.queue_set())
    broker = backend(settings)
    counted = require(broker, Inspectable, "`queuey queues`")
    if watch:
        # Here, not at the top: a listing without --watch does not load Rich.
        from queuey_cli.watch import watch_queues  # noqa: PLC0415

        watch_queues(broker, lambda: take(counted, settings, names), seconds)
        return
    try:
        sample = take(counted, settings, names)
    finally:
        broker.close()
    found = records(sample)
    limited, limits_error = read_limits(settings, names)
    if limited or limits_error:  # fields only where limits are declared
        for record in found:
            record.update(limit_fields(limited, limits_error, record["name"]))
    if as_json:
        doc = {
            "queues": found,
            "held": sample.inspection.held,
            "unroutable": sample.inspection.unroutable,
            "unacked_error": sample.unacked.why_not or None,
        }
        print_json({**doc, "limits_error": limits_error} if limited or limits_error else doc)
        return
    notes = [held_note(sample)]
    if not sample.embedded:  # a file has no unroutable messages: a publish is refused
        notes.append(unroutable_note(sample))
    if sample.unacked.counts is None:
        notes.append(f"unacked: n/a ({sample.unacked.why_not})")
    known = sample.unacked.counts is not None
    columns = EMBEDDED_COLUMNS if sample.embedded else COLUMNS
    rows = [cells(r, unacked_known=known) for r in found]
    if limited or limits_error:  # a column only where limits are declared
        columns = [*columns, HELD_COLUMN]
        rows = [[*row, r["held_by_limits"]] for row, r in zip(rows, found, strict=True)]
    if limits_error:
        notes.append(f"limits: n/a ({limits_error})")
    keys = key_cells(found) if limited else []
    if keys and not is_terminal():  # stdout stays one record a queue for scripts
        notes.extend(key_notes(keys))
    listing("queues", columns, rows, notes=notes)
    if keys and is_terminal():
        listing("limited keys", KEY_COLUMNS, keys)


_Queue = Annotated[str, typer.Argument(help="A configured queue's name.", show_default=False)]


@app.command("pause")
@cli_errors
def pause(ctx: typer.Context, queue: _Queue, as_json: Annotated[bool, JsonOption] = False) -> None:
    """Pause QUEUE: workers start none of its jobs until it is resumed; producers keep
    enqueueing, running jobs finish, nothing is lost."""
    _change(ctx, queue, paused=True, as_json=as_json)


@app.command("resume")
@cli_errors
def resume(ctx: typer.Context, queue: _Queue, as_json: Annotated[bool, JsonOption] = False) -> None:
    """Resume QUEUE: workers take its jobs again."""
    _change(ctx, queue, paused=False, as_json=as_json)


def _change(ctx: typer.Context, queue: str, *, paused: bool, as_json: bool) -> None:
    from queuey_core.flow.pause import pause_queue, resume_queue  # noqa: PLC0415

    settings = state(ctx).settings()
    known = list(settings.queue_set())
    broker = backend(settings)
    try:
        change = (pause_queue if paused else resume_queue)(
            broker, queue, known=known, secret=control_secret(settings)
        )
    finally:
        broker.close()
    if as_json:
        print_json(
            {
                "queue": change.queue,
                "paused": change.paused,
                "changed": change.changed,
                "workers_told": change.workers_told,
            }
        )
        return
    verb = "paused" if paused else "resumed"
    if not change.changed:
        say(f"{queue} was {'paused' if paused else 'not paused'} already")
    elif paused:
        say(f"paused {queue}: workers start none of its jobs until `queuey queues resume {queue}`")
    else:
        say(f"resumed {queue}: workers take its jobs again")
    if change.changed:
        say(f"live workers told at once: {change.workers_told} (the others see it {verb} soon)")
