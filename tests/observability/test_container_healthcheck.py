"""The health check of the image and of compose's worker, run as Docker would run it.

No Docker engine runs here: the command is read from the Dockerfile and compose.yaml and
run with the same environment variable against a real metrics server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.observability import MetricsServer
from queuey_core.observability import WorkerMetrics
from tests.support import Greet
from tests.support import noop

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_check() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])$", text, re.MULTILINE)
    assert match, "the Dockerfile has a HEALTHCHECK in exec form"
    command: list[str] = json.loads(match.group(1))
    return command


def compose_check() -> list[str]:
    text = (ROOT / "compose.yaml").read_text()
    worker = text[text.index("\n  worker:\n") :]
    match = re.search(r"^ {6}test: (\[.*\])$", worker, re.MULTILINE)
    assert match, "compose's worker has a healthcheck test"
    command: list[str] = json.loads(match.group(1))
    assert command[0] == "CMD"
    return command[1:]


def dockerfile_port() -> str:
    match = re.search(
        r"^ENV QUEUEY_WORKER__METRICS_PORT=(\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE
    )
    assert match, "the image sets the metrics port"
    return match.group(1)


def run_check(command: list[str], port: int) -> int:
    assert command[0] == "python"
    env = {"QUEUEY_WORKER__METRICS_PORT": str(port), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


@pytest.mark.parametrize("command", [dockerfile_check(), compose_check()], ids=["image", "compose"])
def test_the_health_check_passes_while_the_worker_lives_and_fails_after(
    command: list[str], backend: MemoryBackend, queues: QueueSet
) -> None:
    assert "/healthz" in command[-1]
    metrics = WorkerMetrics()
    worker = Worker(backend, queues, [noop(Greet)], hooks=[metrics])
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        assert run_check(command, server.port) == 0, "alive while starting"
        metrics.on_worker_starting(worker)
        metrics.on_worker_stopped(worker)
        assert run_check(command, server.port) == 1, "a stopped worker is unhealthy (503)"
        port = server.port
    assert run_check(command, port) == 1, "nothing listening is unhealthy"


def test_the_image_and_compose_agree_on_the_port() -> None:
    compose = (ROOT / "compose.yaml").read_text()
    port = dockerfile_port()
    assert f'QUEUEY_WORKER__METRICS_PORT: "{port}"' in compose
    assert f"EXPOSE {port}" in (ROOT / "Dockerfile").read_text()
    assert int(port) > 1024, "the image runs as a user that cannot take a privileged port"
