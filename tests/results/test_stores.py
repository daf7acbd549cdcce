"""Every job store keeps the same history: states, attempts, results, filters, paging
and expiry, whatever the backend of the store."""

from __future__ import annotations

import time
import uuid
from datetime import UTC
from datetime import datetime
from pathlib import Path

import pytest

from queuey_core.errors import ConfigError
from queuey_core.errors import JobStoreError
from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import JobStore
from queuey_core.results import open_job_store
from queuey_core.results.sql_store import SqlJobStore


def _now() -> int:
    return int(time.time() * 1000)


def _event(job_id: uuid.UUID, state: JobState, at: int, **kw: object) -> JobEvent:
    fields: dict[str, object] = {"job_type": "greet", "queue": "default", "enqueued_at": at}
    fields.update(kw)
    return JobEvent(job_id, state=state, at=at, **fields)  # type: ignore[arg-type]


def test_a_retried_job_keeps_both_attempts_and_its_result(store: JobStore) -> None:
    job, t = uuid.uuid4(), _now()
    store.write(
        [
            _event(job, JobState.QUEUED, t),
            _event(job, JobState.RUNNING, t + 1, attempt=1, host="a", pid=1),
            _event(job, JobState.RETRYING, t + 2, attempt=1, host="a", pid=1, error="boom"),
            _event(job, JobState.RUNNING, t + 3, attempt=2, host="b", pid=2),
            _event(job, JobState.SUCCEEDED, t + 4, attempt=2, host="b", pid=2, result='{"n": 1}'),
        ]
    )
    record = store.get(job)
    assert record is not None
    assert record.state is JobState.SUCCEEDED
    assert record.result == {"n": 1}
    assert [(a.number, a.host, a.outcome, a.error) for a in record.attempts] == [
        (1, "a", JobState.RETRYING, "boom"),
        (2, "b", JobState.SUCCEEDED, ""),
    ]
    assert record.created_at == datetime.fromtimestamp(t / 1000, tz=UTC)
    assert record.to_json()["state"] == "succeeded"
    assert "result" not in record.to_json(with_result=False)


def test_a_late_queued_event_never_moves_a_job_back(store: JobStore) -> None:
    job, t = uuid.uuid4(), _now()
    store.write([_event(job, JobState.RUNNING, t + 5, attempt=1, host="a", pid=1)])
    store.write([_event(job, JobState.QUEUED, t)])
    store.write([_event(job, JobState.RETRYING, t + 1, attempt=1, host="a", pid=1)])
    record = store.get(job)
    assert record is not None
    assert record.state is JobState.RUNNING, "an older event must not replace a newer state"


def test_a_worker_event_replaces_queued_whatever_the_clocks_say(store: JobStore) -> None:
    # The producer records "queued" after its publish: a worker may have taken the job
    # (and finished it) by a clock that reads earlier than the producer's.
    running, done = uuid.uuid4(), uuid.uuid4()
    t = _now()
    store.write([_event(running, JobState.QUEUED, t + 50), _event(done, JobState.QUEUED, t + 50)])
    store.write(
        [
            _event(running, JobState.RUNNING, t, attempt=1, host="a", pid=1),
            _event(done, JobState.RUNNING, t, attempt=1, host="a", pid=1),
        ]
    )
    store.write([_event(done, JobState.SUCCEEDED, t + 1, attempt=1, host="a", pid=1)])
    found = store.get(running)
    assert found is not None
    assert found.state is JobState.RUNNING
    finished = store.get(done)
    assert finished is not None
    assert finished.state is JobState.SUCCEEDED
    assert [a.outcome for a in finished.attempts] == [JobState.SUCCEEDED]


def test_a_worker_killed_mid_run_leaves_an_open_attempt_beside_the_next(store: JobStore) -> None:
    job, t = uuid.uuid4(), _now()
    store.write(
        [
            _event(job, JobState.RUNNING, t, attempt=1, host="a", pid=1),
            # pid 1 died; the job was redelivered to pid 2 at the same attempt number.
            _event(job, JobState.RUNNING, t + 10, attempt=1, host="a", pid=2),
            _event(job, JobState.SUCCEEDED, t + 11, attempt=1, host="a", pid=2),
        ]
    )
    record = store.get(job)
    assert record is not None
    assert [(a.pid, a.ended_at is None, a.outcome) for a in record.attempts] == [
        (1, True, None),
        (2, False, JobState.SUCCEEDED),
    ]


def test_search_filters_and_pages(store: JobStore) -> None:
    t = _now()
    jobs = [uuid.uuid4() for _ in range(5)]
    store.write(
        [
            _event(j, JobState.SUCCEEDED if n % 2 else JobState.DEAD_LETTERED, t + n, ran=False)
            for n, j in enumerate(jobs)
        ]
        + [_event(uuid.uuid4(), JobState.QUEUED, t, job_type="other", queue="beta")]
    )
    done = store.search(state=JobState.SUCCEEDED)
    assert [r.job_id for r in done] == [jobs[3], jobs[1]], "newest first"
    assert [r.job_id for r in store.search(job_type="greet", limit=2)] == [jobs[4], jobs[3]]
    assert [r.job_id for r in store.search(job_type="greet", limit=2, offset=2)] == [
        jobs[2],
        jobs[1],
    ]
    assert [r.job_type for r in store.search(queue="beta")] == ["other"]
    window = store.search(
        since=datetime.fromtimestamp((t + 1) / 1000, tz=UTC),
        until=datetime.fromtimestamp((t + 3) / 1000, tz=UTC),
        job_type="greet",
    )
    assert [r.job_id for r in window] == [jobs[2], jobs[1]]
    assert store.get(uuid.uuid4()) is None


def test_records_past_the_retention_are_expired_by_a_write(store_url: str) -> None:
    store = open_job_store(store_url, retention=60)
    try:
        old, new, t = uuid.uuid4(), uuid.uuid4(), _now()
        store.write([_event(old, JobState.SUCCEEDED, t - 120_000, ran=False)])
        assert store.get(old) is None, "the first write expires what is already too old"
        store.write([_event(old, JobState.RUNNING, t - 120_000, attempt=1, host="h", pid=1)])
        store.write([_event(new, JobState.QUEUED, t)] * 1000)  # crosses EXPIRE_EVERY
        assert store.get(old) is None
        assert store.get(new) is not None
    finally:
        store.close()


def test_expire_now_deletes_what_is_past_the_retention_on_every_sql_store(
    store_url: str,
) -> None:
    store = open_job_store(store_url, retention=60)
    assert isinstance(store, SqlJobStore), "memory, sqlite and postgres stores are SQL"
    try:
        job_id, t = uuid.uuid4(), _now()
        store.write([_event(job_id, JobState.RUNNING, t - 30_000, attempt=1, host="h", pid=1)])
        store.expire_now()
        assert store.get(job_id) is not None, "inside the retention"
        store.write([_event(job_id, JobState.SUCCEEDED, t - 90_000, host="h", pid=1)])
        assert store.get(job_id) is not None, "an older event does not touch the record"
        store.close()
        store = open_job_store(store_url, retention=20)
        assert isinstance(store, SqlJobStore)
        store.expire_now()
        assert store.get(job_id) is None
    finally:
        store.close()


def test_an_unknown_scheme_says_which_ones_exist() -> None:
    with pytest.raises(ConfigError, match=r"no job store for URLs starting redis://.*sqlite://"):
        open_job_store("redis://localhost")


def test_a_file_of_another_program_is_one_clear_error(tmp_path: Path) -> None:
    import sqlite3  # noqa: PLC0415

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(JobStoreError, match="another program"):
        open_job_store(f"sqlite:///{path}")


@pytest.mark.integration
def test_an_unreachable_postgres_is_one_line_without_the_password() -> None:
    with pytest.raises(JobStoreError) as caught:
        open_job_store("postgresql://u:hunter2@127.0.0.1:1/test")
    text = str(caught.value)
    assert "hunter2" not in text
    assert "\n" not in text


def test_a_large_batch_keeps_every_job_and_attempt_in_order(store: JobStore) -> None:
    # PostgreSQL writes a batch as one statement per table (arrays, unnest): every row,
    # NULLs, quotes and non-ASCII text must come through, and ids keep the start order.
    t = _now()
    jobs = [uuid.uuid4() for _ in range(300)]
    first: list[JobEvent] = []
    for n, job_id in enumerate(jobs):
        first.append(_event(job_id, JobState.QUEUED, t))
        first.append(_event(job_id, JobState.RUNNING, t + 1, host="h", pid=1, attempt=1))
        if n % 2:
            result = None if n % 3 else f'{{"n": {n}, "s": "\\"é, {{}}"}}'
            first.append(_event(job_id, JobState.SUCCEEDED, t + 2, host="h", pid=1, result=result))
    store.write(first)
    # The others fail in a later batch, and run again.
    second: list[JobEvent] = []
    for job_id in jobs[::2]:
        second.append(
            _event(job_id, JobState.RETRYING, t + 3, host="h", pid=1, error='it\'s "bad"')
        )
        second.append(_event(job_id, JobState.RUNNING, t + 4, host="h", pid=1, attempt=2))
    store.write(second)

    for n, job_id in enumerate(jobs):
        record = store.get(job_id)
        assert record is not None
        if n % 2:
            assert record.state is JobState.SUCCEEDED
            assert len(record.attempts) == 1
            assert record.attempts[0].outcome is JobState.SUCCEEDED
            assert record.result == (None if n % 3 else {"n": n, "s": '"é, {}'})
        else:
            assert record.state is JobState.RUNNING
            assert [a.number for a in record.attempts] == [1, 2], "in the order they started"
            assert record.attempts[0].outcome is JobState.RETRYING
            assert record.attempts[0].error == 'it\'s "bad"'
            assert record.attempts[1].ended_at is None
