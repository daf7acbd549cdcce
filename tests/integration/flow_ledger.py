"""The limits' books: a limited job that writes down when it ran, for which tenant.

``queuey worker`` processes load this module as a plugin (:func:`plugin_path`). Each run
appends ``start`` when the handler begins and ``done`` just before it returns (so before
its settle, and before its slots are given back), one ``O_APPEND`` write a line, to the
file named by ``$QUEUEY_TEST_LEDGER``: ``event tenant job_id attempt time``.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import handler
from tests.integration import ledger
from tests.integration import plugins

QUEUE = "flow.limited"


class Limited(Job):
    """A job of ``tenant`` that takes ``ms`` milliseconds (its first delivery only, when
    ``once``: a redelivery after a kill runs at once, and so does that copy deferred until
    the killed worker's slot lease ran out)."""

    NAME: ClassVar[str] = "flow.limited"
    QUEUE: ClassVar[str] = QUEUE
    tenant: str
    ms: int = 0
    once: bool = False


def _write(event: str, job: Limited, ctx: JobContext) -> None:
    ledger.append(f"{event} {job.tenant} {ctx.job_id} {ctx.attempt} {time.time():.4f}\n")


@handler
def limited(job: Limited, ctx: JobContext) -> None:
    """Write down the run."""
    _write("start", job, ctx)
    if job.ms and not (job.once and (ctx.redelivered or ctx.deferrals)):
        time.sleep(job.ms / 1000)
    _write("done", job, ctx)


def plugin_path(folder: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` so that ``queuey worker`` finds this handler."""
    return plugins.plugin_path(folder, "flowledger", __name__)


@dataclass(frozen=True)
class Run:
    event: str
    tenant: str
    job_id: str
    attempt: int
    at: float


def read(path: Path) -> list[Run]:
    """Every whole line of the ledger, in time order (a done before a start at the same
    instant: the slot is given back after its done)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()
    runs = []
    for line in lines:
        event, tenant, job_id, attempt, at = line.split()
        runs.append(Run(event, tenant, job_id, int(attempt), float(at)))
    return sorted(runs, key=lambda r: (r.at, r.event == "start"))


def most_running(runs: list[Run]) -> dict[str, int]:
    """The most runs of each tenant between their start and done at any instant."""
    running: collections.Counter[str] = collections.Counter()
    most: collections.Counter[str] = collections.Counter()
    for run in runs:
        running[run.tenant] += 1 if run.event == "start" else -1
        most[run.tenant] = max(most[run.tenant], running[run.tenant])
    return dict(most)


def busiest_window(starts: list[float], width: float = 1.0) -> int:
    """The most starts in any window of ``width`` seconds."""
    starts = sorted(starts)
    best, low = 0, 0
    for high, at in enumerate(starts):
        while at - starts[low] >= width:
            low += 1
        best = max(best, high - low + 1)
    return best
