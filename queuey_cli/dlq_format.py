"""How ``queuey dlq`` shows a dead letter: table cells, plain lines and JSON objects.

A dead letter's reason and time come from message headers, which anything that can
publish to a dead-letter queue can set: the backend reads them defensively, and these
show what it could not read as unknown. A message that is not an envelope at all is
shown too, by its handle (message id, or #position), with a preview. Owns: the columns,
the cells and the JSON object of one dead letter, and writing a JSON array as it comes.
Must never: print a control character raw (every value is escaped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from queuey_cli.output import Column, write_lines

if TYPE_CHECKING:
    from queuey_core.backends.capabilities import AnyDeadLetter

#: Where a dead letter was found: the queue whose dead-letter queue holds it.
Found = tuple[str, "AnyDeadLetter"]


def dead_at(dead: AnyDeadLetter) -> int | None:
    """When it died (ms since the epoch), or None when the header is missing or odd."""
    value: object = dead.dead_at
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def when(dead: AnyDeadLetter) -> str:
    """When it died, local time, or "unknown"."""
    ms = dead_at(dead)
    if ms is None:
        return "unknown"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    except (OverflowError, OSError, ValueError):  # a year beyond what the C library takes
        return "unknown"


def reason(dead: AnyDeadLetter) -> str | None:
    """Its reason, None when the backend handed something else."""
    value: object = dead.reason
    return value if isinstance(value, str) else None


def as_dict(queue: str, dead: AnyDeadLetter) -> dict[str, Any]:
    """Its JSON object (``dlq list --json``, ``dlq show``)."""
    from queuey_core.backends.capabilities import UndecodableDeadLetter  # noqa: PLC0415

    common = {"handle": dead.handle, "dlq_of": queue, "reason": reason(dead)}
    if isinstance(dead, UndecodableDeadLetter):
        return {
            **common,
            "decodable": False,
            "dead_at": dead_at(dead),
            "error": dead.error,
            "preview": dead.preview,
        }
    env = dead.envelope
    return {
        **common,
        "decodable": True,
        "dead_at": dead_at(dead),
        "job_id": str(env.job_id),
        "job_type": env.job_type,
        "queue": env.queue,
        "attempt": env.attempt,
        "deferrals": env.deferrals,
        "priority": env.priority,
        "enqueued_at": env.enqueued_at,
        "payload": env.payload,
    }


COLUMNS = [
    Column("job id / handle", "handle", no_wrap=True, min_width=36),
    Column("type", "job_type"),
    Column("queue", "dlq_of"),
    Column("attempts", "attempt"),
    Column("reason", "reason"),
    Column("when", "dead_at"),
]


def cells(name: str, d: AnyDeadLetter) -> list[object]:
    """Its row of :data:`COLUMNS`."""
    from queuey_core.backends.capabilities import UndecodableDeadLetter  # noqa: PLC0415

    why = reason(d)
    shown = "unknown" if why is None else why
    if isinstance(d, UndecodableDeadLetter):
        return [d.handle, f"(not an envelope: {d.error}) {d.preview}", name, None, shown, when(d)]
    env = d.envelope
    return [d.handle, env.job_type, name, env.attempt, shown, when(d)]


def stream_json(items: Iterable[dict[str, Any]]) -> None:
    """A JSON array on stdout, one object a line, written as the objects come: listing
    everything holds one dead letter at a time, however many there are."""

    def lines() -> Iterable[str]:
        yield "["
        comma = ""
        for item in items:
            yield comma + json.dumps(item, ensure_ascii=True, default=str)
            comma = ","
        yield "]"

    write_lines(lines())  # not through Rich, which would hold the whole text
