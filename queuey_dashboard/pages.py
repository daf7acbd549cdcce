"""The read pages: the overview of every queue, the live workers and the schedules.

Each page has a fragment (``/fragments/...``) that htmx fetches again every refresh
interval, so the numbers move without a reload. A capability the backend lacks is
said on the page ("not available on this backend"), never an error.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from queuey_core.backends.capabilities import (
    Inspectable,
    SupportsControl,
    SupportsSchedules,
)
from queuey_core.errors import ConfigError
from queuey_core.queue_counts import look
from queuey_dashboard.limit_pages import queue_limits
from queuey_dashboard.rendering import dashboard_of, render

#: The queue of delayed messages that no queue took (topology.UNROUTABLE, spelled here
#: so that the dashboard imports no pika).
UNROUTABLE = "queuey.unroutable"


def queue_rows(request: Request) -> dict[str, Any]:
    """The overview's data: a row a queue, with its chart, and the totals."""
    board = dashboard_of(request)
    backend = board.backend()
    if not isinstance(backend, Inspectable):
        return {"available": False, "rows": []}
    found = look(backend, board.settings, board.queue_names)
    now = board.clock()
    board.depths.add(
        now,
        {name: float(c.ready) for name, c in found.inspection.queues.items() if c is not None},
    )
    unacked = found.unacked.counts
    rows = []
    for name, counts in found.inspection.queues.items():
        rows.append(
            {
                "name": name,
                "counts": counts,
                "running": None if unacked is None or counts is None else unacked.get(name),
                "chart": board.depths.chart(name, now=now),
                "paused": None if found.paused is None else name in found.paused,
            }
        )
    return {
        **queue_limits(request),
        "available": True,
        "rows": rows,
        "held": found.inspection.held,
        "unroutable": found.inspection.unroutable,
        "embedded": found.embedded,
        "running_why_not": found.unacked.why_not,
        "can_pause": found.paused is not None,
    }


def overview(request: Request) -> Response:
    """Every queue: ready, running, consumers, dead letters, and depth over time."""
    return render(request, "overview.html", nav="overview", **queue_rows(request))


def overview_fragment(request: Request) -> Response:
    """The overview's table, for htmx to swap in every refresh."""
    return render(request, "_queues.html", **queue_rows(request))


def worker_rows(request: Request) -> dict[str, Any]:
    """The live workers, asked over the control channel, and jobs done per second."""
    board = dashboard_of(request)
    if not isinstance(board.control_backend(), SupportsControl):
        return {"available": False}
    found = board.workers()
    return {
        "available": True,
        "workers": found,
        "throughput": board.throughput.chart(now=board.clock()),
    }


def workers(request: Request) -> Response:
    """The live workers, with a drain button each."""
    return render(request, "workers.html", nav="workers", **worker_rows(request))


def workers_fragment(request: Request) -> Response:
    """The workers' table."""
    return render(request, "_workers.html", **worker_rows(request))


def _moment(ms: int | None, zone: Any) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone).isoformat(timespec="seconds")


def schedule_rows(request: Request) -> dict[str, Any]:
    """Each schedule with its last and next firing."""
    board = dashboard_of(request)
    try:
        configured = board.schedules()
    except ConfigError as exc:
        return {"available": True, "problem": str(exc), "rows": []}
    if not configured:
        return {"available": True, "rows": []}
    backend = board.backend()
    last: dict[str, int] = {}
    kept = isinstance(backend, SupportsSchedules)
    if isinstance(backend, SupportsSchedules):
        store = backend.schedule_state()
        try:
            last = dict(store.last_fired([s.name for s in configured]))
        finally:
            store.close()
    now = int(time.time() * 1000)
    rows = []
    for s in configured:
        zone = getattr(s.trigger, "zone", UTC)
        rows.append(
            {
                "name": s.name,
                "job_type": s.job_type,
                "trigger": s.trigger.describe(),
                "catch_up": s.catch_up.value,
                "last": _moment(last.get(s.name), zone) if kept else "n/a",
                "next": _moment(s.trigger.next_after(now), zone),
                "payload": s.job.model_dump(mode="json"),
            }
        )
    return {"available": True, "rows": rows, "ticks_kept": kept}


def schedules(request: Request) -> Response:
    """The schedules, with "fire now"."""
    return render(request, "schedules.html", nav="schedules", **schedule_rows(request))


def schedules_fragment(request: Request) -> Response:
    """The schedules' table."""
    return render(request, "_schedules.html", **schedule_rows(request))
