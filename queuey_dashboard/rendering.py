"""Templates and answers: every page is a Jinja template with autoescape on, so whatever
a message or a handler wrote reaches the browser as text, never as markup, and every
value a page shows goes through :func:`shown` first, so its control characters arrive
escaped, never raw; every error is a short page (or a line, to htmx), never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from queuey_core.errors import (
    ConfigError,
    JobStoreError,
    MissingCapabilityError,
    QueueyError,
)
from queuey_core.logs.text import escape_controls
from queuey_core.text import short_duration
from queuey_dashboard.state import Dashboard

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent


def shown(value: object) -> object:
    """A value as every page shows it: text with its control characters escaped (ESC,
    BEL, bidirectional overrides, as the command line shows them; newlines kept, an
    HTML page does not break on them), HTML-escaped after this by autoescape.

    The one cleaning of message-derived text (job types, ids, reasons, errors,
    payloads, hosts, queue names) for every page: Jinja calls it on every ``{{ }}``
    (``finalize``), so no template can forget it. Markup (a macro's output, already
    made of shown values) and numbers pass as they are.
    """
    if value is None or isinstance(value, Markup | Undefined | int | float):
        return value
    return escape_controls(value, newlines=True)


_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    # Every template is HTML: escape everything, whatever the file name says.
    autoescape=select_autoescape(default=True, default_for_string=True),
    finalize=shown,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(ms: object) -> str:
    """Milliseconds since the epoch as UTC time, or "unknown"."""
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        return "unknown"
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return "unknown"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


_env.filters["when"] = _when
_env.filters["duration"] = short_duration
_env.filters["pretty"] = _pretty


def base_path(request: Request) -> str:
    """Where the dashboard is mounted (``""`` at the root)."""
    return str(request.scope.get("root_path") or "").rstrip("/")


def dashboard_of(request: Request) -> Dashboard:
    """The Dashboard of the app serving ``request``."""
    found = request.app.state.dashboard
    assert isinstance(found, Dashboard)
    return found


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """``template`` rendered with the common context (the CSRF token, read-only, ...)."""
    board = dashboard_of(request)
    page = _env.get_template(template).render(
        base=base_path(request),
        csrf_token=getattr(request.state, "csrf_token", ""),
        read_only=board.read_only,
        refresh_ms=int(board.refresh * 1000),
        backend=board.backend_name(),
        broker=board.broker_shown(),
        path=request.url.path,
        **context,
    )
    return HTMLResponse(page, status_code=status)


def is_htmx(request: Request) -> bool:
    """Whether htmx sent ``request`` (it then swaps a fragment in, not a page)."""
    return request.headers.get("hx-request") == "true"


#: Characters of an error's message a page shows: a message quoting the request (a queue
#: name from the path, tens of KB long) is cut there, not echoed whole.
MESSAGE_SHOWN = 300


def error_page(request: Request, status: int, message: str) -> Response:
    """A short error: a line for htmx, a page otherwise; a long message is cut."""
    if len(message) > MESSAGE_SHOWN:
        more = len(message) - MESSAGE_SHOWN
        message = f"{message[:MESSAGE_SHOWN]}... ({more} characters more)"
    if is_htmx(request):
        return render(request, "_notice.html", status, message=message, failed=True)
    return render(request, "error.html", status, status_code=status, message=message)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's HTTPException (404, 405, 400...) as a short page."""
    assert isinstance(exc, HTTPException)
    return error_page(request, exc.status_code, str(exc.detail))


async def queuey_error(request: Request, exc: Exception) -> Response:
    """The broker or the job store could not be reached, or refused: 503 with its one
    line; a capability the backend lacks: 404; the configuration at odds with the
    broker: 409."""
    if isinstance(exc, MissingCapabilityError):
        return error_page(request, 404, f"not available on this backend: {exc}")
    if isinstance(exc, ConfigError):  # the configuration and the broker disagree
        return error_page(request, 409, str(exc))
    where = "the job store" if isinstance(exc, JobStoreError) else "the broker"
    return error_page(request, 503, f"{where}: {exc}")


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Anything else: logged with its trace, shown as one line."""
    if isinstance(exc, QueueyError):
        return await queuey_error(request, exc)
    logger.exception("dashboard request %s %s failed", request.method, request.url.path)
    return error_page(request, 500, f"internal error ({type(exc).__name__}); see the logs")
