"""Job history, where a job store is configured: the search, and one job by id.

Read through :class:`~queuey_core.results.JobStore` (``get`` and ``search``), as the
CLI reads it. Without a store the pages say so; they never guess a job's history
from the broker.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from queuey_core.results import JobState
from queuey_dashboard.actions import job_id_of
from queuey_dashboard.dead_letter_pages import MAX_FILTER, PAGE_SIZES
from queuey_dashboard.rendering import dashboard_of, render

#: The furthest offset the search pages to.
MAX_OFFSET = 1_000_000


def _when(text: str | None, name: str) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(400, f"{name}: not a date and time (2026-12-01T08:00)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def search_rows(request: Request) -> dict[str, Any]:
    """The search's filters from the query, and the records found."""
    store = dashboard_of(request).job_store()
    if store is None:
        return {"available": False}
    q = request.query_params
    state_text = q.get("state", "")
    try:
        state = JobState(state_text) if state_text else None
    except ValueError:
        raise HTTPException(400, f"state: one of {', '.join(s.value for s in JobState)}") from None
    job_type = q.get("job_type", "").strip()
    queue = q.get("queue", "").strip()
    if len(job_type) > MAX_FILTER or len(queue) > MAX_FILTER:
        raise HTTPException(400, f"filters: at most {MAX_FILTER} characters")
    try:
        offset = int(q.get("offset") or 0)
        limit = int(q.get("limit") or 50)
    except ValueError:
        raise HTTPException(400, "offset and limit: whole numbers") from None
    if not (0 <= offset <= MAX_OFFSET and 1 <= limit <= PAGE_SIZES[-1]):
        raise HTTPException(400, f"offset: 0 to {MAX_OFFSET}; limit: 1 to {PAGE_SIZES[-1]}")
    since = _when(q.get("since"), "since")
    until = _when(q.get("until"), "until")
    # One more than shown: whether there is a next page, without counting them all.
    found = store.search(
        state=state,
        job_type=job_type or None,
        queue=queue or None,
        since=since,
        until=until,
        limit=limit + 1,
        offset=offset,
    )
    return {
        "available": True,
        "records": found[:limit],
        "next_offset": offset + limit if len(found) > limit else None,
        "previous_offset": max(0, offset - limit) if offset else None,
        "states": [s.value for s in JobState],
        "filters": {
            "state": state_text,
            "job_type": job_type,
            "queue": queue,
            "since": q.get("since", ""),
            "until": q.get("until", ""),
            "limit": limit,
        },
    }


def jobs(request: Request) -> Response:
    """The job search (or a job by id, with ``?job_id=``)."""
    job_id = request.query_params.get("job_id", "").strip()
    if job_id:
        return job(request, job_id)
    return render(request, "jobs.html", nav="jobs", **search_rows(request))


def job(request: Request, job_id: str | None = None) -> Response:
    """One job's history: its state, attempts, error and result."""
    wanted = job_id if job_id is not None else str(request.path_params["job_id"])
    store = dashboard_of(request).job_store()
    if store is None:
        return render(request, "jobs.html", nav="jobs", available=False)
    parsed = job_id_of(wanted)
    record = store.get(parsed)
    if record is None:
        raise HTTPException(404, f"the job store does not know job {parsed}")
    return render(
        request,
        "job.html",
        nav="jobs",
        record=record.to_json(),
        cancellable=not record.state.finished,
    )
