"""``./scripts/demo`` with no RabbitMQ in reach runs every example job on the embedded
backend, and says so.

RabbitMQ is out of reach twice over: the port the demo checks is closed, and
``rabbitmq-server`` is not on ``PATH`` (so it cannot be started either).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once the socket is


def test_the_demo_runs_every_example_job_on_a_file_when_no_rabbitmq_is_in_reach() -> None:
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join([venv_bin, "/usr/bin", "/bin"])
    assert shutil.which("rabbitmq-server", path=path) is None, "rabbitmq-server is on PATH"
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
    env = {
        **clean,
        "PATH": path,
        "QUEUEY_TEST_AMQP_PORT": str(closed_port()),
        "QUEUEY_DEMO_NO_INSTALL": "1",
    }
    done = subprocess.run(
        ["bash", "scripts/demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = re.search(
        r"running on the embedded backend, a SQLite file \((\S+)/queuey.db", done.stderr
    )
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert said, f"the demo did not say it runs on a file: {done.stderr[:2000]}"
        outcomes: dict[str, list[tuple[str, int]]] = {}
        for line in done.stderr.splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("logger") == "queuey_core.worker.dispatch" and "job_type" in event:
                outcomes.setdefault(event["job_type"], []).append(
                    (event["message"].split(":")[0], event["attempt"])
                )
        for job in ("greet", "nap"):
            assert outcomes.get(job) == [("job succeeded", 1)], (job, outcomes)
        snooze = outcomes["snooze"]
        assert snooze[0][0].startswith("job deferred for 1s"), snooze
        assert snooze[1:] == [("job succeeded", 1)], "a deferral keeps its attempt"
        assert outcomes["flaky"][0][0].startswith("job failed; retrying"), outcomes["flaky"]
        assert outcomes["flaky"][-1] == ("job succeeded", 2), outcomes["flaky"]
        assert outcomes["doomed"] == [("job failed fatally", 1)], outcomes["doomed"]
        listed = done.stdout.splitlines()
        assert any("doomed" in row and "fatal error" in row for row in listed), done.stdout
    finally:
        if said:
            shutil.rmtree(said.group(1), ignore_errors=True)
