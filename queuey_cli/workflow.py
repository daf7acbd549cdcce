"""``queuey workflow show|cancel`` and ``queuey enqueue --workflow FILE``.

A workflow is read from JSON (:mod:`queuey_core.workflows.described`), every job checked
against its model, then started in one transaction of the store (docs/workflows.md):
the id printed means it exists and its first members are published or in its outbox.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from queuey_cli.common import JsonOption, backend, cli_errors, parse_json, state, usage
from queuey_cli.output import Column, Exit, err, error, listing, print_json, say

if TYPE_CHECKING:
    from queuey_core.workflows import WorkflowView

T = TypeVar("T")

app = typer.Typer(
    help="Workflows: show one with its members' states, or cancel it.", no_args_is_help=True
)


def enqueue_workflow(ctx: typer.Context, source: str) -> None:
    """Start the workflow described in JSON in ``source`` (a file, or ``-`` for stdin)
    and print its id."""
    from queuey_core.workflows.described import workflow_from_json  # noqa: PLC0415
    from queuey_core.workflows.setup import workflows_for  # noqa: PLC0415

    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage(f"{source}: cannot read it ({type(exc).__name__})") from None
    data = parse_json(text, source)
    st = state(ctx)
    settings = st.settings()
    queue_set = settings.queue_set()
    models = {d.handler.job_type.NAME: d.handler.job_type for d in st.handlers(queue_set)}
    try:
        described = workflow_from_json(data, models)
        described.plan()  # every shape and field checked before connecting
    except (ValueError, TypeError) as exc:
        raise usage(f"{source}: {exc}") from None
    flows = workflows_for(settings, backend(settings))
    try:
        workflow_id = flows.start(described)
        say(workflow_id)
        view = flows.get(workflow_id)
    finally:
        flows.store.close()
    if view is not None and view.state == "failed":
        # A member refused at its first publish (a duplicate, unroutable): the truth is
        # a workflow that exists and has failed, not a plain success.
        error(f"workflow {workflow_id} failed as it started: {view.error}")
        dup = view.error.startswith("duplicate of ")
        raise typer.Exit(Exit.DUPLICATE if dup else Exit.FAILURE)


def _parse(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise usage(f"{text!r} is not a workflow id (a UUID)") from None


def _on_workflow(ctx: typer.Context, workflow_id: str, act: Callable[[Any, uuid.UUID], T]) -> T:
    """``act(workflows, id)`` on the workflows of the configured store; exit 7 when it
    answers None (no such workflow)."""
    from queuey_core.workflows.setup import workflows_for  # noqa: PLC0415

    wanted = _parse(workflow_id)
    settings = state(ctx).settings()
    flows = workflows_for(settings, backend(settings), declare=False)
    try:
        found = act(flows, wanted)
    finally:
        flows.store.close()
    if found is None:
        say(f"no workflow {wanted} in the store", to=err)
        raise typer.Exit(Exit.NO_SUCH_JOB)
    return found


@app.command()
@cli_errors
def show(
    ctx: typer.Context,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")],
    as_json: Annotated[bool, JsonOption] = False,
) -> None:
    """A workflow's state and each member's: job type, state, starts, what it waits for."""
    found = _on_workflow(ctx, workflow_id, lambda flows, wanted: flows.get(wanted))
    if as_json:
        print_json(view_json(found))
        return
    say(
        f"workflow {found.workflow_id} {found.name!r}: {found.state}, "
        f"{found.succeeded}/{found.members} succeeded, on failure: {found.on_failure}"
    )
    if found.error:
        say(f"error: {found.error}")
    positions = {n.job_id: n.position for n in found.nodes}
    listing(
        "members",
        _COLUMNS,
        (
            (
                n.position,
                n.job_type,
                n.state,
                n.starts,
                ",".join(str(positions[a]) for a in n.after) or None,
                n.role if n.role != "member" else None,
                n.job_id,
            )
            for n in found.nodes
        ),
    )


_COLUMNS = [
    Column("#", "position"),
    Column("Job type", "job_type"),
    Column("State", "state"),
    Column("Starts", "starts"),
    Column("After", "after"),
    Column("Role", "role"),
    Column("Job id", "job_id", no_wrap=True),
]


@app.command()
@cli_errors
def cancel(
    ctx: typer.Context,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")],
) -> None:
    """Cancel every member not started yet (those published too, where the broker keeps
    cancels); members running finish."""
    _on_workflow(ctx, workflow_id, lambda flows, wanted: flows.cancel(wanted))
    say(f"cancelled workflow {_parse(workflow_id)}: no member that had not started will run")


def view_json(found: WorkflowView) -> dict[str, Any]:
    """A workflow as ``--json`` and the dashboard's API give it (results left out)."""
    return {
        "workflow_id": found.workflow_id,
        "name": found.name,
        "state": found.state,
        "on_failure": found.on_failure,
        "members": found.members,
        "succeeded": found.succeeded,
        "failed": found.failed,
        "error": found.error,
        "created_at": found.created_at,
        "started_at": found.started_at,
        "updated_at": found.updated_at,
        "nodes": [
            {
                "job_id": n.job_id,
                "position": n.position,
                "role": n.role,
                "job_type": n.job_type,
                "state": n.state,
                "starts": n.starts,
                "error": n.error,
                "after": list(n.after),
            }
            for n in found.nodes
        ],
    }
