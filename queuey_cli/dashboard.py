"""``queuey dashboard``: serve the web dashboard (the ``dashboard`` extra).

Maps its options onto :func:`queuey_dashboard.run_dashboard`; the dashboard (Starlette,
Jinja, uvicorn) is imported only when this command runs, and its absence is one line
saying how to install it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import cli_errors, state, usage
from queuey_cli.output import Exit, error

#: What to run when the dashboard's libraries are missing.
INSTALL_HINT = "pip install 'queuey[dashboard]'"


@cli_errors
def dashboard(
    ctx: typer.Context,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to listen on (default: [dashboard] host, else 127.0.0.1). "
            "Any other than loopback needs [dashboard] token."
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Port (default: [dashboard] port, else 8180)."),
    ] = None,
    root_path: Annotated[
        str,
        typer.Option(help="The path a reverse proxy serves it under, e.g. /queuey (for links)."),
    ] = "",
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Hide every button and refuse every write.")
    ] = False,
) -> None:
    """Serve the web dashboard: queues, live workers, dead letters, schedules, jobs."""
    try:
        from queuey_dashboard import run_dashboard  # noqa: PLC0415
    except ImportError as exc:
        error(f"the dashboard needs its extra ({exc.name or exc} is missing): {INSTALL_HINT}")
        raise typer.Exit(Exit.FAILURE) from None
    settings = state(ctx).settings()
    if host is not None and not host.strip():
        raise usage("--host: give an address, e.g. 127.0.0.1")
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise usage("--root-path: a path such as /queuey (a leading /, no trailing one)")
    run_dashboard(
        settings,
        host=host,
        port=port,
        read_only=True if read_only else None,
        root_path=root_path,
    )
