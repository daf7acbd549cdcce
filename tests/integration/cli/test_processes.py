"""``queuey worker --processes N`` as real processes on RabbitMQ: the supervisor's promises.

Each test runs the console script with a CPU-bound plugin (:mod:`.cpu_jobs`) whose runs
go into a ledger with the pid that ran them, and reads the supervisor's JSON log (the
children write to the same file, each line tagged with ``child`` and ``pid``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests import harness
from tests.integration import cpu_jobs
from tests.integration import ledger
from tests.integration.broker import clean_queues
from tests.integration.configs import worker_config
from tests.integration.fleet import QUEUEY
from tests.integration.fleet import REPO
from tests.support import alive
from tests.support import kill_all
from tests.support import log_tail

pytestmark = pytest.mark.integration

QUEUES = QueueSet([QueueConfig(cpu_jobs.QUEUE, prefetch=2)])


def _config(path: Path) -> Path:
    return worker_config(path, shutdown_timeout="30s", queues={cpu_jobs.QUEUE: "prefetch = 2"})


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    with clean_queues(cpu_jobs.QUEUE):
        yield tmp_path


class Supervisor:
    """``queuey worker --queues procs.cpu --processes ...`` and what it logged."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.ledger = folder / "ledger.txt"
        self.log = folder / f"supervisor-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(cpu_jobs.plugin_path(folder / "plugin")), str(REPO)]
            ),
            "PYTHONUNBUFFERED": "1",
            ledger.LEDGER_ENV: str(self.ledger),
        }
        config = _config(folder / "queuey.toml")
        command = [str(QUEUEY), "--config", str(config), "--log-format", "json", "worker"]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [*command, "--queues", cpu_jobs.QUEUE, *args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.startswith("{")]

    def said(self, fragment: str) -> list[dict[str, Any]]:
        """The supervisor's own events whose message holds ``fragment``."""
        return [
            e
            for e in self.events()
            if e["logger"] == "queuey.supervisor" and fragment in e["message"]
        ]

    def children(self) -> list[int]:
        """The pid of every child started so far, in order."""
        return [int(e["child_pid"]) for e in self.said("started (pid")]

    def books(self) -> ledger.Books:
        return ledger.Books.read(self.ledger)

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            code = self.proc.poll()
            assert code is None, f"the supervisor exited ({code}) before {what}: {self.tail()}"
            assert time.monotonic() < deadline, f"not {what} within {timeout}s: {self.tail()}"
            time.sleep(0.05)

    def stop(self, timeout: float = 90) -> int:
        """SIGTERM, then its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def tail(self) -> str:
        return log_tail(self.log, 15)

    def kill_all(self) -> None:
        kill_all(self.proc, self.children())


def enqueue(n: int, rounds: int) -> list[str]:
    """``n`` crunch jobs, confirmed; their ids."""
    rabbit = RabbitMQBackend(harness.AMQP_URL)
    try:
        rabbit.declare([QUEUES[cpu_jobs.QUEUE]])
        jobs = [cpu_jobs.Crunch(rounds=rounds) for _ in range(n)]
        return [str(j) for j in Producer(rabbit, QUEUES).enqueue_many(jobs)]
    finally:
        rabbit.close()


def ready_count() -> int:
    rabbit = RabbitMQBackend(harness.AMQP_URL)
    try:
        return rabbit.queue_counts(cpu_jobs.QUEUE)[0]
    finally:
        rabbit.close()


@pytest.fixture
def start(folder: Path) -> Iterator[Callable[..., Supervisor]]:
    started: list[Supervisor] = []

    def make(*args: str) -> Supervisor:
        sup = Supervisor(folder, *args)
        started.append(sup)
        return sup

    yield make
    for sup in started:
        if sup.proc.poll() is None or any(alive(p) for p in sup.children()):
            sup.kill_all()


def test_two_processes_both_take_jobs_and_sigterm_drains_them_and_exits_0(
    start: Callable[..., Supervisor],
) -> None:
    ids = enqueue(40, rounds=300_000)
    sup = start("--processes", "2")
    sup.wait("both children consuming", lambda: len(sup.said("is consuming")) >= 2)
    sup.wait("ten jobs done", lambda: sup.books().finished() >= 10)

    assert sup.stop() == 0, sup.tail()
    books = sup.books()
    assert books.unfinished() == set(), "every job that started finished in the drain"
    pids = {pid for _, pid in books.finishes}
    assert pids <= set(sup.children()), "jobs ran in the children, not in the supervisor"
    assert len(pids) == 2, f"both processes took jobs: {pids}"
    assert books.finished() + ready_count() >= len(ids), "a job was lost"
    assert not any(alive(p) for p in sup.children()), "a child outlived its supervisor"
    assert len(sup.said("exited with status 0")) == 2, (
        f"each child drained and exited 0: {sup.tail()}"
    )


def test_a_child_killed_mid_batch_is_restarted_and_no_job_is_lost(
    start: Callable[..., Supervisor],
) -> None:
    ids = enqueue(60, rounds=300_000)
    sup = start("--processes", "2")
    sup.wait("ten jobs done", lambda: sup.books().finished() >= 10)
    victim = sup.children()[0]
    os.kill(victim, signal.SIGKILL)

    sup.wait("every job done", lambda: not sup.books().missing(ids), timeout=180)
    died = sup.said("killed by SIGKILL; restarting it in")
    assert [e["child_pid"] for e in died] == [victim], sup.tail()
    assert len(sup.children()) == 3, "the dead child was replaced"
    assert sup.stop() == 0, sup.tail()
    assert ready_count() == 0


def test_a_supervisor_killed_with_sigkill_takes_its_children_down(
    start: Callable[..., Supervisor],
) -> None:
    ids = enqueue(30, rounds=1_000_000)
    sup = start("--processes", "2")
    sup.wait("jobs running in both", lambda: len(set(sup.books().started)) >= 3)
    children = sup.children()
    sup.proc.send_signal(signal.SIGKILL)
    sup.proc.wait(10)

    deadline = time.monotonic() + 60
    while any(alive(p) for p in children):
        assert time.monotonic() < deadline, "a child outlived its supervisor by a minute"
        time.sleep(0.1)
    books = sup.books()
    assert books.unfinished() == set(), "the children drained: every started job finished"
    assert books.finished() + ready_count() >= len(ids), "a job was lost"
    gone = [e for e in sup.events() if "the supervisor is gone" in e["message"]]
    assert {e["pid"] for e in gone} == set(children), sup.tail()


def test_max_jobs_per_child_starts_the_replacement_before_the_old_child_exits(
    start: Callable[..., Supervisor],
) -> None:
    # Jobs of about 0.1 s: the old child keeps working while its replacement starts
    # (about a second), and the replacement must be left some.
    ids = enqueue(40, rounds=1_000_000)
    sup = start("--processes", "1", "--max-jobs-per-child", "5")
    sup.wait("every job done", lambda: not sup.books().missing(ids), timeout=180)
    sup.wait("a replaced child's exit", lambda: bool(sup.said("replaced, exited")))
    assert sup.stop() == 0, sup.tail()

    events = [e for e in sup.events() if e["logger"] == "queuey.supervisor"]
    messages = [e["message"] for e in events]
    first_old, first_new = sup.children()[:2]
    consuming = messages.index(f"worker process 0 (pid {first_new}) is consuming")
    exited = messages.index(f"worker process 0 (pid {first_old}), replaced, exited with status 0")
    asked = next(i for i, m in enumerate(messages) if f"(pid {first_old}) ran " in m)
    assert asked < consuming < exited, f"replacement ready before the old one exited: {messages}"
    pids = {pid for _, pid in sup.books().finishes}
    assert len(pids) >= 2, "jobs ran in the replacement too"
    assert ready_count() == 0


def test_the_supervisor_serves_every_childs_metrics_and_readiness(
    start: Callable[..., Supervisor],
) -> None:
    sup = start("--processes", "2", "--metrics-port", "0")
    sup.wait("both children consuming", lambda: len(sup.said("is consuming")) >= 2)
    url = sup.said("serving /metrics")[0]["metrics_url"].replace("0.0.0.0", "127.0.0.1")

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    sup.wait("/readyz 200", ready)
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    for pid, child in zip(sup.children(), ("0", "1"), strict=True):
        line = f'queuey_worker_state{{child="{child}",pid="{pid}",state="consuming"}} 1.0'
        assert line in text, text
    assert "queuey_supervisor_processes_ready 2.0" in text
    assert sup.stop() == 0, sup.tail()
