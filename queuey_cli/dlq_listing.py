"""How ``queuey dlq list`` writes a listing: each dead letter as the backend reads it.

Owns: walking each queue's window (:meth:`DeadLetterTools.dead_letter_window`) one
after the other, the footer of a page that is not all of them, and writing rows a
bounded number at a time (a table per :data:`ROWS` on a terminal, plain lines
elsewhere). Must never: hold a whole listing (100,000 dead letters list in about 50 MB,
``docs/dead-letters.md``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from queuey_cli.dlq_format import COLUMNS, Found
from queuey_cli.output import (
    err,
    is_terminal,
    listing,
    out,
    plain_lines,
    rows_table,
    say,
    write_lines,
)
from queuey_core.logs import escape_controls


def listed(
    broker: Any,
    names: list[str],
    window: tuple[int, int | None],
    job_type: str | None,
    reason: str | None,
    notes: list[str],
) -> Iterator[Found]:
    """Each queue's window of dead letters as the backend reads it, one queue after the
    other; a queue's footer joins ``notes`` once its window has ended (a page that is
    not all of them: where the next one starts)."""
    offset, limit = window
    for name in names:
        letters = broker.dead_letter_window(
            name, offset=offset, limit=limit, job_type=job_type, reason=reason
        )
        shown = 0
        try:
            for dead in letters:
                shown += 1
                yield name, dead
        finally:
            letters.close()
        if limit is not None and (offset or letters.next_offset is not None):
            notes.append(footer(name, offset, shown, letters.total, letters.next_offset))


#: Rows per table (on a terminal) or per write: a listing of any length is written as it
#: is read, never held whole.
ROWS = 1000


def write_rows(rows: Iterator[list[object]], notes: list[str]) -> None:
    """The rows as :func:`listing` writes them, :data:`ROWS` at a time; then ``notes``."""
    chunk = list(itertools.islice(rows, ROWS))
    if len(chunk) < ROWS:  # all of it: exactly what listing writes
        listing("dead letters", COLUMNS, chunk, notes=notes)
        return
    terminal = is_terminal()
    header = True
    while chunk:
        if terminal:
            out.print(rows_table("dead letters", COLUMNS, chunk))
        else:
            write_lines(plain_lines(COLUMNS, chunk, header=header))
        header = False
        chunk = list(itertools.islice(rows, ROWS))
    for note in notes:
        say(note, to=None if terminal else err)


def footer(name: str, offset: int, shown: int, total: int, following: int | None) -> str:
    """The line under a page of ``name``: which of how many, and the next ``--offset``."""
    where = escape_controls(name)
    if shown == 0:
        return f"{where}: none of {total} from offset {offset}"
    more = f"; next page: --offset {following}" if following is not None else ""
    return f"{where}: {offset + 1}-{offset + shown} of {total}{more}"
