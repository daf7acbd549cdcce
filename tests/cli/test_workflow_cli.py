"""``queuey enqueue --workflow FILE`` and ``queuey workflow show|cancel`` through the
installed script, on the embedded backend (the workflow kept in its file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.processes

QUEUEY = str(Path(sys.executable).parent / "queuey")

CONFIG = """
[worker]
shutdown_timeout = "5s"

[queues.alpha]
prefetch = 4

[queues.beta]
prefetch = 1
"""

FLOW = {
    "name": "hello",
    "run": {
        "chain": [
            {"job": "greet", "payload": {"name": "ada"}},
            {"group": [{"job": "greet", "payload": {"name": "bob"}}, {"job": "nap"}]},
        ]
    },
}


class Project:
    """A directory with a queuey.toml, its file as the broker and the store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "queuey.toml").write_text(CONFIG)
        clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
        self.env = {**clean, "QUEUEY_BROKER__URL": f"sqlite:///{root / 'queuey.db'}"}

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [QUEUEY, *args],
            check=False,
            cwd=self.root,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def shown(self, workflow_id: str) -> dict[str, Any]:
        done = self.run("workflow", "show", workflow_id, "--json")
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        return found


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def test_a_workflow_from_a_file_runs_to_its_end_under_a_worker(project: Project) -> None:
    (project.root / "flow.json").write_text(json.dumps(FLOW))
    started = project.run("enqueue", "--workflow", "flow.json")
    assert started.returncode == 0, started.stderr
    workflow_id = started.stdout.strip()
    before = project.shown(workflow_id)
    assert before["state"] == "running"
    assert [n["state"] for n in before["nodes"]] == ["sent", "waiting", "waiting"]
    worker = project.run("worker", "--burst")
    assert worker.returncode == 0, worker.stderr
    after = project.shown(workflow_id)
    assert after["state"] == "succeeded", after
    assert after["succeeded"] == 3


def test_a_workflow_on_stdin_is_read_from_a_dash_and_can_be_cancelled(project: Project) -> None:
    started = project.run("enqueue", "--workflow", "-", stdin=json.dumps(FLOW))
    assert started.returncode == 0, started.stderr
    workflow_id = started.stdout.strip()
    cancelled = project.run("workflow", "cancel", workflow_id)
    assert cancelled.returncode == 0, cancelled.stderr
    shown = project.shown(workflow_id)
    assert shown["state"] == "cancelled"
    table = project.run("workflow", "show", workflow_id)
    assert "cancelled" in table.stdout


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        ("nope", "invalid JSON"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON: nested too deeply"),
        ('{"run": {"chain": []}}', "run.chain: not a list of at least one node"),
        ('{"run": {"job": "greet", "payload": {"nam": 1}}}', "run.payload: name: Field required"),
        ('{"run": {"job": "nobody"}}', "unknown job type 'nobody'"),
        ('{"run": {"job": "greet", "payload": {"name": "a"}}, "x": 1}', "unknown key 'x'"),
        ('{"run": {"job": "greet", "payload": {"name": "a"}, "receives": "z"}}', "no field 'z'"),
        ('{"run": {"graph": {"a": {"job": "nap", "after": ["b"]}}}}', "'b' is not a job written"),
    ],
)
def test_a_bad_workflow_is_one_line_and_exit_2_with_nothing_written(
    project: Project, stdin: str, said: str
) -> None:
    done = project.run("enqueue", "--workflow", "-", stdin=stdin)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert said in done.stderr
    assert done.stdout == ""


def test_an_unknown_workflow_is_exit_7_and_a_malformed_id_exit_2(project: Project) -> None:
    missing = project.run("workflow", "show", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 7
    assert "no workflow" in missing.stderr
    assert project.run("workflow", "cancel", "not-an-id").returncode == 2


def test_a_workflow_whose_member_is_a_duplicate_at_its_start_says_so_and_exits_9(
    project: Project,
) -> None:
    (project.root / "queuey.toml").write_text(CONFIG + '\n[unique.greet]\nkey = ["name"]\n')
    held = project.run("enqueue", "greet", '{"name": "ada"}')
    assert held.returncode == 0, held.stderr
    holder = held.stdout.strip()
    started = project.run("enqueue", "--workflow", "-", stdin=json.dumps(FLOW))
    assert started.returncode == 9, started.stderr
    workflow_id = started.stdout.strip()
    last = started.stderr.strip().splitlines()[-1]
    assert last == f"error: workflow {workflow_id} failed as it started: duplicate of {holder}"
    shown = project.shown(workflow_id)
    assert shown["state"] == "failed"
    assert [n["state"] for n in shown["nodes"]] == ["failed", "halted", "halted"]
