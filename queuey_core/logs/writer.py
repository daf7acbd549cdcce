"""The log writer: JSON lines on stderr, written by a thread of their own in batches.

The library installs no handler (the command line installs this one, and an application
may); what it owns is the thread that writes, and the order of the lines.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

#: How long the log writer gathers lines before it writes them (info and debug only).
LOG_BATCH_SECONDS = 0.005


class BatchedStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
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
