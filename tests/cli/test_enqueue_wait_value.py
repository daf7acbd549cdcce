"""``queuey enqueue --wait [TIMEOUT]`` through the installed script on the embedded
backend: ``--wait`` alone waits with no limit, ``--wait 30`` / ``--wait=30s`` give up
after that long, ``--timeout`` still works, and a word after ``--wait`` that is not a
number is not the timeout (it is the payload, or the job type)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

from queuey_cli.enqueue_args import join_wait_value
from queuey_core.process.exits import Exit
from tests.cli.test_sqlite_commands import Project
from tests.cli.test_sqlite_commands import project as project  # noqa: PLC0414 - a fixture
from tests.cli.test_sqlite_commands import started as started  # noqa: PLC0414 - a fixture

Start = Callable[[subprocess.Popen[str]], subprocess.Popen[str]]

TAKES_VALUE = frozenset({"--job-id", "--timeout", "--wait"})


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["greet", "{}", "--wait"], ["greet", "{}", "--wait="]),
        (["greet", "{}", "--wait", "30"], ["greet", "{}", "--wait=30"]),
        (["greet", "{}", "--wait", "1.5m"], ["greet", "{}", "--wait=1.5m"]),
        (["greet", "--wait", '{"a": 1}'], ["greet", "--wait=", '{"a": 1}']),
        (["--wait", "greet", "{}"], ["--wait=", "greet", "{}"]),
        (["--wait", "500ms", "greet", "{}"], ["--wait=500ms", "greet", "{}"]),
        (["greet", "{}", "--wait=7"], ["greet", "{}", "--wait=7"]),
        (["greet", "{}", "--wait", "soon"], ["greet", "{}", "--wait=", "soon"]),
        (["greet", "{}", "--job-id", "--wait"], ["greet", "{}", "--job-id", "--wait"]),
        (["greet", "--", "--wait", "3"], ["greet", "--", "--wait", "3"]),
    ],
)
def test_a_number_after_wait_is_its_timeout_and_nothing_else_is(
    args: list[str], expected: list[str]
) -> None:
    assert join_wait_value(args, TAKES_VALUE) == expected


def timed(project: Project, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = project.run(*args, ok=False)
    return done, time.monotonic() - start


@pytest.mark.processes
@pytest.mark.parametrize(
    "wait",
    [
        ["--wait", "1"],
        ["--wait=1s"],
        ["--wait", "--timeout", "1s"],
    ],
)
def test_wait_with_a_timeout_gives_up_after_it(project: Project, wait: list[str]) -> None:
    # No worker: the job stays queued, so only the timeout ends the wait.
    done, took = timed(project, "enqueue", "greet", '{"name": "x"}', *wait)
    assert done.returncode == Exit.WAIT_TIMEOUT, done.stderr
    assert "queued" in done.stderr, "says where the job is"
    assert took < 30, "the timeout, not a default, ended it"


@pytest.mark.processes
def test_bare_wait_before_the_payload_leaves_the_payload_a_payload(
    project: Project, started: Start
) -> None:
    started(project.start("worker"))
    done = project.run("enqueue", "greet", "--wait", '{"name": "ada"}')
    job_id, result = done.stdout.split()
    assert result == "null", "greet ran with its payload and returned nothing"
    assert project.json("job", job_id)["state"] == "succeeded"  # type: ignore[index]
    failed = project.run("enqueue", "--wait", "doomed", "{}", ok=False)
    assert failed.returncode == Exit.JOB_FAILED, failed.stderr


@pytest.mark.processes
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--wait", "5", "--timeout", "5"], "give the timeout once"),
        (["--wait=soon"], "--wait: 'soon' is not a duration"),
        (["--timeout", "5"], "--timeout goes with --wait"),
    ],
)
def test_a_timeout_given_wrong_is_a_usage_error(
    project: Project, args: list[str], expected: str
) -> None:
    done = project.run("enqueue", "greet", '{"name": "x"}', *args, ok=False)
    assert done.returncode == Exit.USAGE, done.stderr
    assert expected in done.stderr
    assert not project.db.exists(), "refused before the broker was opened"
