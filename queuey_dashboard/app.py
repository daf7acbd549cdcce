"""The dashboard as an ASGI application: :func:`create_app`, to serve on its own
(``queuey dashboard``, :func:`queuey_dashboard.run_dashboard`) or to mount in an
application of yours::

    from starlette.routing import Mount
    app = Starlette(routes=[Mount("/queuey", app=create_app(settings))])
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from queuey_core.errors import QueueyError
from queuey_core.settings import Settings
from queuey_dashboard import (
    actions,
    dead_letter_pages,
    job_pages,
    limit_pages,
    pages,
    workflow_pages,
)
from queuey_dashboard.rendering import HERE, http_error, queuey_error, unexpected_error
from queuey_dashboard.security import Guard
from queuey_dashboard.state import Dashboard


async def healthz(request: Request) -> JSONResponse:
    """Alive: the event loop answers (``queuey health``, a container's health check)."""
    return JSONResponse({"ok": True})


#: Every route (paths under where the dashboard is mounted). GETs read; the POSTs are
#: the writes, each behind :func:`queuey_dashboard.actions.write`.
ROUTES = [
    Route("/", pages.overview, name="overview"),
    Route("/fragments/queues", pages.overview_fragment),
    Route("/workers", pages.workers, name="workers"),
    Route("/fragments/workers", pages.workers_fragment),
    Route("/workers/{worker_id}/drain", actions.drain, methods=["POST"]),
    Route("/schedules", pages.schedules, name="schedules"),
    Route("/fragments/schedules", pages.schedules_fragment),
    Route("/schedules/{name}/fire", actions.fire, methods=["POST"]),
    Route("/queues/{queue}/pause", actions.pause, methods=["POST"]),
    Route("/queues/{queue}/resume", actions.resume, methods=["POST"]),
    Route("/queues/{queue}/dead-letters", dead_letter_pages.dead_letters),
    Route("/fragments/queues/{queue}/dead-letters", dead_letter_pages.dead_letters_fragment),
    Route("/queues/{queue}/dead-letter", dead_letter_pages.dead_letter),
    Route("/queues/{queue}/dead-letters/purge", dead_letter_pages.purge_confirmation),
    Route("/queues/{queue}/dead-letters/requeue", actions.requeue, methods=["POST"]),
    Route("/queues/{queue}/dead-letters/delete", actions.delete, methods=["POST"]),
    Route("/queues/{queue}/dead-letters/purge", actions.purge, methods=["POST"]),
    Route("/limits", limit_pages.limits, name="limits"),
    Route("/fragments/limits", limit_pages.limits_fragment),
    Route("/jobs", job_pages.jobs, name="jobs"),
    Route("/jobs/{job_id}", job_pages.job),
    Route("/jobs/{job_id}/cancel", actions.cancel, methods=["POST"]),
    Route("/workflows", workflow_pages.workflows, name="workflows"),
    Route("/workflows/{workflow_id}", workflow_pages.workflow),
    Route("/fragments/workflows/{workflow_id}", workflow_pages.workflow_fragment),
    Route("/healthz", healthz),
    Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
]


def create_app(
    settings: Settings,
    *,
    backend: Any = None,
    control_backend: Any = None,
    read_only: bool | None = None,
    token: str | None = None,
    job_store: Any = None,
    schedules: Any = None,
) -> Starlette:
    """The dashboard for ``settings``' queues, as a Starlette app.

    Args:
        backend: the backend to count and work on (default: opened from ``settings`` on
            first use, and closed with the app).
        control_backend: the backend the workers are asked through (default: another
            one opened from ``settings``, or ``backend`` when that is given).
        read_only: hide every button and refuse every write (default:
            ``[dashboard] read_only``).
        token: required of every request (default: ``[dashboard] token``). Without
            one, only requests to a loopback name (127.0.0.1, localhost) are answered.
        job_store: a :class:`~queuey_core.results.JobStore` for the job pages.
        schedules: the schedules to show (default: the settings', checked against the
            handlers installed).
    """
    board = Dashboard(
        settings,
        backend=backend,
        control_backend=control_backend,
        read_only=read_only,
        token=token,
        job_store=job_store,
        schedules=schedules,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            board.close()

    app = Starlette(
        routes=ROUTES,
        middleware=[Middleware(Guard, token=board.token, csrf=board.csrf)],
        exception_handlers={
            HTTPException: http_error,
            QueueyError: queuey_error,
            Exception: unexpected_error,
        },
        lifespan=lifespan,
    )
    app.state.dashboard = board
    return app
