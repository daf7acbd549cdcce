"""The writes: drain a worker, fire a schedule, requeue, delete or purge dead letters,
cancel a job, pause or resume a queue.

Every one goes through :func:`write`: refused (403) on a read-only dashboard or without
the CSRF token of the browser's cookie, before it reads anything else. Each does what
the matching command does, through the same library calls (``queuey workers
shutdown``, ``queuey schedules fire``, ``queuey dlq requeue|delete|purge``, ``queuey
cancel``, ``queuey queues pause|resume``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from queuey_core.backends.capabilities import (
    DeadLetterTools,
    SupportsCancellation,
    SupportsControl,
    SupportsPause,
)
from queuey_core.control import Selection, shutdown_workers
from queuey_core.job_ids import job_id_for
from queuey_core.queues import QueueSet
from queuey_dashboard.pages import UNROUTABLE
from queuey_dashboard.rendering import base_path, dashboard_of, error_page, is_htmx, render
from queuey_dashboard.security import CSRF_FIELD, CSRF_HEADER
from queuey_dashboard.state import WORKER_WINDOW

#: The most handles one request may name (a page shows at most 500).
MAX_HANDLES = 1000
#: The largest form read: a thousand handles are well under it.
MAX_BODY = 256 * 1024
#: The event htmx fires after a write: every live part of the page refreshes at once.
REFRESH_EVENT = "queuey-refresh"

Action = Callable[[Request, FormData], Response]


def write(action: Action) -> Callable[[Request], Awaitable[Response]]:
    """``action`` behind the read-only switch and the CSRF check, run off the event loop."""

    @functools.wraps(action)
    async def endpoint(request: Request) -> Response:
        board = dashboard_of(request)
        if board.read_only:
            return error_page(request, 403, "this dashboard is read-only: writes are refused")
        try:
            length = int(request.headers.get("content-length") or 0)
        except ValueError:
            return error_page(request, 400, "unreadable Content-Length")
        if length > MAX_BODY or "chunked" in request.headers.get("transfer-encoding", ""):
            return error_page(request, 413, f"a form of at most {MAX_BODY // 1024} KiB")
        try:
            form = await request.form(max_files=0, max_fields=MAX_HANDLES + 10)
        except HTTPException as exc:
            return error_page(request, 400, f"unreadable form: {exc.detail}")
        given = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD)
        cookie = getattr(request.state, "csrf_cookie", None)
        if not board.csrf.valid(cookie, given if isinstance(given, str) else None):
            return error_page(
                request, 403, "missing or wrong CSRF token: reload the page and try again"
            )
        return await run_in_threadpool(action, request, form)

    return endpoint


def done(request: Request, message: str, back: str) -> Response:
    """A write went through: a notice for htmx (and a refresh of the page's live parts),
    else back to ``back`` (a path under the dashboard)."""
    if is_htmx(request):
        response = render(request, "_notice.html", message=message, failed=False)
        response.headers["HX-Trigger"] = REFRESH_EVENT
        return response
    return RedirectResponse(base_path(request) + back, status_code=303)


def queue_of(request: Request) -> str:
    """The `{queue}` of the path: a configured queue (or the unroutable one), else 404."""
    board = dashboard_of(request)
    name = str(request.path_params["queue"])
    if name not in board.queue_names and name != UNROUTABLE:
        raise HTTPException(404, f"no configured queue {name!r}")
    return name


def job_id_of(text: str) -> uuid.UUID:
    """A job id from a path or a form: a UUID, or the key it was enqueued with
    (``--job-id order-42``), turned into its id as the producer did; else 400."""
    try:
        return job_id_for(text)
    except ValueError:
        raise HTTPException(400, "not a job id (a UUID, or the key it was enqueued with)") from None


def dead_letter_tools(request: Request) -> DeadLetterTools:
    """The backend as DeadLetterTools, or 404 saying this backend has none."""
    backend = dashboard_of(request).dead_letter_backend()
    if not isinstance(backend, DeadLetterTools):
        raise HTTPException(404, "dead letters are not available on this backend")
    return backend


def _handles(form: FormData) -> list[str]:
    handles = [h for h in form.getlist("handle") if isinstance(h, str) and h]
    if not handles:
        raise HTTPException(400, "choose at least one dead letter")
    if len(handles) > MAX_HANDLES:
        raise HTTPException(400, f"at most {MAX_HANDLES} dead letters at a time")
    return handles


@write
def requeue(request: Request, form: FormData) -> Response:
    """Requeue the chosen dead letters (``handle`` fields) at attempt 1."""
    queue = queue_of(request)
    handles = _handles(form)
    moved = dead_letter_tools(request).requeue_dead_letters(queue, handles)
    left = len(handles) - moved
    note = f" ({left} not requeued: gone already, or not an envelope)" if left else ""
    return done(request, f"requeued {moved} of {queue}{note}", f"/queues/{queue}/dead-letters")


@write
def delete(request: Request, form: FormData) -> Response:
    """Delete the chosen dead letters."""
    queue = queue_of(request)
    handles = _handles(form)
    deleted = dead_letter_tools(request).delete_dead_letters(queue, handles)
    return done(request, f"deleted {deleted} of {queue}", f"/queues/{queue}/dead-letters")


@write
def purge(request: Request, form: FormData) -> Response:
    """Delete every dead letter of a queue, once its name is typed as confirmation."""
    queue = queue_of(request)
    if form.get("confirm") != queue:
        raise HTTPException(400, "not confirmed: type the queue's name to purge it")
    purged = dead_letter_tools(request).purge_dead_letters(queue)
    return done(
        request, f"purged {purged} dead letters of {queue}", f"/queues/{queue}/dead-letters"
    )


@write
def drain(request: Request, form: FormData) -> Response:
    """Ask one worker (by id) to drain as on SIGTERM."""
    board = dashboard_of(request)
    worker_id = str(request.path_params["worker_id"])
    control = board.control_backend()
    if not isinstance(control, SupportsControl):
        raise HTTPException(404, "live workers are not available on this backend")
    if len(worker_id) > 255:
        raise HTTPException(400, "not a worker id")
    accepted = shutdown_workers(
        control,
        Selection(ids=(worker_id,)),
        timeout=WORKER_WINDOW,
        secret=board.control_secret(),
    )
    board.forget_workers()
    if not accepted:
        raise HTTPException(404, f"no live worker {worker_id} answered")
    return done(request, f"draining {worker_id} (as on SIGTERM)", "/workers")


@write
def cancel(request: Request, form: FormData) -> Response:
    """Cancel one job: a waiting one never runs, a running one is told to stop."""
    from queuey_core.results import CancelVerdict, cancel_jobs  # noqa: PLC0415

    board = dashboard_of(request)
    job_id = job_id_of(str(request.path_params["job_id"]))
    backend = board.backend()
    if not isinstance(backend, SupportsCancellation):
        raise HTTPException(404, "cancelling is not available on this backend")
    verdict = cancel_jobs(backend, [job_id], store=board.job_store())[job_id]
    if verdict is CancelVerdict.FINISHED:
        raise HTTPException(409, f"job {job_id}: {verdict.said}")
    return done(request, f"job {job_id}: {verdict.said}", f"/jobs/{job_id}")


@write
def fire(request: Request, form: FormData) -> Response:
    """Enqueue one job of a schedule now; its ticks are unchanged."""
    from queuey_core.errors import DuplicateJobError  # noqa: PLC0415
    from queuey_core.flow.unique_setup import producer_options  # noqa: PLC0415
    from queuey_core.producer import Producer  # noqa: PLC0415

    board = dashboard_of(request)
    name = str(request.path_params["name"])
    chosen = {s.name: s for s in board.schedules()}.get(name)
    if chosen is None:
        raise HTTPException(404, f"no schedule {name!r}")
    queue_set = board.settings.queue_set()
    # A producer of this schedule's queue only, as `queuey schedules fire` makes.
    broker = board.backend()
    producer = Producer(
        broker,
        QueueSet([queue_set[chosen.job.QUEUE]]),
        **producer_options(broker, board.settings),
    )
    try:
        job_id = producer.enqueue(chosen.job, priority=chosen.priority)
    except DuplicateJobError as exc:
        raise HTTPException(
            409, f"{name}: not fired, a duplicate of job {exc.existing}, which holds its unique key"
        ) from None
    return done(request, f"fired {name}: job {job_id}", "/schedules")


@write
def pause(request: Request, form: FormData) -> Response:
    """Pause a queue: workers start none of its jobs until it is resumed."""
    return _pause_or_resume(request, paused=True)


@write
def resume(request: Request, form: FormData) -> Response:
    """Resume a paused queue: workers take its jobs again."""
    return _pause_or_resume(request, paused=False)


def _pause_or_resume(request: Request, *, paused: bool) -> Response:
    """What ``queuey queues pause|resume`` does, through the same library call."""
    from queuey_core.flow.pause import pause_queue, resume_queue  # noqa: PLC0415

    board = dashboard_of(request)
    queue = queue_of(request)
    if queue == UNROUTABLE:
        raise HTTPException(404, f"{queue} is not a queue that workers consume")
    backend = board.backend()
    if not isinstance(backend, SupportsPause):
        raise HTTPException(404, "pausing queues is not available on this backend")
    change = (pause_queue if paused else resume_queue)(
        backend, queue, secret=board.control_secret()
    )
    if not change.changed:
        said = f"{queue} was {'paused' if paused else 'not paused'} already"
    elif paused:
        said = f"paused {queue}: workers start none of its jobs until it is resumed"
    else:
        said = f"resumed {queue}: workers take its jobs again"
    return done(request, said, "/")
