"""The command line on each backend that other processes reach (``across_processes``):
``queuey job`` after a ``--burst``, what a burst does with delayed and leased jobs, a
worker's jobs after ``kill -9``, and what a forced second signal does with jobs in hand.

RabbitMQ runs with a SQLite and with a PostgreSQL job store, the embedded file with its
own. On a backend with ``leases`` a killed worker's job waits for its lease (1 s here);
on one without, it comes back when the dead worker's connection closes. Either way a
``--burst`` does not wait for a job in another worker's hands: it runs what is ready,
delayed or held, and what it took itself.
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend_kinds import BackendKind
from tests.contract.projects import Project
from tests.contract.projects import project_on
from tests.contract.projects import wait
from tests.integration.processes import JsonLogProcess

pytestmark = [pytest.mark.processes, pytest.mark.requires("across_processes")]


@pytest.fixture
def project(stored_kind: BackendKind, tmp_path: Path) -> Iterator[Project]:
    with project_on(stored_kind, tmp_path / "project") as made:
        yield made


@pytest.fixture
def running() -> Iterator[list[JsonLogProcess]]:
    """Processes a test started: killed after it, whatever it left."""
    procs: list[JsonLogProcess] = []
    yield procs
    for p in procs:
        if p.proc.poll() is None:
            p.proc.kill()
        p.proc.wait(timeout=30)


def started_job(project: Project, running: list[JsonLogProcess], job_id: str) -> JsonLogProcess:
    """A worker started, once it runs ``job_id`` (its job store says so)."""
    worker = project.start("worker")
    running.append(worker)
    wait(lambda: project.state(job_id) == "running", f"{job_id} runs")
    return worker


def test_queuey_job_tells_each_jobs_attempts_and_a_burst_runs_the_delayed_ones(
    project: Project,
) -> None:
    flaky = project.enqueue("flaky", '{"failures": 1}')
    later = project.enqueue("greet", '{"name": "later"}', "--delay", "1s")
    doomed = project.enqueue("doomed", '{"why": "demo"}')
    assert project.state(flaky) == "queued", "an enqueue records its job as queued"

    project.run("worker", "--burst")
    record = project.json("job", flaky)
    assert record["state"] == "succeeded"
    assert [a["outcome"] for a in record["attempts"]] == ["retrying", "succeeded"]
    assert project.state(later) == "succeeded", "the burst waited for the delayed job"
    dead = project.json("job", doomed)
    assert (dead["state"], dead["error"]) == ("dead_lettered", "fatal error: demo")
    assert project.counts("alpha") == (0, 0)
    assert project.queue("alpha")["dead_letters"] == 1
    assert project.json("queues")["held"] == 0


def test_queuey_job_finds_a_job_by_the_key_it_was_enqueued_with(project: Project) -> None:
    project.enqueue("greet", '{"name": "keyed"}', "--job-id", "order-7")
    project.run("worker", "--burst")
    assert project.state("order-7") == "succeeded"


def test_enqueue_file_records_its_jobs_as_queued(project: Project) -> None:
    ids = [str(uuid.uuid4()) for _ in range(2)]
    lines = "".join(f'{{"name": "f{i}", "job_id": "{job_id}"}}\n' for i, job_id in enumerate(ids))
    (project.root / "jobs.jsonl").write_text(lines)
    project.run("enqueue", "greet", "--file", "jobs.jsonl")
    assert [project.state(job_id) for job_id in ids] == ["queued", "queued"]


def test_a_job_of_a_worker_killed_with_sigkill_runs_again_to_its_end(
    project: Project, running: list[JsonLogProcess]
) -> None:
    # Long enough that a poll of `queuey job` (a process of its own, seconds on a loaded
    # machine) sees it running: a 1 s nap could start and end between two polls.
    job = project.enqueue("nap", '{"seconds": 4}')
    worker = started_job(project, running, job)
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(timeout=30)

    # Ready again once the dead worker's connection closed, or (``leases``) its lease
    # expired. Not before: a burst does not wait for jobs in another worker's hands, dead
    # or alive (it would exit with this one still leased).
    wait(lambda: project.counts("beta") == (1, 0), "the killed worker's job is ready again")
    project.run("worker", "--burst")
    record = project.json("job", job)
    assert record["state"] == "succeeded"
    assert len(record["attempts"]) == 2, "the killed run, then the one that finished"
    assert record["attempts"][-1]["outcome"] == "succeeded"
    assert project.counts("beta") == (0, 0)


def test_a_second_signal_stops_at_once_and_gives_the_jobs_in_hand_back(
    stored_kind: BackendKind, tmp_path: Path, running: list[JsonLogProcess]
) -> None:
    # A lease far longer than the test: the job is ready again only if it was released.
    with project_on(stored_kind, tmp_path / "project", lease=600) as project:
        job = project.enqueue("nap", '{"seconds": 600}')
        worker = started_job(project, running, job)
        worker.proc.send_signal(signal.SIGINT)
        wait(
            lambda: any("draining" in e.get("message", "") for e in worker.events),
            "the first signal starts a drain",
        )
        worker.proc.send_signal(signal.SIGINT)
        try:
            code = worker.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("a second SIGINT did not stop the worker at once")
        assert code == 130, "stopped at once"
        wait(
            lambda: project.counts("beta") == (1, 0),
            "the job in hand is ready again, not leased",
            timeout=15,
        )
