"""The fault tests' books: a handler that writes down every job it runs, and the reading.

``queuey worker`` processes load this module as a plugin (:func:`plugin_path` makes a
``.dist-info`` folder that registers it under ``queuey.handlers``). Each run of a job
appends ``start`` when the handler begins and ``done`` just before it returns (so before
the ack) to the file named by ``$QUEUEY_TEST_LEDGER``, one ``write`` of one line with
``O_APPEND``: lines from several processes never interleave, and a line written is on
disk whatever happens to the process after.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import handler
from tests.integration import plugins

LEDGER_ENV = "QUEUEY_TEST_LEDGER"
CLASSIC = "ledger.classic"
QUORUM = "ledger.quorum"


class Classic(Job):
    """A job on the classic queue that takes ``ms`` milliseconds."""

    NAME: ClassVar[str] = "ledger.classic"
    QUEUE: ClassVar[str] = CLASSIC
    ms: int = 0


class Quorum(Job):
    """A job on the quorum queue that takes ``ms`` milliseconds."""

    NAME: ClassVar[str] = "ledger.quorum"
    QUEUE: ClassVar[str] = QUORUM
    ms: int = 0


def append(line: str) -> None:
    """Append ``line`` to the ledger in one ``O_APPEND`` write (lines of several
    processes never interleave)."""
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _write(event: str, ctx: JobContext) -> None:
    append(f"{event} {ctx.job_id} {os.getpid()} {ctx.attempt} {time.time():.3f}\n")


def _run(ms: int, ctx: JobContext) -> None:
    _write("start", ctx)
    if ms:
        time.sleep(ms / 1000)
    _write("done", ctx)


@handler
def classic(job: Classic, ctx: JobContext) -> None:
    """Write down the run."""
    _run(job.ms, ctx)


@handler
def quorum(job: Quorum, ctx: JobContext) -> None:
    """Write down the run."""
    _run(job.ms, ctx)


def plugin_path(folder: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` so that ``queuey worker`` finds these handlers."""
    return plugins.plugin_path(folder, "ledger", __name__)


@dataclass(frozen=True)
class Books:
    """What a ledger says: how often each job started and finished, and by which process."""

    started: collections.Counter[str]
    done: collections.Counter[str]
    #: (when, pid) of every finished run, in the order written.
    finishes: list[tuple[float, int]]
    last_write: float

    @classmethod
    def read(cls, path: Path) -> Books:
        started: collections.Counter[str] = collections.Counter()
        done: collections.Counter[str] = collections.Counter()
        finishes: list[tuple[float, int]] = []
        last = 0.0
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            # A line still being written (a write that spans two pages can be seen half
            # done): the next read sees it whole.
            lines.pop()
        for line in lines:
            event, job_id, pid, _attempt, at = line.split()
            if event == "start":
                started[job_id] += 1
            else:
                done[job_id] += 1
                finishes.append((float(at), int(pid)))
            last = max(last, float(at))
        return cls(started, done, finishes, last)

    def first_finish_after(self, when: float, pid: int | None = None) -> float | None:
        """Seconds from ``when`` to the first run finished after it (by ``pid``, if given)."""
        after = [t for t, p in self.finishes if t >= when and (pid is None or p == pid)]
        return min(after) - when if after else None

    def finished(self) -> int:
        """Jobs that finished at least once."""
        return len(self.done)

    def duplicates(self) -> int:
        """Runs beyond the first, over every job that finished."""
        return sum(n - 1 for n in self.done.values())

    def missing(self, expected: Iterable[str]) -> set[str]:
        """Jobs of ``expected`` that never finished."""
        return {j for j in expected if j not in self.done}

    def unfinished(self) -> set[str]:
        """Jobs that started more often than they finished (cut off mid-run)."""
        return {j for j, n in self.started.items() if n > self.done.get(j, 0)}
