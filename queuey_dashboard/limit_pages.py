"""The limits page: every rate and concurrency limit, and each key in use with its
counts (what ``queuey limits`` shows), refreshed by htmx like the other pages; and the
overview's column of the jobs limits hold out of each queue (``queuey queues``).

Owns: the page and its fragment. Must never: change a limit's state. A limit that
cannot be read (no store on RabbitMQ, the store out of reach) is said on the page.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from queuey_core.errors import QueueyError
from queuey_core.flow.limit_listing import read_limit_rows, read_queue_limits
from queuey_dashboard.rendering import dashboard_of, render


def limit_rows(request: Request) -> dict[str, Any]:
    """The limits and their keys, or the one line that says why not."""
    try:
        board = dashboard_of(request)
        return {"rows": read_limit_rows(board.settings, board.job_types())}
    except QueueyError as exc:
        return {"rows": [], "problem": str(exc)}


def queue_limits(request: Request) -> dict[str, Any]:
    """For the overview: per queue, the limits that bind it and the jobs they hold
    (``limited``: {} when no limit is declared), or the one line that says why not."""
    board = dashboard_of(request)
    try:
        found = read_queue_limits(board.settings, board.queue_names, board.job_types())
    except QueueyError as exc:
        return {"limited": {}, "limits_problem": str(exc)}
    return {"limited": found, "limits_problem": None}


def limits(request: Request) -> Response:
    """The limits page."""
    return render(request, "limits.html", nav="limits", **limit_rows(request))


def limits_fragment(request: Request) -> Response:
    """The limits' table."""
    return render(request, "_limits.html", **limit_rows(request))
