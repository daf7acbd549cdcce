"""The worker's side of unique jobs: let go of a job's keys when their period ends.

Owns: :class:`UniqueRelease`, a worker hook that reads the keys an envelope carries
(:class:`~queuey_core.flow.unique.UniqueMark`) and lets go of those held ``until``
the job's start when it starts, and of every key held until then or until its end at
its final outcome (success, dead letter, cancel). A retry or a deferral keeps them; a
timed key is never released, it expires. Must never: release a key of a job that will
run again, or raise into the worker (a store that fails is logged, and the key stays
held: a later enqueue is refused rather than run twice).
"""

from __future__ import annotations

import logging
from typing import Any

from queuey_core.errors import QueueyError
from queuey_core.flow.unique_keys import UniqueKeys
from queuey_core.worker.hooks import WorkerHooks

logger = logging.getLogger(__name__)

#: The events that end a job for good: every key not timed is let go.
_FINAL = frozenset({"succeeded", "dead_lettered", "cancelled"})


class UniqueRelease(WorkerHooks):
    """Lets go of jobs' unique keys as their periods end (see the module docstring)."""

    takes_envelopes = True

    def __init__(self, keys: UniqueKeys) -> None:
        self._keys = keys

    def job_event(self, event: str, envelope: Any, ran: bool, text: str, result: object) -> None:
        """Release what ``event`` ends; see :class:`~queuey_core.worker.hooks.EnvelopeSink`."""
        marks = envelope.unique
        if not marks:
            return
        if event == "started":
            until: tuple[str, ...] = ("start",)
        elif event in _FINAL:
            until = ("start", "end")
        else:
            return
        keys = [(m.key, str(envelope.job_id)) for m in marks if m.until in until]
        if not keys:
            return
        try:
            self._keys.release(keys)
        except QueueyError as exc:
            logger.warning(
                "unique keys of job %s not released (%s): held until released",
                envelope.job_id,
                exc,
                extra={"job_id": str(envelope.job_id), "job_type": envelope.job_type},
            )
