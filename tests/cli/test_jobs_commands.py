"""``queuey job``, ``jobs``, ``cancel`` and ``enqueue --wait`` on the embedded backend,
through the installed script, with real worker processes: the job store is on by
default there (the broker's own file). Also: a cancel reaches a worker started after
it, and a worker killed mid-run leaves both of the job's attempts in its record."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable

import pytest

from queuey_core.process.exits import Exit
from tests.cli.test_sqlite_commands import Project
from tests.cli.test_sqlite_commands import project as project  # noqa: PLC0414 - a fixture
from tests.cli.test_sqlite_commands import started as started  # noqa: PLC0414 - a fixture
from tests.cli.test_sqlite_commands import wait

pytestmark = pytest.mark.processes

Start = Callable[[subprocess.Popen[str]], subprocess.Popen[str]]


def state_of(project: Project, job_id: str) -> str:
    found = project.run("job", job_id, "--json", ok=False)
    if found.returncode == Exit.NO_SUCH_JOB:
        return "unknown"
    return str(json.loads(found.stdout)["state"])


def test_wait_prints_the_result_and_exits_by_outcome(project: Project, started: Start) -> None:
    started(project.start("worker"))
    done = project.run("enqueue", "greet", '{"name": "ada"}', "--wait", "--timeout", "30s")
    job_id, result = done.stdout.split()
    assert result == "null", "greet returns nothing"
    failed = project.run("enqueue", "doomed", "{}", "--wait", "--timeout", "30s", ok=False)
    assert failed.returncode == Exit.JOB_FAILED
    assert "was dead-lettered: fatal error" in failed.stderr

    record = project.json("job", job_id)
    assert isinstance(record, dict)
    assert record["state"] == "succeeded"
    assert "result" not in record, "a result is printed only when asked"
    assert [a["outcome"] for a in record["attempts"]] == ["succeeded"]
    assert "result" in project.json("job", job_id, "--result")  # type: ignore[operator]

    listed = project.json("jobs", "--state", "dead_lettered")
    assert isinstance(listed, dict)
    assert [j["job_type"] for j in listed["jobs"]] == ["doomed"]
    page = project.json("jobs", "--limit", "1", "--page", "2")
    assert isinstance(page, dict)
    assert [j["job_id"] for j in page["jobs"]] == [job_id], "oldest on the second page"


def test_a_wait_that_runs_out_says_where_the_job_is(project: Project) -> None:
    # No worker: the job stays queued.
    late = project.run("enqueue", "greet", '{"name": "x"}', "--wait", "--timeout", "1s", ok=False)
    assert late.returncode == Exit.WAIT_TIMEOUT
    assert "had not finished after 1s (queued)" in late.stderr


def test_a_worker_started_after_the_cancel_never_runs_the_job(
    project: Project, started: Start
) -> None:
    job_id = project.run("enqueue", "greet", '{"name": "never"}', "--delay", "1s").stdout.strip()
    assert project.run("cancel", job_id).stdout.strip() == f"{job_id}: cancelled"
    started(project.start("worker"))  # no worker ran when the cancel was made
    wait(lambda: project.rows() == 0, "the delayed job is settled")
    record = project.json("job", job_id)
    assert isinstance(record, dict)
    assert record["state"] == "cancelled"
    assert record["attempts"] == [], "it never ran"
    again = project.run("cancel", job_id, ok=False)
    assert again.returncode == Exit.ALREADY_FINISHED
    unknown = project.run("cancel", str(uuid.uuid4()), ok=False)
    assert unknown.returncode == Exit.NO_SUCH_JOB
    # A key is the id enqueue --job-id made of it: one never enqueued is unknown.
    key = project.run("cancel", "nope", ok=False)
    assert key.returncode == Exit.NO_SUCH_JOB
    bad = project.run("cancel", " ", ok=False)
    assert bad.returncode == Exit.USAGE
    assert bad.stderr.strip() == "error: ' ' is not a job id (a UUID, or the key given to --job-id)"


def test_a_running_job_stops_when_cancelled(project: Project, started: Start) -> None:
    started(project.start("worker"))
    job_id = project.run("enqueue", "nap", '{"seconds": 600}').stdout.strip()
    wait(lambda: state_of(project, job_id) == "running", "the nap starts", timeout=90)
    project.run("cancel", job_id)
    wait(lambda: state_of(project, job_id) == "cancelled", "the nap stops", timeout=90)
    record = project.json("job", job_id)
    assert isinstance(record, dict)
    assert [a["outcome"] for a in record["attempts"]] == ["cancelled"]


def test_a_worker_killed_mid_run_leaves_both_attempts(project: Project, started: Start) -> None:
    first = started(project.start("worker"))
    # Long enough that the kill lands mid-run however slow the machine is.
    job_id = project.run("enqueue", "nap", '{"seconds": 15}').stdout.strip()
    wait(lambda: state_of(project, job_id) == "running", "the nap starts", timeout=90)
    first.kill()  # kill -9: no settle, no record of the end
    first.wait(10)
    started(project.start("worker"))
    wait(lambda: state_of(project, job_id) == "succeeded", "the nap runs again", timeout=120)
    record = project.json("job", job_id)
    assert isinstance(record, dict)
    runs = record["attempts"]
    assert len(runs) == 2, runs
    assert runs[0]["ended_at"] is None, "the killed run never ended"
    assert runs[0]["pid"] == first.pid
    assert runs[1]["outcome"] == "succeeded"
    assert runs[1]["pid"] != first.pid
