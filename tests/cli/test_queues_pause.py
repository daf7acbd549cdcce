"""``queuey queues pause|resume`` through the installed script, on the embedded backend
(a file: no server), with a ``--processes 2`` supervisor running: both processes obey,
``queuey workers`` and ``queuey queues`` show the pause, jobs enqueued meanwhile run once
it is resumed; and the command's bad input is one line and its own exit code."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_sqlite_commands import Project
from tests.cli.test_sqlite_commands import wait

pytestmark = pytest.mark.processes


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def supervisor(project: Project) -> Iterator[subprocess.Popen[str]]:
    """``queuey worker --processes 2``, drained at the end."""
    proc = project.start("worker", "--processes", "2")
    try:
        yield proc
    finally:
        if proc.poll() is None:
            project.run("workers", "shutdown", "--all", ok=False)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def statuses(project: Project) -> list[dict[str, object]]:
    found = project.json("workers")
    assert isinstance(found, list)
    return found


def succeeded(project: Project) -> int:
    return sum(int(str(s["succeeded"])) for s in statuses(project))


def test_a_paused_queue_is_obeyed_by_every_process_and_shown_until_resumed(
    project: Project, supervisor: subprocess.Popen[str]
) -> None:
    wait(lambda: len(statuses(project)) == 2, "two workers answer")

    paused = project.run("queues", "pause", "alpha")

    assert "paused alpha" in paused.stdout
    assert "live workers told at once: 2" in paused.stdout
    wait(
        lambda: [s["paused"] for s in statuses(project)] == [["alpha"], ["alpha"]],
        "both processes report alpha paused",
    )
    assert project.queue("alpha")["paused"] is True
    assert project.queue("beta")["paused"] is False
    assert project.queue("alpha")["consumers"] == 0
    table = project.run("workers").stdout
    assert "paused" in table.splitlines()[0], "the piped header names the column"

    for name in ("ada", "bob", "cy"):
        project.run("enqueue", "greet", f'{{"name": "{name}"}}')
    project.run("enqueue", "nap", '{"seconds": 0}')  # beta: not paused
    wait(lambda: succeeded(project) == 1, "the beta job ran")
    assert project.ready("alpha") == 3, "nothing of alpha was taken"
    assert "alpha\t3\t" in project.run("queues").stdout

    resumed = project.run("queues", "resume", "alpha")

    assert "resumed alpha" in resumed.stdout
    wait(lambda: succeeded(project) == 4, "the three alpha jobs ran once resumed")
    assert project.ready("alpha") == 0
    assert project.queue("alpha")["dead_letters"] == 0
    assert [s["paused"] for s in statuses(project)] == [[], []]


def test_pausing_twice_is_said_and_json_tells_what_changed(project: Project) -> None:
    first = project.json("queues", "pause", "beta")
    assert first == {"queue": "beta", "paused": True, "changed": True, "workers_told": 0}
    again = project.run("queues", "pause", "beta")
    assert again.stdout.strip() == "beta was paused already"
    assert project.json("queues", "resume", "beta")["changed"] is True  # type: ignore[index]
    assert project.run("queues", "resume", "beta").stdout.strip() == "beta was not paused already"


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["queues", "pause", "nope"], 2, "error: unknown queue 'nope' (declared: alpha, beta)"),
        (["queues", "resume", "nope"], 2, "error: unknown queue 'nope' (declared: alpha, beta)"),
        (["queues", "pause"], 2, "error: "),
    ],
)
def test_bad_input_is_one_line_and_a_usage_exit(
    project: Project, args: list[str], code: int, said: str
) -> None:
    done = project.run(*args, ok=False)
    assert done.returncode == code, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(said)
    assert project.json("queues")["queues"][0]["paused"] is False  # type: ignore[index]


def test_an_unreachable_broker_is_one_line_and_exit_1(project: Project) -> None:
    project.env["QUEUEY_BROKER__URL"] = "amqp://guest:guest@127.0.0.1:9/%2F"
    project.env["QUEUEY_BROKER__CONNECT_TIMEOUT"] = "1s"
    done = project.run("queues", "pause", "alpha", ok=False)
    assert done.returncode == 1, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_a_burst_worker_counts_a_paused_queue_as_empty_and_leaves_its_jobs(
    project: Project,
) -> None:
    project.run("queues", "pause", "alpha")
    project.run("enqueue", "greet", '{"name": "ada"}')
    project.run("enqueue", "nap", '{"seconds": 0}')

    done = project.run("worker", "--burst")

    assert project.ready("beta") == 0
    assert project.ready("alpha") == 1, "the paused queue's job waits for the resume"
    # Its last line names what it left behind: "queues empty" would hide that job.
    assert "queues empty" not in done.stderr
    assert "paused queues keep their jobs for the resume: alpha (1 ready)" in done.stderr
