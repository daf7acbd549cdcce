"""The processes queuey runs, as library calls: what ``queuey worker`` and ``queuey
scheduler`` start, for anyone to start from Python.

:func:`run_worker` runs one worker (or a supervisor of several worker processes, with
the metrics server and a scheduler beside it when configured) until a signal or
``--burst`` ends it; :func:`run_scheduler` runs the configured schedules. Both return
an :class:`Exit` code. Each module here is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.process.exits import Exit

if TYPE_CHECKING:
    from queuey_core.process.scheduler import run_scheduler
    from queuey_core.process.worker import run_worker

_LAZY = {
    "run_scheduler": "queuey_core.process.scheduler",
    "run_worker": "queuey_core.process.worker",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["Exit", "run_scheduler", "run_worker"]
