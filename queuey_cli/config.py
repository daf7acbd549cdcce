"""``queuey config show``: the effective configuration, password redacted."""

from __future__ import annotations

import typer

from queuey_cli.common import cli_errors, state
from queuey_cli.output import print_json
from queuey_core.settings import find_config

app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


@app.command("show")
@cli_errors
def show(ctx: typer.Context) -> None:
    """Print the effective configuration (file, then QUEUEY_*), as JSON."""
    st = state(ctx)
    settings, sources = st.settings(), find_config(st.config or None)
    data = {"sources": [str(s) for s in sources], **settings.redacted()}
    print_json(data)
