"""The health check of the image and of compose's services, run as the container runs it.

The command is read from the Dockerfile and compose.yaml and run with the image's
environment (its ports pointed at the test's servers) against a real worker's metrics
server, a scheduler's, and a served dashboard: one check for every long-running
subcommand. tests/container runs the same check inside the image itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from typing import cast

import pytest
import uvicorn

from queuey_core import MemoryBackend
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.observability import MetricsServer
from queuey_core.observability import SchedulerMetrics
from queuey_core.observability import WorkerMetrics
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.support import Greet
from tests.support import noop

if TYPE_CHECKING:
    from queuey_core.schedules import Scheduler

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-token-of-more-than-16-chars"


def dockerfile_check() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])$", text, re.MULTILINE)
    assert match, "the Dockerfile has a HEALTHCHECK in exec form"
    command: list[str] = json.loads(match.group(1))
    return command


def compose_check() -> list[str]:
    text = (ROOT / "compose.yaml").read_text()
    match = re.search(r"^ {4}test: (\[.*\])$", text, re.MULTILINE)
    assert match, "compose's queuey services share a healthcheck test"
    command: list[str] = json.loads(match.group(1))
    assert command[0] == "CMD"
    return command[1:]


def dockerfile_env() -> dict[str, str]:
    """The ``ENV`` of the Dockerfile's last stage that names queuey settings."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return dict(re.findall(r"\b(QUEUEY_[A-Z_]+)=(\S+)", text))


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_check(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` as the container runs it (``queuey`` is this Python's queuey_cli), with
    the image's settings; ``env`` points its ports at the test's servers."""
    assert command[0] == "queuey", "the check is queuey's own: no curl in the image"
    image = {k: v for k, v in dockerfile_env().items() if k != "QUEUEY_CONFIG"}
    settings = {**image, "QUEUEY_DASHBOARD__PORT": str(free_port()), **env}
    return subprocess.run(
        [sys.executable, "-m", "queuey_cli", *command[1:]],
        env={"PATH": "/usr/bin:/bin", "QUEUEY_CONFIG": os.devnull, **settings},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


CHECKS = pytest.mark.parametrize(
    "command", [dockerfile_check(), compose_check()], ids=["image", "compose"]
)


@CHECKS
def test_the_health_check_passes_while_the_worker_lives_and_fails_after(
    command: list[str], backend: MemoryBackend, queues: QueueSet, tmp_path: Path
) -> None:
    metrics = WorkerMetrics()
    worker = Worker(backend, queues, [noop(Greet)], hooks=[metrics])
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        port = str(server.port)
        alive = run_check(command, tmp_path, QUEUEY_WORKER__METRICS_PORT=port)
        assert alive.returncode == 0, f"alive while starting: {alive.stderr}"
        metrics.on_worker_starting(worker)
        metrics.on_worker_stopped(worker)
        stopped = run_check(command, tmp_path, QUEUEY_WORKER__METRICS_PORT=port)
        assert stopped.returncode == 1, "a stopped worker is unhealthy (503)"
        assert "the worker has stopped" in stopped.stderr, "the check's reason is shown"
    gone = run_check(command, tmp_path, QUEUEY_WORKER__METRICS_PORT=port)
    assert gone.returncode == 1, "nothing listening is unhealthy"
    assert "nothing answers" in gone.stderr


@CHECKS
def test_the_health_check_fails_when_the_run_loop_thread_has_ended(
    command: list[str], backend: MemoryBackend, queues: QueueSet, tmp_path: Path
) -> None:
    metrics = WorkerMetrics()
    worker = Worker(backend, queues, [noop(Greet)], hooks=[metrics])
    loop = threading.Thread(target=metrics.on_worker_starting, args=(worker,))
    loop.start()
    loop.join()  # the "run loop" registered itself, then ended without stopping
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        done = run_check(command, tmp_path, QUEUEY_WORKER__METRICS_PORT=str(server.port))
    assert done.returncode == 1
    assert "run loop thread has ended" in done.stderr


class EndedScheduler:
    """What the scheduler's status reads of a scheduler: its schedules and leadership."""

    schedules: tuple[()] = ()

    def is_leader(self) -> bool:
        return False


@CHECKS
def test_the_same_check_fits_the_scheduler(command: list[str], tmp_path: Path) -> None:
    metrics = SchedulerMetrics(["hello"])
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        port = str(server.port)
        alive = run_check(command, tmp_path, QUEUEY_SCHEDULER__METRICS_PORT=port)
        assert alive.returncode == 0, alive.stderr
        assert "scheduler" in alive.stdout
        ended = threading.Thread(target=lambda: None)
        ended.start()
        ended.join()
        metrics.status.watch(cast("Scheduler", EndedScheduler()), ended)
        stopped = run_check(command, tmp_path, QUEUEY_SCHEDULER__METRICS_PORT=port)
    assert stopped.returncode == 1, "a scheduler whose thread ended is unhealthy"
    assert "the scheduler has stopped" in stopped.stderr


class ServedDashboard:
    """The dashboard served by uvicorn on a thread, on the in-memory backend."""

    def __init__(self, token: str) -> None:
        settings, _ = load_settings(os.devnull, overrides={"dashboard": {"token": token}})
        app = create_app(settings, backend=MemoryBackend())
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive(), "the dashboard did not start"
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)


@pytest.fixture
def dashboard() -> Iterator[ServedDashboard]:
    served = ServedDashboard(TOKEN)
    try:
        yield served
    finally:
        served.stop()


@CHECKS
def test_the_same_check_fits_the_dashboard_and_sends_it_the_token(
    command: list[str], dashboard: ServedDashboard, tmp_path: Path
) -> None:
    where = {
        "QUEUEY_DASHBOARD__PORT": str(dashboard.port),
        # The image's worker port must not answer: no worker runs in this container.
        "QUEUEY_WORKER__METRICS_PORT": str(free_port()),
        "QUEUEY_SCHEDULER__METRICS_PORT": str(free_port()),
    }
    done = run_check(command, tmp_path, QUEUEY_DASHBOARD__TOKEN=TOKEN, **where)
    assert done.returncode == 0, done.stderr
    assert "dashboard" in done.stdout
    wrong = run_check(command, tmp_path, QUEUEY_DASHBOARD__TOKEN="not-the-token-at-all", **where)
    assert wrong.returncode == 1, "the dashboard's guard still asks for its token"
    assert TOKEN not in wrong.stderr + wrong.stdout
    assert "not-the-token-at-all" not in wrong.stderr + wrong.stdout, "a token is never shown"


def test_the_image_and_compose_agree_on_the_port() -> None:
    compose = (ROOT / "compose.yaml").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    env = dockerfile_env()
    port = env["QUEUEY_WORKER__METRICS_PORT"]
    assert env["QUEUEY_SCHEDULER__METRICS_PORT"] == port, "one health port, whichever runs"
    assert f'"{port}:{port}"' in compose
    assert re.search(rf"^EXPOSE {port}\b", dockerfile, re.MULTILINE)
    assert int(port) > 1024, "the image runs as a user that cannot take a privileged port"
