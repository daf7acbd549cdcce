"""``queuey health``: ask the queuey process running here whether it is healthy.

What the image's ``HEALTHCHECK`` runs (and a Kubernetes exec probe can): one command for
every long-running subcommand. Maps its options onto
:func:`queuey_core.process.health.probe`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import cli_errors, state, usage
from queuey_cli.output import Exit, error, out


@cli_errors
def health(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            help="Ask this /healthz instead (default: the worker's and the scheduler's "
            "metrics port, then the dashboard's address, from the configuration)."
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=0.1, max=60, help="Seconds to wait for an answer.")
    ] = 4.0,
) -> None:
    """Exit 0 if the worker, scheduler or dashboard running here says it is healthy,
    else 1 with the reason: the first that answers decides."""
    from queuey_core.process.health import Endpoint, health_endpoints, probe  # noqa: PLC0415

    if url is not None:
        if not url.startswith("http://"):
            raise usage(
                f"--url: an http:// address, e.g. http://127.0.0.1:9191/healthz, not {url!r}"
            )
        endpoints = [Endpoint("--url", url)]
    else:
        endpoints = health_endpoints(state(ctx).settings())
    answer = probe(endpoints, timeout=timeout)
    if not answer.ok:
        where = f" ({answer.endpoint.name}, {answer.endpoint.url})" if answer.endpoint else ""
        error(f"unhealthy: {answer.reason}{where}")
        raise typer.Exit(Exit.FAILURE)
    assert answer.endpoint is not None
    out.print(f"healthy: {answer.endpoint.name} ({answer.endpoint.url})", highlight=False)
