"""compose.yaml's two profiles: both pass the compose tool's ``config`` validation, and
the embedded one (a worker and the dashboard on one volume) comes up and works.

The RabbitMQ profile cannot be brought up here (its broker image cannot be pulled), so
it is checked for what its defects were: the management URL that ``queuey queues``
reads unacked counts from, and a health check that fits each service.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.container.engine import ROOT
from tests.container.engine import enqueue
from tests.container.engine import eventually
from tests.container.engine import job
from tests.container.engine import until_healthy
from tests.container.test_image import TOKEN
from tests.container.test_image import free_port

pytestmark = pytest.mark.container


def compose_tool() -> str:
    """podman-compose (1.6 or later, for ``config``): the dev extra installs it beside
    this Python."""
    beside = Path(sys.executable).with_name("podman-compose")
    found = str(beside) if beside.exists() else shutil.which("podman-compose")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("podman-compose is not installed (pip install -e '.[dev]')")
        pytest.skip("podman-compose is not installed (pip install -e '.[dev]')")
    return found


def compose(*args: str, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(
        [compose_tool(), *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [ln for ln in done.stderr.splitlines() if "systemd" not in ln]
    assert done.returncode == 0, f"podman-compose {' '.join(args)}: {lines[-3:]}"
    return done.stdout


@pytest.mark.parametrize("profile", ["rabbitmq", "embedded"])
def test_each_profile_passes_the_compose_tools_config(image: str, profile: str) -> None:
    env = {"QUEUEY_DASHBOARD_TOKEN": TOKEN}
    config: dict[str, Any] = yaml.safe_load(compose("--profile", profile, "config", env=env))
    services = config["services"]
    wanted = {
        "rabbitmq": {"rabbitmq", "worker", "scheduler", "dashboard"},
        "embedded": {"worker-embedded", "dashboard-embedded"},
    }[profile]
    assert set(services) == wanted
    for name, service in services.items():
        if name == "rabbitmq":
            continue
        environment = service["environment"]
        assert service["healthcheck"]["test"] == ["CMD", "queuey", "health"], name
        if profile == "rabbitmq":
            assert environment["QUEUEY_BROKER__MANAGEMENT_URL"].startswith("http://"), (
                f"{name}: `queuey queues` shows unacked counts"
            )
        else:
            assert environment["QUEUEY_BROKER__URL"] == "sqlite:////data/queuey.db"
            assert any(v.endswith(":/data") for v in service["volumes"]), name


@pytest.fixture
def embedded_project(image: str) -> Iterator[tuple[str, dict[str, str]]]:
    project = f"queuey-test-{uuid.uuid4().hex[:8]}"
    env = {
        "QUEUEY_IMAGE": image,
        "QUEUEY_DASHBOARD_PORT": str(free_port()),
        "QUEUEY_DASHBOARD_TOKEN": TOKEN,
    }
    try:
        yield project, env
    finally:
        compose("-p", project, "--profile", "embedded", "down", "-v", "-t", "30", env=env)


def test_the_embedded_profile_comes_up_and_runs_a_job_the_dashboard_shows(
    embedded_project: tuple[str, dict[str, str]],
) -> None:
    project, env = embedded_project
    compose("-p", project, "--profile", "embedded", "up", "-d", env=env)
    worker, dashboard = f"{project}_worker-embedded_1", f"{project}_dashboard-embedded_1"
    until_healthy(worker)
    until_healthy(dashboard)

    job_id = enqueue(worker, "greet", '{"name": "ada"}')
    eventually(lambda: job(worker, job_id).get("state") == "succeeded")
    request = urllib.request.Request(
        f"http://127.0.0.1:{env['QUEUEY_DASHBOARD_PORT']}/jobs/{job_id}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as page:
        assert page.status == 200
        assert b"succeeded" in page.read(), "the dashboard reads the job from the shared volume"
