"""The image, used as its users use it: a worker on the host's RabbitMQ and on an
embedded file in /data, its health check, its stop, every documented subcommand through
the entrypoint, and what the image holds.

The figures (size, time to healthy, stop time) are printed at the end of the run and
quoted, with their date, in docs/containers.md; none is asserted as a timing.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from pathlib import Path

import pika
import pytest

from tests.container.engine import Containers
from tests.container.engine import enqueue
from tests.container.engine import eventually
from tests.container.engine import health_status
from tests.container.engine import healthy
from tests.container.engine import inspect
from tests.container.engine import job
from tests.container.engine import logs
from tests.container.engine import podman
from tests.container.engine import state
from tests.container.engine import until_healthy
from tests.harness import AMQP_URL

pytestmark = pytest.mark.container

#: The dashboard's token in these tests (not a secret: the dashboard serves loopback).
TOKEN = "container-test-token-0123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finished(name: str, job_id: str) -> bool:
    return job(name, job_id).get("state") == "succeeded"


def running(name: str, job_id: str) -> bool:
    return job(name, job_id).get("state") == "running"


def ready_in_rabbitmq(queue: str) -> int:
    """Messages ready in ``queue`` of this worktree's vhost."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def purge_in_rabbitmq(queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        conn.channel().queue_purge(queue)
    finally:
        conn.close()


def a_worker(containers: Containers, *, volume: str | None = None, **env: str) -> str:
    """A worker container with a job store on /data, its metrics on a free port; returns
    once its health check passes."""
    settings = {"QUEUEY_WORKER__METRICS_PORT": str(free_port()), **env}
    settings.setdefault("QUEUEY_RESULTS__URL", "sqlite:////data/jobs.db")
    name = containers.start("worker", env=settings, volume=volume)
    until_healthy(name)
    return name


# -- what the image is -------------------------------------------------------------------


def test_the_image_is_small_runs_queuey_as_a_user_and_keeps_its_health_check(
    image: str, figures: list[str]
) -> None:
    meta = inspect(image)
    config = meta["Config"]
    assert isinstance(config, dict)
    assert config["User"] == "queuey", "the image does not run as root"
    assert config["Entrypoint"] == ["queuey"], "exec form: SIGTERM reaches queuey itself"
    assert config["Cmd"] == ["worker"]
    assert meta["Healthcheck"]["Test"] == ["CMD", "queuey", "health"], (
        "built with --format docker, the image keeps its HEALTHCHECK"
    )
    assert "/data" in config["Volumes"]
    size = int(meta["Size"])
    figures.append(f"image size: {size / 1e6:.0f} MB")
    assert size < 400e6, f"{size / 1e6:.0f} MB: something large got into the image"

    # No compiler, no pip in the venv that ships, no caches.
    probe = (
        "import shutil, os, sys; "
        "print(json.dumps({'tools': [t for t in ('gcc', 'cc', 'make', 'git') if shutil.which(t)], "
        "'venv_pip': os.path.exists('/opt/queuey/bin/pip'), "
        "'caches': [p for p in ('/root/.cache', '/home/queuey/.cache', '/src') "
        "if os.path.exists(p)], "
        "'uid': os.getuid(), 'cwd': os.getcwd(), 'data_writable': os.access('/data', os.W_OK)}))"
    )
    done = podman("run", "--rm", "--entrypoint", "python", image, "-c", f"import json; {probe}")
    found = json.loads(done.stdout)
    assert found["tools"] == [], "no build tools in the image"
    assert not found["venv_pip"], "the venv that ships has no pip"
    assert found["caches"] == [], "no caches or sources left from the build"
    assert found["uid"] != 0
    assert found["cwd"] == "/data", "the relative sqlite:///queuey.db lands in /data"
    assert found["data_writable"], "/data is the user's"


# -- a worker on RabbitMQ ------------------------------------------------------------------


def test_a_worker_on_rabbitmq_runs_jobs_and_every_subcommand_works_through_the_entrypoint(
    containers: Containers, figures: list[str]
) -> None:
    volume = containers.volume()
    started = time.monotonic()
    name = a_worker(containers, volume=volume)
    figures.append(f"worker on RabbitMQ, start to healthy: {time.monotonic() - started:.1f} s")
    assert health_status(name) == "healthy"

    top = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert any(arg.endswith("queuey") for arg in top[:2]), f"PID 1 is queuey itself: {top}"
    assert "worker" in top
    assert podman("exec", name, "id", "-u").stdout.strip() == "10001"

    env = {"QUEUEY_RESULTS__URL": "sqlite:////data/jobs.db"}
    job_id = containers.once("enqueue", "greet", '{"name": "ada"}', env=env, volume=volume)
    job_id_text = job_id.stdout.strip().splitlines()[-1]
    eventually(lambda: finished(name, job_id_text))
    shown = containers.once("job", job_id_text, "--json", env=env, volume=volume)
    assert json.loads(shown.stdout)["state"] == "succeeded"

    doomed = enqueue(name, "doomed", '{"why": "container test"}')
    eventually(lambda: job(name, doomed).get("state") == "dead_lettered")
    listed = containers.once("dlq", "list", "--queue", "alpha", "--json", env=env, volume=volume)
    assert doomed in listed.stdout, "the dead letter is listed"
    queues = containers.once("queues", "--json")
    assert {q["name"] for q in json.loads(queues.stdout)["queues"]} >= {"alpha", "beta"}
    workers = containers.once("workers", "--json", "--timeout", "5s")
    assert len(json.loads(workers.stdout)) >= 1, "the running worker answers"


def test_stop_drains_a_job_in_progress_and_exits_0_within_the_grace_period(
    containers: Containers, figures: list[str]
) -> None:
    name = a_worker(containers)
    job_id = enqueue(name, "nap", '{"seconds": 3}')
    eventually(lambda: running(name, job_id))
    started = time.monotonic()
    podman("stop", "-t", "30", name, timeout=90)
    took = time.monotonic() - started
    figures.append(f"podman stop with a 3 s job running: {took:.1f} s, exit 0 (grace 30 s)")
    assert state(name)["ExitCode"] == 0, logs(name)
    assert took < 30, "drained before the grace period ran out, not killed"
    # The job store is in the container's /data: start it again to read it.
    podman("start", name)
    record = job(name, job_id)
    assert record["state"] == "succeeded", "the drain finished the job"
    assert len(record["attempts"]) == 1, "it ran once: finished, not cut and run again"


def test_a_job_longer_than_the_grace_period_goes_back_to_rabbitmq(
    containers: Containers,
) -> None:
    name = a_worker(containers)
    purge_in_rabbitmq("beta")
    job_id = enqueue(name, "nap", '{"seconds": 600}')
    eventually(lambda: running(name, job_id))
    assert ready_in_rabbitmq("beta") == 0, "the worker holds the job"
    podman("stop", "-t", "1", name, timeout=90)
    assert state(name)["ExitCode"] != 0, "killed at the end of the grace period"
    try:
        eventually(lambda: ready_in_rabbitmq("beta") == 1, timeout=30)
    finally:
        purge_in_rabbitmq("beta")


def test_the_health_check_fails_when_the_worker_stops_answering_and_recovers(
    containers: Containers,
) -> None:
    name = a_worker(containers)
    pid = str(state(name)["Pid"])
    os.kill(int(pid), 19)  # SIGSTOP: a hung process answers nothing
    try:
        assert not healthy(name), "a worker that does not answer is unhealthy"
    finally:
        os.kill(int(pid), 18)  # SIGCONT
    eventually(lambda: healthy(name), timeout=60)


# -- the embedded backend in /data ---------------------------------------------------------


@pytest.mark.parametrize("url", ["sqlite:////data/queuey.db", "sqlite:///queuey.db"])
def test_the_embedded_backend_writes_in_data_with_no_volume_mounted(
    containers: Containers, url: str
) -> None:
    name = containers.start("worker", env={"QUEUEY_BROKER__URL": url})
    until_healthy(name)
    job_id = enqueue(name, "greet", '{"name": "ada"}')
    eventually(lambda: finished(name, job_id))
    assert "queuey.db" in podman("exec", name, "ls", "/data").stdout


def test_a_host_directory_the_user_owns_holds_the_file(
    containers: Containers, tmp_path: Path
) -> None:
    host = tmp_path / "data"
    host.mkdir()
    os.chown(host, 10001, 10001)  # as docs/containers.md says: the image's uid
    url = "sqlite:////data/queuey.db"
    name = containers.start("worker", env={"QUEUEY_BROKER__URL": url}, volume=str(host))
    until_healthy(name)
    job_id = enqueue(name, "greet", '{"name": "ada"}')
    eventually(lambda: finished(name, job_id))
    assert (host / "queuey.db").exists(), "the file is on the host"


def test_a_job_on_a_mounted_file_outlives_a_forced_stop_and_runs_again(
    containers: Containers,
) -> None:
    volume = containers.volume()
    url = "sqlite:////data/queuey.db?lease=2"
    name = containers.start("worker", env={"QUEUEY_BROKER__URL": url}, volume=volume)
    until_healthy(name)
    job_id = enqueue(name, "nap", '{"seconds": 4}')
    eventually(lambda: running(name, job_id))
    podman("stop", "-t", "1", name, timeout=90)
    assert state(name)["ExitCode"] != 0, "killed at the end of the grace period"

    again = containers.start("worker", env={"QUEUEY_BROKER__URL": url}, volume=volume)
    eventually(lambda: finished(again, job_id), timeout=120)


# -- the other long-running subcommands -----------------------------------------------------


def test_the_scheduler_and_the_dashboard_answer_the_same_health_check(
    containers: Containers,
) -> None:
    schedule = {
        "QUEUEY_SCHEDULES__HELLO__JOB": "greet",
        "QUEUEY_SCHEDULES__HELLO__PAYLOAD": '{"name": "ada"}',
        "QUEUEY_SCHEDULES__HELLO__EVERY": "1h",
        "QUEUEY_SCHEDULER__METRICS_PORT": str(free_port()),
    }
    # On one embedded file (no broker needed), as compose's embedded profile shares it.
    volume = containers.volume()
    schedule["QUEUEY_BROKER__URL"] = board_url = "sqlite:////data/queuey.db"
    scheduler = containers.start("scheduler", env=schedule, volume=volume)
    port = free_port()
    board = {
        "QUEUEY_BROKER__URL": board_url,
        "QUEUEY_DASHBOARD__HOST": "0.0.0.0",
        "QUEUEY_DASHBOARD__PORT": str(port),
        "QUEUEY_DASHBOARD__TOKEN": TOKEN,
        # Not the image's 9191, where another test's worker may answer on the host network.
        "QUEUEY_WORKER__METRICS_PORT": str(free_port()),
        "QUEUEY_SCHEDULER__METRICS_PORT": str(free_port()),
    }
    dashboard = containers.start("dashboard", env=board, volume=volume)
    until_healthy(scheduler)
    until_healthy(dashboard)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as page:
        assert page.status == 200
        assert b"alpha" in page.read()
    podman("stop", "-t", "30", scheduler, dashboard, timeout=90)
    assert state(scheduler)["ExitCode"] == 0, logs(scheduler)
    assert state(dashboard)["ExitCode"] == 0, logs(dashboard)
