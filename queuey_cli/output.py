"""Where the command line writes: results to stdout, errors and logs to stderr."""

from __future__ import annotations

import json
import logging
import sys
import time
from enum import IntEnum, StrEnum
from typing import Any

from rich.console import Console
from rich.logging import RichHandler

#: Results (job ids, tables) go here, so they can be piped; piped tables are not
#: squeezed into 80 columns.
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
#: Errors, progress and logs go here.
err = Console(stderr=True, soft_wrap=True)


class Exit(IntEnum):
    """The exit codes of ``queuey``."""

    OK = 0
    FAILURE = 1  # the broker refused or could not be reached
    USAGE = 2  # bad input: arguments, payloads, configuration
    BROKER_LOST = 3  # a worker lost the broker and could not recover
    UNKNOWN = 4  # an enqueue may or may not have reached the broker
    FORCED = 130  # a second signal, or the shutdown timeout: stopped at once


def error(message: str) -> None:
    """One clear line on stderr."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)


class LogFormat(StrEnum):
    """How logs are written to stderr."""

    AUTO = "auto"
    RICH = "rich"
    JSON = "json"


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with a record's structured fields (job_id, queue, ...)."""

    def format(self, record: logging.LogRecord) -> str:
        """See :class:`logging.Formatter`."""
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            data["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        return json.dumps(data, default=str)


def setup_logging(fmt: LogFormat, level: str) -> None:
    """Rich on a terminal, JSON lines otherwise (``auto``), on stderr."""
    if fmt is LogFormat.AUTO:
        fmt = LogFormat.RICH if sys.stderr.isatty() else LogFormat.JSON
    handler: logging.Handler
    if fmt is LogFormat.RICH:
        handler = RichHandler(console=err, show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pika narrates every frame, and logs at ERROR what it then raises: queuey translates
    # those exceptions into one line of its own, so pika itself stays quiet.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
