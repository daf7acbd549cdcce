"""``queuey init NAME``: write a new handler distribution into ``NAME/``.

Maps its argument onto :func:`queuey_core.scaffold.write_scaffold` and prints what it
wrote and what to run next. Needs no configuration and reaches no broker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from queuey_cli.common import cli_errors
from queuey_cli.output import Exit, error, out


@cli_errors
def init(
    name: Annotated[
        str,
        typer.Argument(
            help="The new distribution's name (its package is the same, lower case, with "
            "'-' and '.' as '_')."
        ),
    ],
    directory: Annotated[
        Path | None,
        typer.Option(
            "--in", help="Write NAME/ inside this directory (default: the working directory)."
        ),
    ] = None,
) -> None:
    """Write NAME/: a handler package (pyproject with the queuey.handlers entry point,
    one job type and handler), a queuey.toml on a SQLite file, and a test on queuey's
    testing kit. Overwrites nothing."""
    from queuey_core.scaffold import names_for, write_scaffold  # noqa: PLC0415

    try:
        written = write_scaffold(name, directory)
    except OSError as exc:
        error(f"cannot write {name}/: {exc.strerror or exc}")
        raise typer.Exit(Exit.FAILURE) from None
    # Shown as the user named them: NAME/..., or under --in as given.
    root = (directory or Path()) / name
    absolute = (directory or Path.cwd()) / name
    for path in written:
        out.print(f"wrote {root / path.relative_to(absolute)}", highlight=False, markup=False)
    names = names_for(name)
    out.print(
        f"\nnext:\n  pip install -e {root}\n  cd {root} && pytest\n"
        f'  queuey enqueue {names.job_type} \'{{"name": "ada"}}\' && queuey worker --burst',
        highlight=False,
        markup=False,
    )
