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


_QUEUED = JobState.QUEUED
_RUNNING = JobState.RUNNING


def fold(events: Sequence[JobEvent]) -> Folded:
    """The rows ``events`` come to (see the module docstring).

    It runs on the writer thread for every event a worker records, so it is written for
    speed: a job is keyed by its id's integer (no ``str(UUID)`` per event, no
    Python-level UUID hash) and spelled as text once; a state is read as its
    ``_value_`` (``.value`` is a Python-level descriptor on an enum).
    """
    # uuid int -> [job id text, last event that is not "queued", result, created, the
    # first "queued" event while no other came]
    jobs: dict[int, list[Any]] = {}
    # (job, host, pid) -> index into attempts of the attempt opened in this batch
    open_here: dict[tuple[int, str, int], int] = {}
    attempts: list[list[Any]] = []
    closings: list[tuple[Any, ...]] = []
    for e in events:
        key = e.job_id.int
        job = jobs.get(key)
        if job is None:
            job = jobs[key] = [str(e.job_id), None, None, e.enqueued_at, None]
        elif e.enqueued_at < job[3]:
            job[3] = e.enqueued_at
        state = e.state
        if state is _QUEUED:
            if job[1] is None and job[4] is None:
                job[4] = e
            continue
        job[1] = e
        if e.result is not None:
            job[2] = e.result
        if state is _RUNNING:
            open_here[(key, e.host, e.pid)] = len(attempts)
            attempts.append([job[0], e.attempt, e.host, e.pid, e.at, None, None, ""])
        elif e.ran:
            index = open_here.pop((key, e.host, e.pid), None)
            if index is None:
                closings.append((e.at, state._value_, e.error, job[0], e.host, e.pid))
            else:
                attempt = attempts[index]
                attempt[5] = e.at
                attempt[6] = state._value_
                attempt[7] = e.error
    folded = Folded(attempts=[tuple(a) for a in attempts], closings=closings)
    queued, rows = folded.queued, folded.jobs
    for job_id, last, result, created, first_queued in jobs.values():
        if last is None:
            e = first_queued
            queued.append((job_id, e.job_type, e.queue, "queued", None, e.error, created, e.at))
        else:
            e = last
            rows.append(
                (job_id, e.job_type, e.queue, e.state._value_, result, e.error, created, e.at)
            )
    return folded
