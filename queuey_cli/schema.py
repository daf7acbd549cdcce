"""``queuey schema``: the JSON Schema of the envelope, or of a job type's payload.

The text is exactly what ``docs/schema/`` holds (:func:`queuey_core.schema.schema_text`),
so ``queuey schema envelope > docs/schema/envelope.json`` regenerates the checked-in file.
"""

from __future__ import annotations

from typing import Annotated

import typer

from queuey_cli.common import cli_errors, state, usage
from queuey_cli.output import Exit, error, out

#: The name that means the envelope rather than a job type.
ENVELOPE = "envelope"


@cli_errors
def schema(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="envelope (the message body), or a job type (its payload; see queuey handlers)."
        ),
    ],
) -> None:
    """Print the JSON Schema of the envelope, or of a job type's payload."""
    # Imported here, as in every command module: --help goes without pydantic.
    from pydantic import PydanticUserError  # noqa: PLC0415

    from queuey_core.schema import envelope_schema, payload_schema, schema_text  # noqa: PLC0415

    if name == ENVELOPE:
        out.file.write(schema_text(envelope_schema()))
        return
    st = state(ctx)
    models = {
        d.handler.job_type.NAME: d.handler.job_type for d in st.handlers(st.settings().queue_set())
    }
    model = models.get(name)
    if model is None:
        known = ", ".join([ENVELOPE, *sorted(models)])
        raise usage(f"unknown job type {name!r} (known: {known})")
    try:
        text = schema_text(payload_schema(model))
    except PydanticUserError as exc:  # a model pydantic cannot describe in JSON Schema
        error(f"job type {name!r}: no JSON Schema: {exc}")
        raise typer.Exit(Exit.FAILURE) from None
    out.file.write(text)
