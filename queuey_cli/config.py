"""``queuey config show``: the effective configuration, password redacted."""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import JsonOption, cli_errors, state
from queuey_cli.output import print_json

app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


@app.command("show")
@cli_errors
def show(ctx: typer.Context, as_json: Annotated[bool, JsonOption] = False) -> None:
    """Print the effective configuration (file, then QUEUEY_*), as JSON (with or without
    --json)."""
    # Imported here, as in every command module: --help goes without pydantic.
    from queuey_core.settings import find_config  # noqa: PLC0415

    del as_json  # JSON either way; --json is taken so that every read command takes it
    st = state(ctx)
    settings, sources = st.settings(), find_config(st.config or None)
    # Which backend the URL chooses: never guessed, never a silent fallback.
    used = "sqlite (embedded, no server)" if settings.broker.is_embedded() else "rabbitmq"
    data = {"sources": [str(s) for s in sources], "backend": used, **settings.redacted()}
    print_json(data)
