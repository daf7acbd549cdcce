"""Dead letters kept in the job store (RabbitMQ with ``[results] url``): what reached
``<queue>.dlq`` is imported into the store's table before each ``queuey dlq`` command,
with a progress bar on a terminal when there is much of it (a backlog from before the
store, the worker's fallback while the store was down), and ``queuey dlq import`` does
only that. Without a store, a one-line hint when a dead-letter queue is large: every
command then reads the queue (``docs/dead-letters.md``).

Owns: :func:`import_first` and :func:`hint` (the ``import`` command is in :mod:`.dlq`).
"""

from __future__ import annotations

from typing import Any

from queuey_cli.dlq_progress import moving
from queuey_cli.output import err, say
from queuey_core.logs import escape_controls

#: Dead letters in one queue past which, without a store, the hint is given.
HINT_OVER = 10_000

#: The queue of delayed messages that no queue took (never imported: its own path).
UNROUTABLE = "queuey.unroutable"


def import_first(broker: Any, names: list[str]) -> int:
    """Import every chosen queue's ``<queue>.dlq`` into the store's table, with a bar;
    how many. Without a store, the hint for a large one instead."""
    # Here, not at the top: `queuey dlq --help` loads no pydantic (docs/performance.md).
    from queuey_core.backends.capabilities import KeepsDeadLettersInStore  # noqa: PLC0415

    if not isinstance(broker, KeepsDeadLettersInStore):
        return 0
    stored = broker.has_dead_letter_store()
    done = 0
    for name in names:
        if name == UNROUTABLE:
            continue
        waiting = broker.unimported_dead_letters(name)
        if not stored:
            hint(name, waiting)
        elif waiting:
            with moving(f"import {escape_controls(name)}", waiting) as progress:
                done += broker.import_dead_letters(name, progress=progress) or 0
    return done


def hint(name: str, held: int) -> None:
    """Say, once per command, how to make a large dead-letter queue cheap to work with."""
    if held > HINT_OVER:
        say(
            f"{escape_controls(name)}.dlq holds {held}: every dlq command reads it through; "
            "set [results] url to keep dead letters in the job store, found by index "
            "(docs/dead-letters.md)",
            to=err,
        )
