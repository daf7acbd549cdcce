"""A progress bar for the dead-letter commands that move many (``requeue --all``, ``purge``).

On a terminal (stderr), a Rich bar that counts up to the number of dead letters the
queue held when the command began; anywhere else nothing, so scripts see only the
result line. Owns: :func:`moving`, the bar and the callback the backend reports to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from queuey_cli.output import console_of, err


@contextlib.contextmanager
def moving(what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A ``progress(done)`` callback for a backend, drawing a bar while the block runs."""
    console = console_of(err)
    if not console.is_terminal:
        yield lambda _done: None
        return
    # Imported here: loading the command line (for `queuey worker` too) skips Rich.
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task(what, total=total)
        yield lambda done: bar.update(task, completed=done)
