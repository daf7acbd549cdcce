"""``wait_for_result``: the result once the job is over, its failure raised with the
reason, a timeout that says where the job was."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from pydantic import BaseModel

from queuey_core.errors import JobFailed
from queuey_core.errors import JobWaitTimeout
from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import wait_for_result


class Sum(BaseModel):
    total: int


def _write(store: JobStore, job_id: uuid.UUID, state: JobState, **kw: object) -> None:
    t = int(time.time() * 1000)
    store.write([JobEvent(job_id, "t", "q", state, at=t, enqueued_at=t, ran=False, **kw)])  # type: ignore[arg-type]


def test_the_result_comes_back_as_json_or_as_the_model(store: JobStore) -> None:
    job = uuid.uuid4()
    _write(store, job, JobState.SUCCEEDED, result='{"total": 3}')
    assert wait_for_result(store, job, timeout=1) == {"total": 3}
    assert wait_for_result(store, job, timeout=1, result_type=Sum) == Sum(total=3)


def test_a_dead_letter_is_raised_with_its_reason(store: JobStore) -> None:
    job = uuid.uuid4()
    _write(store, job, JobState.DEAD_LETTERED, error="fatal error: no such user")
    with pytest.raises(JobFailed, match="was dead-lettered: fatal error: no such user") as caught:
        wait_for_result(store, job, timeout=1)
    assert caught.value.record.state is JobState.DEAD_LETTERED  # type: ignore[attr-defined]


def test_a_timeout_says_where_the_job_was(store: JobStore) -> None:
    job = uuid.uuid4()
    _write(store, job, JobState.QUEUED)
    with pytest.raises(JobWaitTimeout, match=r"had not finished after 0.05s \(queued\)"):
        wait_for_result(store, job, timeout=0.05)
    with pytest.raises(JobWaitTimeout, match="unknown to the store"):
        wait_for_result(store, uuid.uuid4(), timeout=0.01)


def test_wait_wakes_soon_after_the_store_hears_of_the_end(store: JobStore) -> None:
    job = uuid.uuid4()
    _write(store, job, JobState.RUNNING)
    ended: list[float] = []

    def finish() -> None:
        time.sleep(0.2)
        _write(store, job, JobState.SUCCEEDED, result="1")
        ended.append(time.monotonic())

    threading.Thread(target=finish).start()
    assert wait_for_result(store, job, timeout=10) == 1
    lag = time.monotonic() - ended[0]
    # The poll is at most 20 ms apart; a loaded machine may add scheduling delay.
    assert lag < 0.5, f"wait returned {lag * 1000:.0f} ms after the end"
