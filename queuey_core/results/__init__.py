"""Results, a job's history, and where they are kept: the job store.

A store is chosen by URL (``[results] url``; :func:`open_job_store`): ``sqlite:///path``
(the default on the embedded backend: its own file), ``postgresql://...`` (the
``postgres`` extra) or ``memory://``. The worker records through a hook that writes
in batches off the job threads, so a slow or dead store never changes or delays a
job's outcome. Readers get :class:`JobRecord` values (:meth:`JobStore.get`,
:meth:`JobStore.search`). See ``docs/results.md``.
"""

from __future__ import annotations

from queuey_core.results.cancelling import CancelVerdict, cancel_jobs
from queuey_core.results.recording import JobRecorder
from queuey_core.results.records import Attempt, JobEvent, JobRecord, JobState
from queuey_core.results.store import DEFAULT_RETENTION, STORES, JobStore, open_job_store
from queuey_core.results.waiting import result_of, wait_for_record, wait_for_result

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
