"""Folding a batch of job events into the fewest rows to write: pure, no I/O.

A job usually starts and ends within one batch: its row is written once, with the last
state, and its attempt once, already closed. Owns: :func:`fold`. Must keep the meaning
of applying the events one by one: the last event of a job wins (a store applies it only
if it is not older than what it holds), a queued event never overwrites, and an end closes
the attempt its host and pid opened last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from queuey_core.results.records import JobEvent, JobState


@dataclass
class Folded:
    """What a batch writes: rows of each statement, in order."""

    queued: list[tuple[Any, ...]] = field(default_factory=list)
    """Jobs only enqueued in this batch: inserted unless the store has them."""
    jobs: list[tuple[Any, ...]] = field(default_factory=list)
    """Jobs upserted with their last state."""
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    """Attempts started in this batch (closed when they also ended in it)."""
    closings: list[tuple[Any, ...]] = field(default_factory=list)
    """Ends of attempts started in an earlier batch."""


def fold(events: Sequence[JobEvent]) -> Folded:
    """The rows ``events`` come to (see the module docstring)."""
    last: dict[str, JobEvent] = {}
    results: dict[str, str] = {}
    created: dict[str, int] = {}
    queued_only: dict[str, JobEvent] = {}
    # (job, host, pid) -> index into attempts of the attempt opened in this batch
    open_here: dict[tuple[str, str, int], int] = {}
    attempts: list[list[Any]] = []
    closings: list[tuple[Any, ...]] = []
    for e in events:
        job_id = str(e.job_id)
        created[job_id] = min(created.get(job_id, e.enqueued_at), e.enqueued_at)
        if e.state is JobState.QUEUED:
            if job_id not in last:
                queued_only.setdefault(job_id, e)
            continue
        queued_only.pop(job_id, None)
        last[job_id] = e
        if e.result is not None:
            results[job_id] = e.result
        key = (job_id, e.host, e.pid)
        if e.state is JobState.RUNNING:
            open_here[key] = len(attempts)
            attempts.append([job_id, e.attempt, e.host, e.pid, e.at, None, None, ""])
        elif e.ran:
            index = open_here.pop(key, None)
            if index is None:
                closings.append((e.at, e.state.value, e.error, job_id, e.host, e.pid))
            else:
                attempts[index][5:] = [e.at, e.state.value, e.error]
    folded = Folded(attempts=[tuple(a) for a in attempts], closings=closings)
    for job_id, e in queued_only.items():
        folded.queued.append(_row(job_id, e, None, created[job_id]))
    for job_id, e in last.items():
        folded.jobs.append(_row(job_id, e, results.get(job_id), created[job_id]))
    return folded


def _row(job_id: str, e: JobEvent, result: str | None, created: int) -> tuple[Any, ...]:
    return (job_id, e.job_type, e.queue, e.state.value, result, e.error, created, e.at)
