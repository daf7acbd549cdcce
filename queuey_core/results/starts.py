"""The recorder's jobs in flight, and the events its writer makes of them: pure, no I/O.

A job thread only notes a job's start (:attr:`Starts.running`); the writer writes it as
running if the job is still running when it next writes, and otherwise with the job's
end, as one attempt. Work done by the writer, a batch at a time, costs a worker about
half what the same work costs on its job threads, between their handlers.

Owns: :class:`Starts`, what a job thread notes and what the writer makes of a batch
(:meth:`Starts.prepare`: ends, their starts, and results encoded as the store keeps
them). Must keep: each start written exactly once, before its end or with it, and every
event that is not written counted.
"""

from __future__ import annotations

import logging
from typing import Any

from queuey_core.results.encoding import encode_result
from queuey_core.results.records import JobState

logger = logging.getLogger("queuey_core.results.recording")

#: A job's start: (envelope, wall ms). Its id() keys it while it is alive: it is held
#: by Starts.running, then by its end's Raw, until the writer has written both.
Start = tuple[Any, int]
#: What a job thread queues: (JobInfo or envelope, state, at ms, error, result, ran,
#: start), ``result`` the handler's object and ``start`` the job's entry in
#: Starts.running (None for a job that did not run here, or a caller of ``on_job_*``).
Raw = tuple[Any, JobState, int, str, object, bool, "Start | None"]
#: What the writer writes: (job, state, at ms, error, result JSON, ran).
Event = tuple[Any, JobState, int, str, str | None, bool]

_RUNNING = JobState.RUNNING


class Starts:
    """The jobs in flight of one recorder. ``running`` is the job threads' (a dict's item
    set and pop are each atomic); everything else is the writer's alone."""

    def __init__(self, max_result_size: int) -> None:
        self.running: dict[int, Start] = {}
        """id(envelope) -> the start of each job running now."""
        self._shown: set[int] = set()  # ids of the starts written, whose end is not yet
        self._limit = max_result_size

    def prepare(self, raw: list[Raw]) -> list[Event]:
        """The events to write for ``raw``: each end with its start before it when that
        was not written yet (one attempt, opened and closed), each result encoded, and
        then the starts of the jobs still running that were not written yet."""
        shown = self._shown
        batch: list[Event] = []
        for job, state, at, text, result, ran, start in raw:
            if start is not None:
                if id(start) in shown:
                    shown.discard(id(start))
                else:
                    batch.append((job, _RUNNING, start[1], "", None, True))
            if result is None:
                batch.append((job, state, at, text, None, ran))
            else:
                encoded, why = self._encode(job, result)
                batch.append((job, state, at, why or text, encoded, ran))
        # A job that ends from now on is in a later batch (a job thread takes it out of
        # running before it queues its end): its start is written here or with it.
        for start in self.running.copy().values():
            if id(start) not in shown:
                shown.add(id(start))
                batch.append((start[0], _RUNNING, start[1], "", None, True))
        return batch

    def unshown(self) -> bool:
        """Whether a job is running whose start is not written yet."""
        return any(id(start) not in self._shown for start in self.running.copy().values())

    def lost(self, starts: list[Start]) -> int:
        """Forget the starts of ends that were dropped: how many of them were never
        written (lost too)."""
        never = 0
        for start in starts:
            if id(start) in self._shown:
                self._shown.discard(id(start))
            else:
                never += 1
        return never

    def _encode(self, job: Any, result: object) -> tuple[str | None, str]:
        """``result`` as the store keeps it, or None and why not (logged)."""
        try:
            encoded, why = encode_result(result, self._limit)
        except Exception as exc:  # a model's own serializer, or a result changed meanwhile
            encoded, why = None, f"result not kept: {type(exc).__name__}: {exc}"
        if why:
            logger.error("%s", why, extra={"job_id": str(job.job_id), "job_type": job.job_type})
        return encoded, why
