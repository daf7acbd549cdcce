"""Live workers on RabbitMQ: ``queuey workers`` and ``workers shutdown`` against real
``queuey worker`` processes, and the control channel under hostile messages and a cut
connection. In a virtual host of its own (created and deleted here), so that no other
test's worker answers.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import ClassVar

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import Handler
from queuey_core import Job
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.control import VERSION
from queuey_core.control import Command
from queuey_core.control import ControlRequest
from queuey_core.control import Selection
from queuey_core.control import worker_statuses
from queuey_core.handlers import discover
from tests import harness
from tests.integration.broker import own_vhost
from tests.integration.broker import rabbitmqctl

pytestmark = pytest.mark.integration

VHOST = "queuey-workers-test" if harness.VHOST == "/" else f"{harness.VHOST}.workers"
URL = (
    f"amqp://guest:guest@{harness.BROKER_HOST}:{harness.BROKER_PORT}/"
    f"{urllib.parse.quote(VHOST, safe='')}"
)
#: A queue no example handler is bound to: its worker runs nothing.
IDLE = "ctl.idle"


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    with own_vhost(VHOST) as name:
        yield name


@pytest.fixture
def config(vhost: str, tmp_path: Path) -> Path:
    """The example handlers' queues (wherever they are bound) and an idle one."""
    queues = sorted({d.handler.job_type.QUEUE for d in discover()} | {IDLE})
    tables = "\n".join(f'[queues."{q}"]\nprefetch = 4\n' for q in queues)
    path = tmp_path / "queuey.toml"
    path.write_text(
        f'[broker]\nurl = "{URL}"\nheartbeat = 10\n\n[worker]\nshutdown_timeout = "20s"\n\n'
        + tables
    )
    return path


def queue_of(job_type: str) -> str:
    """The queue an example handler is bound to (the examples may move)."""
    return next(d.handler.job_type.QUEUE for d in discover() if job_type == d.handler.job_type.NAME)


def queuey(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "queuey_cli", "--config", str(config), *args]


def invoke(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), "--log-format", "json", *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


class WorkerProcess:
    """``queuey worker`` as a subprocess, its JSON logs kept."""

    def __init__(self, config: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            queuey(config, "--log-format", "json", "worker", *args),
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def messages(self) -> list[str]:
        return [str(e["message"]) for e in list(self.events)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def processes() -> Iterator[Callable[..., WorkerProcess]]:
    """Starts worker processes, and stops whatever is left at the end."""
    started: list[WorkerProcess] = []

    def start(config: Path, *args: str) -> WorkerProcess:
        started.append(WorkerProcess(config, *args))
        return started[-1]

    yield start
    for w in started:
        w.stop()


def statuses(config: Path) -> list[dict[str, Any]]:
    code, out, err = invoke(config, "workers", "--json")
    assert code == 0, err
    found: list[dict[str, Any]] = json.loads(out)
    return found


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def test_workers_lists_two_live_workers_and_shutdown_drains_only_the_chosen_one(
    config: Path, processes: Callable[..., WorkerProcess]
) -> None:
    busy_queues = sorted({queue_of("greet"), queue_of("doomed")})
    busy = processes(config, "--queues", ",".join(busy_queues))
    idle = processes(config, "--queues", IDLE)
    wait_until(lambda: len(statuses(config)) == 2, 60, "both workers answer")
    for payload in ('{"name": "ada"}', '{"name": "bob"}', '{"name": "cy"}'):
        assert invoke(config, "enqueue", "greet", payload)[0] == 0
    assert invoke(config, "enqueue", "doomed", '{"why": "a test"}')[0] == 0

    def counted() -> bool:
        by_pid = {s["pid"]: s for s in statuses(config)}
        return by_pid.get(busy.pid, {}).get("dead_lettered") == 1 and (
            by_pid[busy.pid]["succeeded"] == 3
        )

    wait_until(counted, 60, "the busy worker counted its jobs")

    began = time.monotonic()
    done = subprocess.run(
        queuey(config, "workers", "--json"), capture_output=True, text=True, check=False
    )
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    found = {s["pid"]: s for s in json.loads(done.stdout)}
    assert set(found) == {busy.pid, idle.pid}, "both answered within the 1s window"
    assert took < 15, f"the command took {took:.1f}s (1s window, process start on a busy box)"
    b, i = found[busy.pid], found[idle.pid]
    assert b["queues"] == busy_queues
    assert i["queues"] == [IDLE]
    assert (b["succeeded"], b["failed"], b["dead_lettered"], b["running"]) == (3, 1, 1, 0)
    assert (i["succeeded"], i["failed"], i["dead_lettered"]) == (0, 0, 0)
    for s in (b, i):
        assert s["state"] == "consuming"
        assert s["id"].startswith(f"{s['host']}:{s['pid']}:")
        assert (s["settle_failures"], s["stuck_job_threads"]) == (0, 0)
        assert s["supervisor_pid"] is None
        assert s["uptime"] > 0

    piped = subprocess.run(queuey(config, "workers"), capture_output=True, text=True, check=False)
    header, *rows = piped.stdout.splitlines()
    assert header.split("\t")[:3] == ["host", "pid", "state"], "plain text when piped"
    assert sorted(int(r.split("\t")[1]) for r in rows) == sorted([busy.pid, idle.pid])

    code, out, err = invoke(config, "workers", "shutdown", "--pid", str(busy.pid))
    assert code == 0, err
    assert f"pid={busy.pid}" in out
    assert busy.proc.wait(40) == 0, "it drained and exited 0, as on SIGTERM"
    assert "SIGTERM: draining (up to 20s); send it again to stop at once" in busy.messages()
    assert idle.proc.poll() is None, "the other worker keeps running"
    assert [s["pid"] for s in statuses(config)] == [idle.pid]


def test_no_worker_is_not_an_error_but_a_shutdown_that_matches_none_is(config: Path) -> None:
    code, out, err = invoke(config, "workers", "--timeout", "300ms")
    assert (code, out) == (0, "")
    assert "no worker answered within 0.3s" in err
    code, out, _ = invoke(config, "workers", "--json", "--timeout", "300ms")
    assert (code, json.loads(out)) == (0, [])
    code, _, err = invoke(config, "workers", "shutdown", "--pid", "1", "--timeout", "300ms")
    assert code == 1
    assert "no worker matched (pid=1) within 0.3s" in err
    code, _, err = invoke(config, "workers", "shutdown")
    assert code == 2, "no choice of workers, and no --all"
    assert "--all" in err


def test_hostile_control_messages_are_ignored_and_no_reply_lands_in_a_job_queue(
    vhost: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queuey_core")
    caplog.set_level(logging.DEBUG, logger="queuey_core.backends.rabbitmq.control")
    backend = RabbitMQBackend(URL)
    queues = QueueSet([QueueConfig("ctl.jobs", prefetch=2)])
    worker = Worker(backend, queues, [])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(worker_statuses(backend, timeout=0.3)) == 1, 30, "it answers")
        conn = pika.BlockingConnection(pika.URLParameters(URL))
        ch = conn.channel()
        reply_to = pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="x")
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *_: None, auto_ack=True)
        status = ControlRequest(v=VERSION, command=Command.STATUS).encode()
        shutdown = ControlRequest(
            v=VERSION, command=Command.SHUTDOWN, select=Selection(all=True)
        ).encode()
        for body, props in [
            (b"\x00\xff not json", reply_to),
            (b'{"v": 1, "command": "format c:"}', reply_to),
            (b"{" * 100_000, reply_to),
            (status, pika.BasicProperties(reply_to="ctl.jobs")),  # a job queue
            (shutdown, pika.BasicProperties()),  # nowhere to say it accepted
            (status, pika.BasicProperties(reply_to="amq.rabbitmq.reply-to.forged")),
        ]:
            ch.basic_publish("queuey.control", "", body, props)
        conn.process_data_events(time_limit=1.0)
        conn.close()
        assert backend.queue_counts("ctl.jobs")[0] == 0, "no status was written into a job queue"
        assert not worker.handle.is_shutdown(), "a shutdown without a reply-to is not acted on"
        assert "control request ignored: not a control request" in caplog.text
        assert "control request ignored: its reply_to is not a direct reply-to" in caplog.text
        assert len(worker_statuses(backend, timeout=1.0)) == 1, "it still answers"
    finally:
        worker.handle.shutdown()
        thread.join(30)
        backend.close()


def test_the_control_channel_comes_back_after_its_connection_is_cut(vhost: str) -> None:
    backend = RabbitMQBackend(URL)
    worker = Worker(backend, QueueSet([QueueConfig("ctl.cut", prefetch=1)]), [])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(worker_statuses(backend, timeout=0.3)) == 1, 30, "it answers")
        # close_connection wants the pid as the text listing prints it. The listing holds
        # every vhost's connections (list_connections takes no -p), the other part of the
        # suite's workers included: this vhost's are this test's.
        listing = rabbitmqctl(
            "-q", "list_connections", "--no-table-headers", "pid", "vhost", "client_properties"
        )
        control = [
            line
            for line in listing.splitlines()
            if line.split("\t")[1:2] == [VHOST] and "queuey control host=" in line
        ]
        assert len(control) == 1, "the control connection names itself: host, pid, version"
        assert f"pid={os.getpid()} v=" in control[0]
        rabbitmqctl("close_connection", control[0].split("\t")[0], "a test cuts it")
        wait_until(lambda: len(worker_statuses(backend, timeout=0.3)) == 1, 30, "it answers again")
        assert thread.is_alive(), "the worker never noticed"
    finally:
        worker.handle.shutdown()
        thread.join(30)
        backend.close()


@pytest.fixture
def users(vhost: str) -> Iterator[dict[str, str]]:
    """Broker URLs of the vhost for users of this test's own: ``app`` (workers,
    producers) and ``operator`` have the permissions docs/operations.md recommends (all
    but writing to ``queuey.control``; only that), ``uncontrolled`` may not set up a
    control channel at all."""
    token = secrets.token_hex(4)
    made: dict[str, str] = {}
    perms = {
        "app": (".*", r"^(?!queuey\.control$).*", ".*"),
        "operator": ("^$", r"^queuey\.control$", "^$"),
        # may not declare the control exchange nor its own control queue
        "uncontrolled": (r"^(?!queuey\.control).*", ".*", ".*"),
    }
    try:
        for role, (configure, write, read) in perms.items():
            user, password = f"queuey-ctl-{role}-{token}", secrets.token_hex(16)
            rabbitmqctl("add_user", user, password)
            made[role] = URL.replace("guest:guest@", f"{user}:{password}@")
            rabbitmqctl("set_permissions", "-p", VHOST, user, configure, write, read)
        yield made
    finally:
        for role in made:
            rabbitmqctl("delete_user", f"queuey-ctl-{role}-{token}")


def test_only_a_user_who_may_write_to_the_control_exchange_can_stop_workers(
    config: Path, users: dict[str, str]
) -> None:
    backend = RabbitMQBackend(users["app"])
    worker = Worker(backend, QueueSet([QueueConfig("ctl.perms", prefetch=1)]), [])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        as_operator = {"QUEUEY_BROKER__URL": users["operator"]}
        as_app = {"QUEUEY_BROKER__URL": users["app"]}

        def listed() -> bool:
            result = CliRunner().invoke(app, ["--config", str(config), "workers"], env=as_operator)
            return result.exit_code == 0 and f"\t{os.getpid()}\t" in result.stdout

        wait_until(listed, 30, "the operator sees the worker the app user runs")
        result = CliRunner().invoke(
            app, ["--config", str(config), "workers", "shutdown", "--all"], env=as_app
        )
        assert result.exit_code == 1
        assert "denied access" in result.stderr
        assert "queuey.control" in result.stderr
        assert not worker.handle.is_shutdown()
        result = CliRunner().invoke(
            app,
            ["--config", str(config), "workers", "shutdown", "--pid", str(os.getpid())],
            env=as_operator,
        )
        assert result.exit_code == 0, result.stderr
        thread.join(30)
        assert not thread.is_alive(), "the operator's shutdown drained it"
    finally:
        worker.handle.shutdown()
        thread.join(30)
        backend.close()


def test_a_worker_that_may_not_set_up_its_control_channel_still_runs_its_jobs(
    users: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queuey_core")
    backend = RabbitMQBackend(users["uncontrolled"])
    queues = QueueSet([QueueConfig("ctl.denied", prefetch=1)])
    done = threading.Event()
    worker = Worker(backend, queues, [Handler(Denied, lambda _job, _ctx: done.set())])
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        Producer(backend, queues).enqueue(Denied())
        assert done.wait(30), "the job ran"
        wait_until(lambda: "control channel closed by RabbitMQ" in caplog.text, 30, "a warning")
        assert "ACCESS_REFUSED" in caplog.text
        assert caplog.text.count("control channel closed by RabbitMQ") == 1, "said once"
        guest = RabbitMQBackend(URL)
        try:
            assert worker_statuses(guest, timeout=0.5) == []
        finally:
            guest.close()
        assert thread.is_alive()
    finally:
        worker.handle.shutdown()
        thread.join(30)
        backend.close()
    assert not thread.is_alive(), "it stopped as usual"


class Denied(Job):
    NAME: ClassVar[str] = "ctl.denied"
    QUEUE: ClassVar[str] = "ctl.denied"
