"""The dead letters of a queue: a page at a time, filtered by job type and reason, and
one dead letter's whole envelope.

Read through :class:`~queuey_core.backends.capabilities.DeadLetterTools`, as ``queuey
dlq`` reads them: ``dead_letter_page`` fetches one page (the backend never hands over
the whole queue), ``get_dead_letter`` one letter by its handle.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from queuey_core.backends.capabilities import DeadLetter, UndecodableDeadLetter
from queuey_core.job_ids import id_text_of_key
from queuey_dashboard.actions import dead_letter_tools, queue_of
from queuey_dashboard.rendering import render

#: Page sizes offered; the largest is the most one request may ask for.
PAGE_SIZES = (25, 50, 100, 200, 500)
#: The longest filter value taken (a job type is at most 255 bytes on the wire).
MAX_FILTER = 500
#: The furthest offset asked for (a dead-letter queue beyond it is not paged to).
MAX_OFFSET = 100_000_000


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise HTTPException(400, f"{name}: not a whole number") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name}: must be from {low} to {high}")
    return value


def _filter(request: Request, name: str) -> str | None:
    text = request.query_params.get(name, "").strip()
    if len(text) > MAX_FILTER:
        raise HTTPException(400, f"{name}: at most {MAX_FILTER} characters")
    return text or None


def letter_view(letter: Any) -> dict[str, Any]:
    """A dead letter as the templates show it (every value shown as text)."""
    if isinstance(letter, UndecodableDeadLetter):
        return {
            "handle": letter.handle,
            "decodable": False,
            "job_type": None,
            "reason": letter.reason,
            "dead_at": letter.dead_at,
            "error": letter.error,
            "preview": letter.preview,
        }
    assert isinstance(letter, DeadLetter)
    env = letter.envelope
    return {
        "handle": letter.handle,
        "decodable": True,
        "job_type": env.job_type,
        "reason": letter.reason,
        "dead_at": letter.dead_at,
        "attempt": env.attempt,
        "envelope": env.model_dump(mode="json"),
    }


def dead_letter_rows(request: Request) -> dict[str, Any]:
    """One page of a queue's dead letters, with what the paging links need."""
    queue = queue_of(request)
    tools = dead_letter_tools(request)
    offset = _int(request, "offset", 0, 0, MAX_OFFSET)
    limit = _int(request, "limit", 50, 1, PAGE_SIZES[-1])
    job_type = _filter(request, "job_type")
    reason = _filter(request, "reason")
    page = tools.dead_letter_page(
        queue, offset=offset, limit=limit, job_type=job_type, reason=reason
    )
    return {
        "queue": queue,
        "letters": [letter_view(d) for d in page.letters],
        "total": page.total,
        "offset": offset,
        "limit": limit,
        "next_offset": page.next_offset,
        "previous_offset": max(0, offset - limit) if offset else None,
        "job_type": job_type or "",
        "reason": reason or "",
        "page_sizes": PAGE_SIZES,
    }


def dead_letters(request: Request) -> Response:
    """A queue's dead letters, a page at a time."""
    return render(request, "dead_letters.html", nav="dead", **dead_letter_rows(request))


def dead_letters_fragment(request: Request) -> Response:
    """The page's table, for htmx to refresh."""
    return render(request, "_dead_letters.html", **dead_letter_rows(request))


def dead_letter(request: Request) -> Response:
    """One dead letter in full: its envelope, reason and time."""
    queue = queue_of(request)
    handle = request.query_params.get("handle", "")
    if not handle or len(handle) > MAX_FILTER:
        raise HTTPException(400, "handle: give the job id (or handle) of a dead letter")
    tools = dead_letter_tools(request)
    found = tools.get_dead_letter(queue, handle)
    derived = id_text_of_key(handle)
    if found is None and derived is not None:  # the key given to enqueue --job-id
        found = tools.get_dead_letter(queue, derived)
    if found is None:
        raise HTTPException(404, f"no dead letter {handle!r} in {queue}")
    return render(request, "dead_letter.html", nav="dead", queue=queue, letter=letter_view(found))


def purge_confirmation(request: Request) -> Response:
    """The page that asks before a purge."""
    queue = queue_of(request)
    tools = dead_letter_tools(request)
    total = tools.dead_letter_page(queue, offset=0, limit=1).total
    return render(request, "purge.html", nav="dead", queue=queue, total=total)
