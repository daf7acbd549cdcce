"""Log output for a queuey process: formatters and the batched stderr writer.

The library adds no handlers (it only logs, through ``logging.getLogger(__name__)``):
these are what the command line installs, importable for an application that wants
the same lines.
"""

from __future__ import annotations

from queuey_core.logs.formatters import JsonFormatter, LineFormatter
from queuey_core.logs.text import error_summary, escape_controls
from queuey_core.logs.writer import LOG_BATCH_SECONDS, BatchedStderrHandler

__all__ = [
    "LOG_BATCH_SECONDS",
    "BatchedStderrHandler",
    "JsonFormatter",
    "LineFormatter",
    "error_summary",
    "escape_controls",
]
