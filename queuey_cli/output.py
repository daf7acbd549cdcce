"""Where the command line writes: results to stdout, errors and logs to stderr.

Listings (:func:`listing`) are Rich tables on a terminal only; piped or redirected they
are plain text a script can cut: a header of field names (those of ``--json``), then one
record a line, tab-separated. Notes that go with a table (what it could not show) go to
stderr then, so stdout holds nothing but the records.

Text that came from a message, a handler or a user (job types, ids, reasons, queue
names, payloads, error messages quoting them) is shown literally: never read as Rich
markup (``[/]`` in a reason once crashed ``dlq list``), and with control characters
escaped (a job type holding ``ESC[2J`` must not clear the terminal). Everything goes
through :func:`printable`, and onto a console only as :class:`rich.text.Text`
(:func:`literal`), never as a markup string.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import typer

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


class Exit(IntEnum):
    """The exit codes of ``queuey``."""

    OK = 0
    FAILURE = 1  # the broker refused or could not be reached
    USAGE = 2  # bad input: arguments, payloads, configuration
    BROKER_LOST = 3  # a worker lost the broker and could not recover
    UNKNOWN = 4  # an enqueue may or may not have reached the broker
    FORCED = 130  # a second signal, or the shutdown timeout: stopped at once


#: C0 and C1 controls and DEL; lone surrogates (undecodable bytes of argv, which cannot
#: be written out); line and paragraph separators; bidirectional overrides, which can
#: make text read differently from what it is.
_OTHERS = r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNPRINTABLE = re.compile(rf"[\x00-\x1f{_OTHERS}]")
_UNPRINTABLE_BUT_NEWLINE = re.compile(rf"[\x00-\x09\x0b-\x1f{_OTHERS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: object, *, newlines: bool = False) -> str:
    """``text`` safe for a terminal, on one line: control characters escaped.

    ESC becomes the four characters ``\\x1b``, a newline ``\\n`` (kept with
    ``newlines=True``, for tracebacks), U+202E ``\\u202e``. Backslashes are left alone,
    so a literal ``\\x1b`` in the input looks the same: the aim is a safe and readable
    line, not a reversible encoding (``--json`` output is that).
    """
    value = text if isinstance(text, str) else str(text)
    return (_UNPRINTABLE_BUT_NEWLINE if newlines else _UNPRINTABLE).sub(_escape, value)


def literal(text: object, style: str = "") -> Text:
    """``text`` as Rich Text: shown as it is, never read as markup."""
    from rich.text import Text  # noqa: PLC0415

    return Text(printable(text), style=style)


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
    return NONE if value is None else printable(value)


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
    """A header of field names, then a line a record, tab-separated. Every cell is
    :func:`printable`, so a tab or newline in a value is escaped and cannot split it."""
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

    err.print(Text.assemble(("error:", "bold red"), " ", printable(message)), highlight=False)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    text = str(exc)
    return printable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


class LogFormat(StrEnum):
    """How logs are written to stderr."""

    AUTO = "auto"
    RICH = "rich"
    JSON = "json"


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _exception(record: logging.LogRecord) -> _ExcInfo | None:
    info = record.exc_info
    if info and info[0] is not None and info[1] is not None:
        return info
    return None


class LineFormatter(logging.Formatter):
    """A record's message as one literal line; its exception as ``: Type: message``.

    With ``tracebacks`` (at ``--log-level debug``) the traceback follows instead, on
    lines of its own, control characters still escaped; so does a failed job's
    (its ``traceback`` field), which is left out otherwise to keep the lines readable.
    """

    def __init__(self, *, tracebacks: bool = False) -> None:
        super().__init__()
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        """See :class:`logging.Formatter`."""
        message = printable(record.getMessage())
        exc = _exception(record)
        if exc is None:
            job_traceback = getattr(record, "traceback", None)
            if self.tracebacks and isinstance(job_traceback, str) and job_traceback:
                return f"{message}\n{printable(job_traceback, newlines=True)}"
            return message
        if self.tracebacks:
            return f"{message}\n{printable(self.formatException(exc), newlines=True)}"
        return f"{message}: {describe(exc[1])}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with a record's structured fields (job_id, queue, ...).

    An exception is an ``error`` field, ``Type: message``; with ``tracebacks`` (at
    ``--log-level debug``) a ``traceback`` field too. A failed job's record carries its
    ``traceback`` field at every level (the worker puts it there, without source lines).
    """

    def __init__(self, *, tracebacks: bool = False) -> None:
        super().__init__()
        self.tracebacks = tracebacks
        # A worker logs every job: the second's text is made once a second, and one
        # encoder serves every line (json.dumps with options builds one per call, and so
        # does JSONEncoder.encode, its C encoder included: that one is made once here).
        self._second = (-1, "")
        self._encoder = json.JSONEncoder(default=str)
        self._encode = _c_encoder()
        self._shapes: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{self._second[1]}.{int(msecs):03d}Z"

    def _extra_keys(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """The record's own fields (not LogRecord's, not private), in order.

        Records of one call site have the same keys in the same order: the answer is
        kept per such shape rather than worked out key by key for every record.
        """
        shape = tuple(fields)
        keys = self._shapes.get(shape)
        if keys is None:
            keys = tuple(k for k in shape if k not in _STANDARD and not k.startswith("_"))
            if len(self._shapes) >= 256:  # bounded, whatever callers log
                self._shapes.clear()
            self._shapes[shape] = keys
        return keys

    def format(self, record: logging.LogRecord) -> str:
        """See :class:`logging.Formatter`."""
        data: dict[str, Any] = {
            "time": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = vars(record)
        for key in self._extra_keys(fields):
            data[key] = fields[key]
        exc = _exception(record)
        if exc is not None:
            data["error"] = describe(exc[1])
            if self.tracebacks:
                data["traceback"] = self.formatException(exc)
        if self._encode is not None:
            try:
                return "".join(self._encode(data, 0))
            except Exception:
                pass  # (a circular value, say) the full encoder says what, as before
        return self._encoder.encode(data)


def _c_encoder() -> Callable[[Any, int], Any] | None:
    """The C encoder :class:`json.JSONEncoder` builds on every call with ``default=str``
    and its other defaults, but without the circular-reference check (whose state would
    be shared between threads); None when Python has no C encoder."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    return make(  # type: ignore[no-any-return]
        None, str, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )


#: How long the log writer gathers lines before it writes them (info and debug only).
LOG_BATCH_SECONDS = 0.005


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """JSON lines on stderr, written by a thread of their own in batches.

    A worker logs every job, and writing each line from the job's thread (a system call
    that lets go of the GIL, and a lock) cost more of its CPU than anything else it does
    (``bench/PROFILE.md``): the job threads now only append the formatted line, and one
    writer thread writes what has gathered in :data:`LOG_BATCH_SECONDS` with one call.
    Warnings and errors are written at once, after whatever is waiting (order is kept),
    and :meth:`flush` (called by ``logging.shutdown`` at exit, and when a command ends)
    writes everything. A ``kill -9`` can cost the last few milliseconds of info lines.

    Writes to whatever ``sys.stderr`` is when it writes, not the one it was made with: a
    caller that swaps stderr (a test runner, an application embedding the command line)
    may have closed that one by the time a line is written.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self._lines: list[str] = []
        self._gather = threading.Lock()  # guards _lines; held only to append or swap
        self._write = threading.Lock()  # one writer at a time, lines in order
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        # A child forked by a handler (multiprocessing) has no writer thread, and may
        # have forked while one held a lock: it starts afresh.
        os.register_at_fork(after_in_child=self._forget_writer)

    def _forget_writer(self) -> None:
        self._lines = []
        self._gather = threading.Lock()
        self._write = threading.Lock()
        self._wake = threading.Event()
        self._writer = None

    def handle(self, record: logging.LogRecord) -> bool:
        """See :meth:`logging.Handler.handle`, without the handler's lock: appending a
        line needs only the short lock of :meth:`emit`."""
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` on the caller's thread; write it soon (at once from warning)."""
        try:
            line = self.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        with self._gather:
            self._lines.append(line)
            first = len(self._lines) == 1
        if record.levelno >= logging.WARNING:
            self.flush()
        elif first:
            self._start_writer()
            self._wake.set()

    def flush(self) -> None:
        """Write every line gathered so far, now."""
        with self._write:
            with self._gather:
                lines, self._lines = self._lines, []
            if not lines:
                return
            try:
                self.stream = stream = sys.stderr
                stream.write("".join(lines))
                stream.flush()
            except Exception:  # stderr is gone: there is nowhere to say so
                pass

    def _start_writer(self) -> None:
        if self._writer is not None:
            return
        with self._write:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._run, name="queuey-log-writer", daemon=True
                )
                self._writer.start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(LOG_BATCH_SECONDS)  # let the lines of the next few ms gather
            self._wake.clear()
            self.flush()


def flush_logs() -> None:
    """Write every log line still gathering (:class:`_StderrHandler`), now."""
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
        handler = _StderrHandler()
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
