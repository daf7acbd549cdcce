"""Noticing a blocked event loop: a coroutine that calls blocking code stops every other.

``time.sleep`` in an ``async def`` handler, a blocking HTTP client, a long computation:
while it runs, the loop runs nothing else, no timeout can cancel anything, and every
async job of the worker waits. A thread of its own sends the loop a ping every quarter
of ``threshold``; a ping not answered within ``threshold`` seconds is reported as a
stuck job thread is (:mod:`.timeout`): a log line at ERROR naming the job whose
coroutine holds the loop and where it is (file, line and function of each frame, no
source), and one more in :meth:`WorkerHandle.stuck_jobs` (so in ``/metrics`` and
``/healthz``) until the loop runs again, which is logged too.

Owns: the ping, the report and its end. Must never: touch the loop but through
``call_soon_threadsafe``, or report one blocking twice.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from queuey_core.worker.handle import WorkerHandle

logger = logging.getLogger(__name__)

#: Frames of the loop's stack kept in a report (the innermost).
MAX_FRAMES = 15


class _Job(Protocol):
    @property
    def fields(self) -> dict[str, Any]: ...


class LoopWatch:
    """Watches ``loop`` (run by ``thread``) from a thread of its own."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        *,
        threshold: float,
        handle: WorkerHandle,
        current: Callable[[], _Job | None],
    ) -> None:
        self._loop = loop
        self._thread = thread
        self._threshold = threshold
        self._handle = handle
        self._current = current
        self._stop = threading.Event()
        self._answered = threading.Event()
        self._watcher: threading.Thread | None = None
        self.reports = 0

    def start(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name="queuey-loop-watch", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def _watch(self) -> None:
        interval = max(0.005, self._threshold / 4)
        sent: float | None = None
        reported = False
        while not self._stop.wait(interval):
            if sent is not None and self._answered.is_set():
                if reported:
                    self._handle.record_stuck(-1)
                    logger.warning(
                        "event loop runs again after %.2fs blocked", time.monotonic() - sent
                    )
                sent, reported = None, False
            if sent is None:
                self._answered.clear()
                sent = time.monotonic()
                try:
                    self._loop.call_soon_threadsafe(self._answered.set)
                except RuntimeError:  # the loop is closed
                    return
            elif not reported and time.monotonic() - sent >= self._threshold:
                reported = True
                self.reports += 1
                self._report(time.monotonic() - sent)  # logged before it is counted
                self._handle.record_stuck(1)
        if reported:
            self._handle.record_stuck(-1)

    def _report(self, blocked: float) -> None:
        job = self._current()
        fields: dict[str, Any] = dict(job.fields) if job is not None else {}
        fields["traceback"] = self._stack()
        logger.error(
            "event loop blocked for %.2fs%s: no async job runs meanwhile; a coroutine "
            "called blocking code (time.sleep, a blocking client, a long computation): "
            "await an async version, or move it to asyncio.to_thread()",
            blocked,
            "" if job is None else " by this job",
            extra=fields,
        )

    def _stack(self) -> str:
        frame = sys._current_frames().get(self._thread.ident or -1)
        if frame is None:
            return ""
        frames = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
        lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in frames]
        return "Event loop stack (most recent call last):\n" + "\n".join(
            reversed(lines[:MAX_FRAMES])
        )
