"""A worker's records written from a process of its own: the same records as from the
writer thread (the worker's host and pid, not the child's), a child that dies costs at
most the batch it held and another takes its place, a store that is down is counted and
never shown with its password, and the child neither outlives its parent nor ends on a
Ctrl-C before the last batch is written."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core import JobContext
from queuey_core.envelope import Envelope
from queuey_core.errors import JobStoreError
from queuey_core.results import JobRecorder
from queuey_core.results import JobState
from queuey_core.results import open_job_store
from queuey_core.results import writer_process
from queuey_core.results.setup import recorder_for
from queuey_core.results.writer_process import WriterProcess
from queuey_core.settings import Settings
from tests.harness import Memory
from tests.results.conftest import drop_schema
from tests.results.conftest import pg_store_url
from tests.results.support import recording_worker
from tests.results.support import settled_record
from tests.support import Greet
from tests.support import alive
from tests.support import start
from tests.support import wait_for

pytestmark = pytest.mark.processes

#: What a recorder queues: (job, state, at, error, result JSON, ran).
Taken = list[tuple[Envelope, JobState, int, str, str | None, bool]]


def greet(job: Greet, ctx: JobContext) -> object:
    return {"hello": job.name}


def events(*names: str) -> Taken:
    """What a recorder queues for jobs that started and succeeded."""
    now = int(time.time() * 1000)
    taken: Taken = []
    for name in names:
        env = Envelope.for_job(Greet(name=name), enqueued_at=now)
        taken.append((env, JobState.RUNNING, now, "", None, True))
        taken.append((env, JobState.SUCCEEDED, now + 1, "", f'"{name}"', True))
    return taken


def feed(recorder: JobRecorder, taken: Taken) -> None:
    """Hand ``taken`` to ``recorder`` as a worker would."""
    for job, state, _at, _error, result, _ran in taken:
        if state is JobState.RUNNING:
            recorder.job_event("started", job, True, "", None)
        else:
            recorder.job_event(
                "succeeded", job, True, "", None if result is None else result.strip('"')
            )


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def process(db_url: str) -> Iterator[WriterProcess]:
    child = WriterProcess(db_url, retention=3600)
    yield child
    child.close()


def test_a_worker_records_through_its_writer_process(mem: Memory, db_url: str) -> None:
    backend, producer, queues, clock = mem
    recorder = JobRecorder(WriterProcess(db_url, retention=3600))
    running = start(recording_worker(backend, queues, clock, greet, recorder), clock)
    ids = [producer.enqueue(Greet(name=name)) for name in ("ada", "grace", "linus")]
    store = open_job_store(db_url)
    try:
        for job_id, name in zip(ids, ("ada", "grace", "linus"), strict=True):
            record = settled_record(store, job_id, clock, JobState.SUCCEEDED)
            assert record.result == {"hello": name}
            # The worker's own host and pid: the child only writes.
            assert [(a.host, a.pid) for a in record.attempts] == [
                (socket.gethostname(), os.getpid())
            ]
        child = recorder.writer_process
        assert child is not None
        assert child.pid is not None
        assert child.pid != os.getpid()
        running.stop()
        assert child.pid is None, "the child ends with the worker"
        assert recorder.unrecorded == 0
        assert recorder.written >= 6
    finally:
        store.close()


def test_the_child_writes_every_batch_sent_before_it_is_closed(
    process: WriterProcess, db_url: str
) -> None:
    recorder = JobRecorder(process)
    recorder.start()
    envelopes = []
    for n in range(5):
        batch = events(*(f"job-{n}-{i}" for i in range(100)))
        envelopes += [e for e, state, *_ in batch if state is JobState.SUCCEEDED]
        feed(recorder, batch)
    recorder.stop(timeout=30)
    assert process.pid is None
    assert recorder.written == 1000
    assert recorder.unrecorded == 0
    store = open_job_store(db_url)
    try:
        states = {store.get(e.job_id).state for e in envelopes}  # type: ignore[union-attr]
        assert states == {JobState.SUCCEEDED}
    finally:
        store.close()


def write_then_kill(process: WriterProcess) -> int:
    """Have ``process`` write a batch (so that its child runs), then SIGKILL the child and
    wait until it is gone; its pid."""
    process.write("host", 1, events("first"))
    pid = process.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), timeout=10)
    return pid


def test_a_child_killed_between_batches_is_replaced_at_once(
    process: WriterProcess, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_process, "RESPAWN_AFTER", 0.0)
    first = write_then_kill(process)
    later = events("second")
    process.write("host", 1, later)
    assert process.pid not in (None, first)
    store = open_job_store(db_url)
    try:
        record = store.get(later[0][0].job_id)
        assert record is not None
        assert record.state is JobState.SUCCEEDED
    finally:
        store.close()


def test_a_child_that_keeps_dying_is_not_restarted_for_every_batch(
    process: WriterProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_process, "RESPAWN_AFTER", 600.0)
    write_then_kill(process)
    with pytest.raises(JobStoreError, match="keeps ending"):
        process.write("host", 1, events("second"))


def test_a_child_killed_mid_batch_costs_that_batch_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A "server" that takes the connection and never answers: the child's batch hangs
    # in the store's connect until the child is killed.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    child = WriterProcess(f"postgresql://u:pw@127.0.0.1:{port}/db", retention=60)
    recorder = JobRecorder(child)
    recorder.start()
    try:
        feed(recorder, events("lost"))
        wait_for(lambda: child.pid is not None, timeout=10)
        pid = child.pid
        assert pid is not None
        time.sleep(0.3)  # the batch is on its way to the child
        os.kill(pid, signal.SIGKILL)
        assert recorder.flush(timeout=30)
        assert recorder.unrecorded == 2
        assert recorder.written == 0
    finally:
        recorder.close()
        silent.close()


def test_a_store_that_is_down_is_counted_and_its_password_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    child = WriterProcess("postgresql://queuey:s3cr3t-pw@127.0.0.1:1/db", retention=60)
    try:
        with pytest.raises(JobStoreError) as raised:
            child.write("host", 1, events("nowhere"))
        assert "s3cr3t-pw" not in str(raised.value)
        assert "127.0.0.1" in str(raised.value)
        assert child.pid is not None, "the child stays, to try again with the next batch"
    finally:
        child.close()


def test_the_child_ignores_a_ctrl_c_and_writes_on(process: WriterProcess, db_url: str) -> None:
    process.write("host", 1, events("before"))
    pid = process.pid
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    later = events("after")
    process.write("host", 1, later)
    assert process.pid == pid
    store = open_job_store(db_url)
    try:
        assert store.get(later[0][0].job_id) is not None
    finally:
        store.close()


def test_the_child_ends_when_its_parent_is_killed(db_url: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from tests.results.test_writer_process import events
        from queuey_core.results.writer_process import WriterProcess
        child = WriterProcess({db_url!r}, retention=60)
        child.write("host", 1, events("one"))
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert alive(pid)
        parent.kill()
        parent.wait(10)
        wait_for(lambda: not alive(pid), timeout=10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def test_bad_lines_are_answered_not_fatal(db_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "queuey_core.results.writer_process"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    out, _ = child.communicate(
        f'{{"url": "{db_url}", "retention": 60}}\nnot json\n["h", 1, [[1]]]\n'.encode(),
        timeout=30,
    )
    replies = out.decode().splitlines()
    assert len(replies) == 2
    assert all(reply.startswith('"the batch failed:') for reply in replies)
    assert child.returncode == 0


def test_auto_writes_from_a_process_for_postgresql_only(tmp_path: Path) -> None:
    def recorder(url: str, writer: str = "auto") -> JobRecorder:
        settings = Settings(
            broker={"url": f"sqlite:///{tmp_path / 'broker.db'}"},
            results={"url": url, "writer": writer},
        )
        made = recorder_for(settings)
        assert made is not None
        return made

    assert recorder("postgresql://u@127.0.0.1/db").writer_process is not None
    assert recorder(f"sqlite:///{tmp_path / 'jobs.db'}").writer_process is None
    assert recorder("memory://x").writer_process is None
    assert recorder(f"sqlite:///{tmp_path / 'j.db'}", "process").writer_process is not None
    assert recorder("postgresql://u@127.0.0.1/db", "thread").writer_process is None
    with pytest.raises(ValueError, match="cannot write to memory"):
        recorder("memory://x", "process")


@pytest.mark.integration
def test_a_worker_records_into_postgresql_from_its_writer_process(mem: Memory) -> None:
    backend, producer, queues, clock = mem
    url = pg_store_url()
    recorder = JobRecorder(WriterProcess(url, retention=3600))
    running = start(recording_worker(backend, queues, clock, greet, recorder), clock)
    store = open_job_store(url)
    try:
        jobs = [producer.enqueue(Greet(name=f"n{i}")) for i in range(50)]
        for job_id in jobs:
            settled_record(store, job_id, clock, JobState.SUCCEEDED)
        running.stop()
        assert recorder.unrecorded == 0
    finally:
        store.close()
        drop_schema(url)


def test_a_writer_thread_is_left_waiting_for_no_dead_child() -> None:
    """A child that hangs on a batch is killed at close, and the recorder's thread, which
    waits for the child's answer, is freed."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    child = WriterProcess(f"postgresql://u@127.0.0.1:{port}/db", retention=60)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            child.write("host", 1, events("stuck"))
        except JobStoreError as exc:
            failed.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    wait_for(lambda: child.pid is not None, timeout=10)
    time.sleep(0.2)
    child.close(timeout=0.1)
    thread.join(10)
    silent.close()
    assert not thread.is_alive()
    assert len(failed) == 1


def test_without_an_interpreter_to_start_it_says_what_to_set(
    process: WriterProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "")
    assert not process.start()
    with pytest.raises(JobStoreError, match="writer = 'thread'"):
        process.write("host", 1, events("nowhere"))
