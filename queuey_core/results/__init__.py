"""Results, a job's history, and where they are kept: the job store.

A store is chosen by URL (``[results] url``; :func:`open_job_store`): ``sqlite:///path``
(the default on the embedded backend: its own file), ``postgresql://...`` (the
``postgres`` extra) or ``memory://``. The worker records through a hook that writes
in batches off the job threads, so a slow or dead store never changes or delays a
job's outcome. Readers get :class:`JobRecord` values (:meth:`JobStore.get`,
:meth:`JobStore.search`). See ``docs/results.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuey_core._lazy import lazy_exports
from queuey_core.results.records import Attempt, JobEvent, JobRecord, JobState

if TYPE_CHECKING:
    from queuey_core.results.cancelling import CancelVerdict, cancel_jobs
    from queuey_core.results.recording import JobRecorder
    from queuey_core.results.store import DEFAULT_RETENTION, STORES, JobStore, open_job_store
    from queuey_core.results.waiting import result_of, wait_for_record, wait_for_result

# The records are plain values; the rest (the backends' capabilities, pydantic) is
# imported on first use, so that `queuey jobs --help` can name the states without it.
__getattr__ = lazy_exports(
    __name__,
    {
        **dict.fromkeys(("CancelVerdict", "cancel_jobs"), "queuey_core.results.cancelling"),
        "JobRecorder": "queuey_core.results.recording",
        **dict.fromkeys(
            ("DEFAULT_RETENTION", "STORES", "JobStore", "open_job_store"),
            "queuey_core.results.store",
        ),
        **dict.fromkeys(
            ("result_of", "wait_for_record", "wait_for_result"), "queuey_core.results.waiting"
        ),
    },
)

__all__ = [
    "DEFAULT_RETENTION",
    "STORES",
    "Attempt",
    "CancelVerdict",
    "JobEvent",
    "JobRecord",
    "JobRecorder",
    "JobState",
    "JobStore",
    "cancel_jobs",
    "open_job_store",
    "result_of",
    "wait_for_record",
    "wait_for_result",
]
