"""Folding a batch keeps the meaning of applying its events one by one."""

from __future__ import annotations

import uuid

from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results.batch import fold


def _e(job: uuid.UUID, state: JobState, at: int, **kw: object) -> JobEvent:
    return JobEvent(job, "t", "q", state, at=at, enqueued_at=at, **kw)  # type: ignore[arg-type]


def test_a_job_started_and_ended_in_one_batch_is_one_row_and_one_closed_attempt() -> None:
    job = uuid.uuid4()
    folded = fold(
        [
            _e(job, JobState.QUEUED, 1),
            _e(job, JobState.RUNNING, 2, attempt=1, host="h", pid=1),
            _e(job, JobState.SUCCEEDED, 3, attempt=1, host="h", pid=1, result="7"),
        ]
    )
    assert folded.queued == []
    assert folded.jobs == [(str(job), "t", "q", "succeeded", "7", "", 1, 3)]
    assert folded.attempts == [(str(job), 1, "h", 1, 2, 3, "succeeded", "")]
    assert folded.closings == []


def test_an_attempt_opened_earlier_is_closed_by_an_update() -> None:
    job = uuid.uuid4()
    folded = fold([_e(job, JobState.RETRYING, 5, attempt=1, host="h", pid=1, error="boom")])
    assert folded.attempts == []
    assert folded.closings == [(5, "retrying", "boom", str(job), "h", 1)]


def test_two_runs_in_one_batch_stay_two_attempts() -> None:
    job = uuid.uuid4()
    folded = fold(
        [
            _e(job, JobState.RUNNING, 1, attempt=1, host="h", pid=1),
            _e(job, JobState.RETRYING, 2, attempt=1, host="h", pid=1, error="x"),
            _e(job, JobState.RUNNING, 3, attempt=2, host="h", pid=1),
            _e(job, JobState.DEAD_LETTERED, 4, attempt=2, host="h", pid=1, error="y"),
        ]
    )
    assert [a[1] for a in folded.attempts] == [1, 2]
    assert [a[6] for a in folded.attempts] == ["retrying", "dead_lettered"]
    assert [row[3] for row in folded.jobs] == ["dead_lettered"]


def test_an_enqueue_alone_is_an_insert_that_never_overwrites() -> None:
    job = uuid.uuid4()
    folded = fold([_e(job, JobState.QUEUED, 1)])
    assert folded.queued == [(str(job), "t", "q", "queued", None, "", 1, 1)]
    assert folded.jobs == []
