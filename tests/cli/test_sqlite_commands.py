"""Every command on the embedded backend, through the installed ``queuey`` script with
``QUEUEY_BROKER__URL=sqlite:///...``: enqueue (one job and ``--file``), worker (one
process and ``--processes``, ``--burst``, ``--with-scheduler``, metrics and health),
queues, dlq list/show/requeue/delete/purge, workers and workers shutdown, scheduler,
schedules and config show. No server anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

QUEUEY = str(Path(sys.executable).parent / "queuey")

CONFIG = """
[worker]
shutdown_timeout = "5s"

[queues.alpha]
prefetch = 4
max_priority = 10
retry = { max_attempts = 2, backoff = "fixed", initial = "100ms", max = "100ms", jitter = false }

[queues.beta]
prefetch = 1
"""

SCHEDULE = """
[schedules.hello]
job = "greet"
payload = { name = "cron" }
every = "1s"
"""


class Project:
    """A directory with a queuey.toml and a sqlite URL for every command run in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "queuey.db"
        (root / "queuey.toml").write_text(CONFIG)
        (root / "schedule.toml").write_text(SCHEDULE)
        clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
        self.env = {**clean, "QUEUEY_BROKER__URL": f"sqlite:///{self.db}?lease=1"}

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [QUEUEY, *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # A failed job's traceback is a field of its JSON log line; a crash's is a line.
        crashed = [line for line in result.stderr.splitlines() if line.startswith("Traceback")]
        assert not crashed, result.stderr
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    def json(self, *args: str) -> object:
        return json.loads(self.run(*args, "--json").stdout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [QUEUEY, *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def rows(self) -> int:
        """Jobs in the file, read straight from it."""
        conn = sqlite3.connect(self.db, timeout=10)
        try:
            return int(conn.execute("SELECT count(*) FROM queuey_messages").fetchone()[0])
        finally:
            conn.close()

    def ready(self, name: str) -> int:
        """Jobs ready on ``name`` (0 before anything declared it)."""
        return int(str(self.queue(name)["ready"] or 0))

    def queue(self, name: str) -> dict[str, object]:
        found = self.json("queues")
        assert isinstance(found, dict)
        return next(q for q in found["queues"] if q["name"] == name)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def started() -> Iterator[Callable[[subprocess.Popen[str]], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def keep(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
        procs.append(proc)
        return proc

    yield keep
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def test_config_show_names_the_embedded_backend(project: Project) -> None:
    shown = json.loads(project.run("config", "show").stdout)
    assert shown["backend"] == "sqlite (embedded, no server)"
    assert shown["broker"]["url"] == f"sqlite:///{project.db}?lease=1"


def test_enqueue_burst_queues_and_every_dlq_command(project: Project) -> None:
    greet = project.run("enqueue", "greet", '{"name": "ada"}').stdout.strip()
    project.run("enqueue", "flaky", '{"failures": 1}')
    doomed = project.run("enqueue", "doomed", '{"why": "demo"}').stdout.strip()
    (project.root / "jobs.jsonl").write_text('{"name": "a"}\n{"name": "b"}\n{"name": "c"}\n')
    project.run("enqueue", "greet", "--file", "jobs.jsonl")
    alpha = project.queue("alpha")
    assert (alpha["ready"], alpha["unacked"], alpha["dead_letters"]) == (6, 0, 0)
    project.run("enqueue", "nap", '{"seconds": 0}', "--delay", "10s")
    assert project.json("queues")["held"] == 1  # type: ignore[index]

    project.run("worker", "--queues", "alpha,beta", "--burst")
    alpha = project.queue("alpha")
    assert (alpha["ready"], alpha["unacked"], alpha["dead_letters"]) == (0, 0, 1)
    assert project.queue("beta")["ready"] == 0
    assert greet

    listed = project.json("dlq", "list")
    assert isinstance(listed, list)
    assert [d["handle"] for d in listed] == [doomed]
    shown = project.json("dlq", "show", doomed)
    assert isinstance(shown, dict)
    assert shown["reason"] == "fatal error: demo"
    assert "requeued 1" in project.run("dlq", "requeue", "--queue", "alpha", doomed).stdout
    assert project.queue("alpha")["ready"] == 1
    project.run("worker", "--queues", "alpha", "--burst")
    assert "deleted 1" in project.run("dlq", "delete", "--queue", "alpha", doomed).stdout
    project.run("enqueue", "doomed", '{"why": "again"}')
    project.run("worker", "--queues", "alpha", "--burst")
    assert "purged 1" in project.run("dlq", "purge", "--queue", "alpha", "--yes").stdout
    assert project.json("dlq", "list") == []


def test_workers_and_workers_shutdown_reach_every_process_through_the_file(
    project: Project, started: Callable[[subprocess.Popen[str]], subprocess.Popen[str]]
) -> None:
    port = free_port()
    supervisor = started(project.start("worker", "--processes", "2", "--metrics-port", str(port)))

    def statuses() -> list[dict[str, object]]:
        found = project.json("workers")
        assert isinstance(found, list)
        return found

    wait(lambda: len(statuses()) == 2, "two workers answer")
    ready = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").read())
    assert ready["ok"] is True
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert "queuey_jobs_total" in metrics
    project.run("enqueue", "greet", '{"name": "ada"}')
    wait(lambda: sum(int(str(s["succeeded"])) for s in statuses()) == 1, "the job ran")

    first = statuses()[0]["pid"]
    project.run("workers", "shutdown", "--pid", str(first))
    wait(lambda: [s["pid"] for s in statuses()] != [first] and len(statuses()) == 1, "one left")
    project.run("workers", "shutdown", "--all")
    assert supervisor.wait(timeout=30) == 0


def test_scheduler_schedules_and_with_scheduler_elect_through_the_file(
    project: Project, started: Callable[[subprocess.Popen[str]], subprocess.Popen[str]]
) -> None:
    project.env["QUEUEY_CONFIG"] = os.pathsep.join(["queuey.toml", "schedule.toml"])
    one = started(project.start("scheduler"))
    two = started(project.start("scheduler"))
    wait(lambda: project.ready("alpha") >= 2, "the schedule fired")
    shown = project.json("schedules")
    assert isinstance(shown, list)
    assert shown[0]["name"] == "hello"
    assert shown[0]["last_firing_ms"] is not None
    # Read off the file itself: a command's start-up would stretch the window.
    before, since = project.rows(), time.monotonic()
    time.sleep(3)
    fired, took = project.rows() - before, time.monotonic() - since
    assert 1 <= fired <= took + 1.5, f"one scheduler fires once a second: {fired} in {took:.1f}s"
    one.send_signal(signal.SIGKILL)
    one.wait()
    before = project.ready("alpha")
    wait(lambda: project.ready("alpha") > before + 1, "the other took over")
    two.send_signal(signal.SIGTERM)
    assert two.wait(timeout=20) == 0

    worker = started(project.start("worker", "--queues", "alpha", "--with-scheduler"))
    wait(lambda: project.queue("alpha")["ready"] == 0, "the worker drained alpha")
    last = project.json("schedules")
    assert isinstance(last, list)
    first_seen = last[0]["last_firing_ms"]
    wait(
        lambda: project.json("schedules")[0]["last_firing_ms"] != first_seen,  # type: ignore[index]
        "the worker's scheduler fires",
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
