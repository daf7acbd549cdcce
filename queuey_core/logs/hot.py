"""Log lines of a path that logs on every job, made for less than ``logger.info`` costs.

A worker writes a line for every job's outcome. ``logger.info(msg, extra=fields)``
spends about a third of that line before any handler sees it: ``Logger._log``,
``makeRecord`` and ``LogRecord.__init__`` look up, for every record, what is the same
for every record of one call site (the level's name, the file's name and module).
:class:`HotLine` works those out once, when the call site is made,
and stamps each record with only what changes: the time, the thread and the fields.

The record is a real :class:`logging.LogRecord` with every attribute ``makeRecord``
gives it, and it goes through :meth:`logging.Logger.handle`: the logger's level,
``disabled``, its filters, propagation and every handler see it as before. An
application that installed a record factory of its own (``logging.setLogRecordFactory``)
gets its factory's records, and one that wants each record's file and line (logging's
default: the command line switches it off) gets them, both through the ordinary path.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

_new_record = logging.LogRecord.__new__
_Record = logging.LogRecord
#: When logging was imported: a record's ``relativeCreated`` counts from it.
_START: float = getattr(logging, "_startTime")  # noqa: B009 - private, not in the stubs

#: What changes from one record of a call site to the next (set for each record).
_PER_RECORD = (
    "created",
    "msecs",
    "relativeCreated",
    "thread",
    "threadName",
    "process",
    "processName",
)


def _process_name() -> str:
    """The process's name as ``LogRecord`` finds it (multiprocessing's, once imported)."""
    mp: Any = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            return str(mp.current_process().name)
        except Exception:
            pass
    return "MainProcess"


class HotLine:
    """One call site's log line: ``line(fields)`` logs ``message`` with ``fields`` as
    ``logger.log(level, message, extra=fields)`` would.

    ``fields`` must not name a :class:`logging.LogRecord` attribute (``makeRecord``
    refuses those; here they would overwrite it).
    """

    __slots__ = ("_level", "_logger", "_message", "_template")

    def __init__(self, logger: logging.Logger, level: int, message: str) -> None:
        self._logger = logger
        self._level = level
        self._message = message
        # What makeRecord would give every record of this call site (logging's own
        # constructor, so that a later Python's new attributes are there too).
        # The location is findCaller's answer when it is not asked (``_srcfile`` None).
        template = vars(
            _Record(
                logger.name, level, "(unknown file)", 0, message, (), None, "(unknown function)"
            )
        )
        for dynamic in _PER_RECORD:
            template.pop(dynamic, None)
        self._template = template

    def __call__(self, fields: dict[str, Any]) -> None:
        """Log the line with ``fields`` (at once, if the logger's level lets it through)."""
        logger = self._logger
        if not logger.isEnabledFor(self._level):
            return
        if logging._srcfile is not None or logging.getLogRecordFactory() is not _Record:
            # Where the call was made from (its file and line) is looked up, or records
            # are made by someone else's factory: the ordinary path does both.
            logger.log(self._level, self._message, extra=fields)
            return
        record = _new_record(_Record)
        attrs = record.__dict__
        attrs.update(self._template)
        now = time.time()
        attrs["created"] = now
        attrs["msecs"] = int((now - int(now)) * 1000) + 0.0
        attrs["relativeCreated"] = (now - _START) * 1000
        if logging.logThreads:
            attrs["thread"] = threading.get_ident()
            attrs["threadName"] = threading.current_thread().name
        else:
            attrs["thread"] = attrs["threadName"] = None
        # (a forked child's, not its parent's)
        attrs["process"] = os.getpid() if logging.logProcesses else None
        attrs["processName"] = _process_name() if logging.logMultiprocessing else None
        attrs.update(fields)
        logger.handle(record)
