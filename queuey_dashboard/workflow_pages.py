"""A workflow's page: its graph drawn with each member's state, and a lookup by id.

Read through :func:`~queuey_core.workflows.read_workflow` on the store that holds
workflows, as ``queuey workflow show`` reads it. The graph is an SVG laid out here, in
columns by depth (a member stands one column right of the deepest member it waits for),
drawn by the template with every text escaped; a workflow of more than
:data:`MAX_DRAWN` members is shown as counts by state and a table of its first members.
While the workflow can still move on its own (:func:`is_live`), the page polls its
fragment every refresh, as the overview does; once it cannot, it stops asking.
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from queuey_core.workflows import MemberView, WorkflowView, read_workflow, tables
from queuey_dashboard.rendering import dashboard_of, render

#: Member states a worker still moves on without anyone acting (a waiting member moves
#: only when one of these ends, so it does not count).
IN_FLIGHT = frozenset({tables.READY, tables.SENT, tables.STARTED})
#: The most members drawn as a graph (a bigger one gets its counts and a table).
MAX_DRAWN = 300
#: A node's box, and the space between columns and rows (SVG user units).
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 170, 44, 70, 16, 10


@dataclass(frozen=True, slots=True)
class Box:
    """A member where the SVG draws it."""

    node: MemberView
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Edge:
    """A line from a dependency's right side to its dependant's left side."""

    x1: int
    y1: int
    x2: int
    y2: int


def layout(nodes: tuple[MemberView, ...]) -> tuple[list[Box], list[Edge], int, int]:
    """Boxes in columns by depth, the edges between them, and the drawing's size."""
    depth: dict[str, int] = {}
    for n in nodes:  # dependencies always come earlier
        depth[n.job_id] = 1 + max((depth[a] for a in n.after), default=-1)
    last = max(depth.values(), default=0)
    for n in nodes:
        if n.role != "member":
            depth[n.job_id] = last + 1  # the error callback, in a column of its own
    rows: dict[int, int] = collections.Counter()
    boxes: dict[str, Box] = {}
    for n in nodes:
        column = depth[n.job_id]
        row = rows[column]
        rows[column] += 1
        x = MARGIN + column * (BOX_W + GAP_X)
        boxes[n.job_id] = Box(n, x, MARGIN + row * (BOX_H + GAP_Y))
    edges = [
        Edge(
            boxes[a].x + BOX_W,
            boxes[a].y + BOX_H // 2,
            boxes[n.job_id].x,
            boxes[n.job_id].y + BOX_H // 2,
        )
        for n in nodes
        for a in n.after
    ]
    width = MARGIN * 2 + (max(depth.values(), default=0) + 1) * (BOX_W + GAP_X) - GAP_X
    height = MARGIN * 2 + max(rows.values(), default=1) * (BOX_H + GAP_Y) - GAP_Y
    return list(boxes.values()), edges, width, height


def workflows(request: Request) -> Response:
    """The lookup form (a workflow by id, with ``?workflow_id=``)."""
    wanted = request.query_params.get("workflow_id", "").strip()
    if wanted:
        return workflow(request, wanted)
    store = dashboard_of(request).workflow_store()
    return render(request, "workflows.html", nav="workflows", available=store is not None)


def is_live(flow: WorkflowView) -> bool:
    """Whether ``flow`` can still change with nobody acting: it runs, or a member is in
    flight (a failed workflow's member of a group still running, say). A failed one
    that a requeued dead letter revives is seen on the next load."""
    return flow.state == tables.RUNNING or any(n.state in IN_FLIGHT for n in flow.nodes)


def workflow_context(request: Request, text: str) -> dict[str, Any] | None:
    """What a workflow's page and its fragment draw (None: no store holds workflows).

    Raises:
        HTTPException: 400 for a malformed id, 404 for an unknown workflow.
    """
    try:
        wanted = uuid.UUID(text)
    except ValueError:
        raise HTTPException(400, "not a workflow id (a UUID)") from None
    store = dashboard_of(request).workflow_store()
    if store is None:
        return None
    found = read_workflow(store, wanted)
    if found is None:
        raise HTTPException(404, f"no workflow {wanted} in the store")
    context: dict[str, Any] = {
        "flow": found,
        "live": is_live(found),
        "states": collections.Counter(n.state for n in found.nodes),
    }
    if len(found.nodes) <= MAX_DRAWN:
        boxes, edges, width, height = layout(found.nodes)
        context.update(
            boxes=boxes, edges=edges, width=width, height=height, box_w=BOX_W, box_h=BOX_H
        )
    positions = {n.job_id: n.position for n in found.nodes}
    context["members"] = [
        (n, ",".join(str(positions[a]) for a in n.after)) for n in found.nodes[:MAX_DRAWN]
    ]
    return context


def workflow(request: Request, workflow_id: str | None = None) -> Response:
    """One workflow: its state, its graph with each member's state, its members."""
    text = workflow_id if workflow_id is not None else str(request.path_params["workflow_id"])
    context = workflow_context(request, text)
    if context is None:
        return render(request, "workflows.html", nav="workflows", available=False)
    return render(request, "workflow.html", nav="workflows", **context)


def workflow_fragment(request: Request) -> Response:
    """The changing part of a workflow's page, for htmx to swap in every refresh."""
    context = workflow_context(request, str(request.path_params["workflow_id"]))
    if context is None:
        raise HTTPException(404, "no store holds workflows")
    return render(request, "_workflow.html", **context)
