"""Log formatters: one literal line (:class:`LineFormatter`) or one JSON object a line
(:class:`JsonFormatter`), with a record's structured fields.

The library installs neither: the command line (or an application) puts them on the
handlers it installs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from queuey_core.logs.text import error_summary, escape_controls

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
        message = escape_controls(record.getMessage())
        exc = _exception(record)
        if exc is None:
            job_traceback = getattr(record, "traceback", None)
            if self.tracebacks and isinstance(job_traceback, str) and job_traceback:
                return f"{message}\n{escape_controls(job_traceback, newlines=True)}"
            return message
        if self.tracebacks:
            return f"{message}\n{escape_controls(self.formatException(exc), newlines=True)}"
        return f"{message}: {error_summary(exc[1])}"


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
            data["error"] = error_summary(exc[1])
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
