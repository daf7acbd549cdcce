"""Serving the dashboard on its own: :func:`run_dashboard`, what ``queuey dashboard``
runs, with uvicorn.
"""

from __future__ import annotations

import logging
from typing import Any

from queuey_core.settings import Settings
from queuey_dashboard.app import create_app
from queuey_dashboard.security import check_address

logger = logging.getLogger("queuey.dashboard")


def run_dashboard(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    read_only: bool | None = None,
    job_store: Any = None,
    root_path: str = "",
    log_level: str = "info",
) -> None:
    """Serve the dashboard until SIGINT or SIGTERM (uvicorn handles both).

    ``host``, ``port`` and ``read_only`` override ``[dashboard]``; ``root_path`` is the
    path a reverse proxy serves it under (``/queuey``), for its links. The backend is
    opened before anything listens, so that an unreachable broker is one error, not a
    page.

    Raises:
        ConfigError: a public address without a token.
        BackendError: the broker cannot be reached.
    """
    import uvicorn  # noqa: PLC0415  (the extra's server, loaded only to serve)

    chosen_host = host if host is not None else settings.dashboard.host
    chosen_port = port if port is not None else settings.dashboard.port
    token = settings.dashboard.token
    check_address(chosen_host, token.get_secret_value() if token is not None else None)
    app = create_app(settings, read_only=read_only, job_store=job_store)
    board = app.state.dashboard
    board.backend()
    board.dead_letter_backend()
    board.control_backend()
    where = f"[{chosen_host}]" if ":" in chosen_host else chosen_host
    logger.info(
        "dashboard on http://%s:%d/ (%s%s)",
        where,
        chosen_port,
        "read-only, " if board.read_only else "",
        "token required" if board.token else "loopback only, no token",
    )
    try:
        uvicorn.run(
            app,
            host=chosen_host,
            port=chosen_port,
            log_level=log_level,
            server_header=False,
            # queuey's logging (Rich or JSON, set up by the command line), not uvicorn's own.
            log_config=None,
            root_path=root_path,
            proxy_headers=False,
        )
    finally:
        board.close()
