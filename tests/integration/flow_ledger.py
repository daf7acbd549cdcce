"""The limits' books: a limited job that writes down when it ran, for which tenant.

``queuey worker`` processes load this module as a plugin (:func:`plugin_path`). Each run
appends ``start`` when the handler begins and ``done`` just before it returns (so before
its settle, and before its slots are given back), one ``O_APPEND`` write a line, to the
file named by ``$QUEUEY_TEST_LEDGER``: ``event tenant job_id attempt time``.

In a worker process (``$QUEUEY_TEST_LEDGER`` set) it also writes, to the same path with
``.admits`` added, ``job_id time`` for each admission the limits' state makes, at the
instant it decided with: the rate holds at those instants, while a handler starts a
scheduling delay after its admission, which a loaded machine stretches for one job and
not the next (so a window of handler starts can hold one more than a window of
admissions).
"""

from __future__ import annotations

import collections
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import ClassVar

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import handler
from queuey_core.flow.limit_state import Admission
from queuey_core.flow.limit_state import LimitState
from queuey_core.flow.limit_state import Verdict
from tests.integration import ledger
from tests.integration import plugins
from tests.integration.ledger import LEDGER_ENV

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
    ledger.append(f"{event} {job.tenant} {ctx.job_id} {ctx.attempt} {time.time():.6f}\n")


@handler
def limited(job: Limited, ctx: JobContext) -> None:
    """Write down the run."""
    _write("start", job, ctx)
    if job.ms and not (job.once and (ctx.redelivered or ctx.deferrals)):
        time.sleep(job.ms / 1000)
    _write("done", job, ctx)


def _record_admissions() -> None:
    """Wrap the limits' state of this (worker) process so that each admission is written
    down with the instant it was decided at."""
    real = LimitState.acquire

    def acquire(self: LimitState, job_id: str, claims: Any, **kw: Any) -> Admission:
        answer = real(self, job_id, claims, **kw)
        if answer.verdict is Verdict.ADMITTED:
            line = f"{job_id} {kw['now_ms'] / 1000:.4f}\n".encode()
            fd = os.open(admits_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return answer

    LimitState.acquire = acquire  # type: ignore[method-assign]


def admits_path(ledger_path: Path | None = None) -> str:
    """Where the admissions of the ledger ``ledger_path`` (this process's) are written."""
    return f"{ledger_path or os.environ[LEDGER_ENV]}.admits"


def read_admits(ledger_path: Path, ids: set[str]) -> list[float]:
    """The instants the jobs of ``ids`` were admitted at (each admission), in order."""
    try:
        text = Path(admits_path(ledger_path)).read_text()
    except FileNotFoundError:
        return []
    admits = []
    for line in text.splitlines():
        job_id, _, at = line.partition(" ")
        if at and job_id in ids:
            admits.append(float(at))
    return sorted(admits)


if LEDGER_ENV in os.environ:  # a worker process loading the plugin
    _record_admissions()


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
    """Every whole line of the ledger, in time order. At one instant, the dones of runs
    that started before it come first (the slot is given back after its done), then the
    starts, then the dones of runs that started at that instant too: a redelivery that
    returns at once writes its start and its done within one stamp."""
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
    runs.sort(key=lambda r: r.at)
    ordered: list[Run] = []
    for _, tied in itertools.groupby(runs, key=lambda r: r.at):
        group = list(tied)
        started = {r.job_id for r in group if r.event == "start"}
        ordered.extend(sorted(group, key=lambda r: _place(r, started)))
    return ordered


def _place(run: Run, started: set[str]) -> int:
    if run.event == "start":
        return 1
    return 2 if run.job_id in started else 0


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
