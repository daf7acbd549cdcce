"""A CPU-bound job for the ``--processes`` tests and benchmark, loaded as a plugin.

Its handler does a fixed amount of pure-Python work (so it holds the GIL: two threads
of one process cannot overlap it, two processes can), and writes each run into the
fault tests' ledger (:mod:`tests.integration.ledger`), with the pid that ran it.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from queuey_core import Job
from queuey_core import JobContext
from queuey_core import handler
from tests.integration import ledger
from tests.integration import plugins

QUEUE = "procs.cpu"


class Crunch(Job):
    """``rounds`` rounds of pure-Python arithmetic (about 0.1 s per 1,000,000 here)."""

    NAME: ClassVar[str] = "procs.crunch"
    QUEUE: ClassVar[str] = QUEUE
    rounds: int = 200_000


def crunch(rounds: int) -> int:
    """The work itself: a loop the interpreter cannot skip (its result is used)."""
    total = 0
    for i in range(rounds):
        total = (total + i * i) % 1_000_003
    return total


@handler
def run_crunch(job: Crunch, ctx: JobContext) -> None:
    """Write down the start, do the work, write down the end (before the ack)."""
    ledger._write("start", ctx)
    crunch(job.rounds)
    ledger._write("done", ctx)


def plugin_path(folder: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` so that ``queuey worker`` finds this handler."""
    return plugins.plugin_path(folder, "cpu", __name__)
