"""Where the command line writes: results to stdout, errors and logs to stderr.

Listings (:func:`listing`) are Rich tables on a terminal only; piped or redirected they
are plain text a script can cut: a header of field names (those of ``--json``), then one
record a line, tab-separated. Notes that go with a table (what it could not show) go to
stderr then, so stdout holds nothing but the records.

Text that came from a message, a handler or a user (job types, ids, reasons, queue
names, payloads, error messages quoting them) is shown literally: never read as Rich
markup (``[/]`` in a reason once crashed ``dlq list``), and with control characters
escaped (a job type holding ``ESC[2J`` must not clear the terminal). Everything goes
through :func:`~queuey_core.logs.escape_controls`, and onto a console only as
:class:`rich.text.Text` (:func:`literal`), never as a markup string.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

import typer

from queuey_core.logs import BatchedStderrHandler, JsonFormatter, LineFormatter, escape_controls
from queuey_core.process.exits import Exit as Exit  # noqa: PLC0414 - re-exported
from queuey_core.tracing import TraceLogFields

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


class _LazyConsole:
    """A Rich console made on first use: ``queuey worker`` logging JSON never loads Rich
    (it is a tenth of the worker's start-up and several MB of its memory)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        console = self._console
        if console is None:
            from rich.console import Console  # noqa: PLC0415

            console = self._console = Console(**self._options)
        return getattr(console, name)


#: Results (job ids, tables) go here, so they can be piped; piped tables are not
#: squeezed into 80 columns.
out = cast("Console", _LazyConsole(soft_wrap=True, width=None if sys.stdout.isatty() else 160))
#: Errors, progress and logs go here.
err = cast("Console", _LazyConsole(stderr=True, soft_wrap=True))


def console_of(console: Console) -> Console:
    """The real console behind :data:`out` or :data:`err`, made now if need be (for Rich
    objects that take a console)."""
    if isinstance(console, _LazyConsole):
        console.file  # noqa: B018 - an attribute read makes the real console
        return cast("Console", console._console)
    return console


def literal(text: object, style: str = "") -> Text:
    """``text`` as Rich Text: shown as it is, never read as markup."""
    from rich.text import Text  # noqa: PLC0415

    return Text(escape_controls(text), style=style)


def table(*columns: str, title: str) -> Table:
    """A table whose rows are added with :func:`add_row` (literal cells). A long cell
    folds onto more lines rather than being cut: nothing is hidden.

    A command that lists records uses :func:`listing` instead, which is plain text when
    stdout is not a terminal."""
    from rich.table import Table  # noqa: PLC0415

    t = Table(title=title)
    for column in columns:
        t.add_column(column, overflow="fold")
    return t


def add_row(t: Table, *cells: object) -> None:
    """Add a row of literal cells to ``t``."""
    t.add_row(*(literal(cell) for cell in cells))


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a listing: ``title`` on a terminal, ``name`` (the ``--json`` field's)
    in the header of plain output."""

    title: str
    name: str
    no_wrap: bool = False
    min_width: int | None = None


#: What a cell with no value shows (plain output too: an empty field would vanish in awk).
NONE = "-"


def is_terminal() -> bool:
    """Whether stdout is a terminal: tables there, plain text anywhere else."""
    isatty = getattr(out.file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


def _cell(value: object) -> str:
    return NONE if value is None else escape_controls(value)


def rows_table(title: str, columns: Sequence[Column], rows: Iterable[Sequence[object]]) -> Table:
    """A Rich table of literal cells; a long cell folds rather than being cut."""
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    t = Table(title=title)
    for c in columns:
        t.add_column(c.title, overflow="fold", no_wrap=c.no_wrap, min_width=c.min_width)
    for row in rows:
        t.add_row(*(Text(_cell(v)) for v in row))
    return t


def plain_lines(
    columns: Sequence[Column], rows: Iterable[Sequence[object]], *, header: bool = True
) -> list[str]:
    """A header of field names, then a line a record, tab-separated. Every cell goes
    through :func:`~queuey_core.logs.escape_controls`, so a tab or newline in a value is
    escaped and cannot split it."""
    lines = ["\t".join(c.name for c in columns)] if header else []
    lines.extend("\t".join(_cell(v) for v in row) for row in rows)
    return lines


def write_lines(lines: Iterable[str]) -> None:
    """Plain lines on stdout, as they are (Rich would expand the tabs).

    A reader that has gone (``queuey queues --watch | head``) ends the command, exit 0:
    it had what it wanted.
    """
    try:
        for line in lines:
            out.file.write(line + "\n")
        out.file.flush()
    except BrokenPipeError:
        # Python flushes stdout again on the way out: point it somewhere that takes it.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        raise typer.Exit(Exit.OK) from None


def listing(
    title: str,
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    notes: Sequence[str] = (),
) -> None:
    """Records on stdout: a table on a terminal (``notes`` below it), else plain lines
    (``notes`` on stderr). Every read command lists through here."""
    rows = list(rows)
    if is_terminal():
        if rows:
            out.print(rows_table(title, columns, rows))
        else:
            say(f"no {title}")
        for note in notes:
            say(note)
        return
    write_lines(plain_lines(columns, rows))
    for note in notes:
        say(note, to=err)


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout, non-ASCII escaped (so no control character is raw)."""
    out.print_json(data=data, ensure_ascii=True, default=str)


def say(message: object, *, to: Console | None = None) -> None:
    """One literal line (a result on stdout, or a note on ``to``)."""
    (to or out).print(literal(message), highlight=False)


def error(message: object) -> None:
    """One clear line on stderr: ``error: <message>``, the message literal."""
    from rich.text import Text  # noqa: PLC0415

    err.print(Text.assemble(("error:", "bold red"), " ", escape_controls(message)), highlight=False)


class LogFormat(StrEnum):
    """How logs are written to stderr."""

    AUTO = "auto"
    RICH = "rich"
    JSON = "json"


def flush_logs() -> None:
    """Write every log line still gathering (a
    :class:`~queuey_core.logs.BatchedStderrHandler`'s), now."""
    for handler in logging.getLogger().handlers:
        handler.flush()


def setup_logging(fmt: LogFormat, level: str) -> None:
    """Rich on a terminal, JSON lines otherwise (``auto``), on stderr."""
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.RICH if sys.stderr.isatty() else LogFormat.JSON
    tracebacks = level.upper() == "DEBUG"
    handler: logging.Handler
    if fmt is LogFormat.RICH:
        handler = _rich_handler()
        handler.setFormatter(LineFormatter(tracebacks=tracebacks))
    else:
        handler = BatchedStderrHandler()
        handler.setFormatter(JsonFormatter(tracebacks=tracebacks))
    # trace_id and span_id on a record made under a span (JSON shows them; no cost
    # until OpenTelemetry is loaded).
    handler.addFilter(TraceLogFields())
    # Neither format shows where a call was made from, nor which thread or process made
    # it: do not look them up for every record (the logging docs' "Optimization"; a
    # worker logs every job).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pika narrates every frame, and logs at ERROR what it then raises: queuey translates
    # those exceptions into one line of its own, so pika itself stays quiet.
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def _rich_handler() -> logging.Handler:
    """A ``LiteralRichHandler`` on :data:`err`."""
    handler: logging.Handler = _literal_rich_handler()(
        console=console_of(err), show_path=False, markup=False, rich_tracebacks=False
    )
    return handler


@functools.cache
def _literal_rich_handler() -> type:
    """RichHandler that never reads a message as markup, whatever a record asks.

    Defined on first use: Rich is loaded only for Rich logs.
    """
    from rich.console import ConsoleRenderable  # noqa: PLC0415
    from rich.logging import RichHandler  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    class LiteralRichHandler(RichHandler):
        def render_message(self, record: logging.LogRecord, message: str) -> ConsoleRenderable:
            """See :class:`rich.logging.RichHandler`."""
            text = Text(message)
            return self.highlighter(text) if self.highlighter else text

    return LiteralRichHandler


def __getattr__(name: str) -> Any:
    # ``LiteralRichHandler`` is importable from here as before, made when first asked.
    if name == "LiteralRichHandler":
        return _literal_rich_handler()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
