"""How real ``queuey worker`` processes stop: bursts of signals at random spacings, a
systemd-style SIGTERM to every process at once, and a supervisor killed mid-batch.

Every trial is a real process of the console script on the real broker (memory cannot
cross processes), with the ledger handlers as a plugin and its JSON logs in a file.
What fails a trial: a process alive past its deadline (the first signal plus
``shutdown_timeout`` plus a second), an exit other than the documented one, a job cut
short or run twice by a supervisor's death. Slow: a few minutes of processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests import harness
from tests.integration import ledger
from tests.integration.broker import clean_queues
from tests.integration.configs import worker_config
from tests.integration.fleet import QUEUEY
from tests.integration.fleet import REPO
from tests.process.bursts import Burst
from tests.support import alive
from tests.support import kill_all
from tests.support import log_tail

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Trials of each kind, sized to take about two minutes on two loaded cores (the
#: hundreds of cheaper trials are tests/process/test_signal_bursts.py's);
#: QUEUEY_TEST_STOP_TRIALS scales them (4 ran every kind 160/40/12/6 in 11 minutes).
SCALE = float(os.environ.get("QUEUEY_TEST_STOP_TRIALS", "1"))
WORKER_TRIALS = max(1, round(40 * SCALE))
SUPERVISOR_TRIALS = max(1, round(10 * SCALE))
CONTROL_GROUP_TRIALS = max(1, round(3 * SCALE))
KILLS = max(5, round(6 * SCALE))
#: Processes under test at once: the machine has two cores and other tests on them.
PARALLEL = 4

SHUTDOWN_TIMEOUT = 2.0
#: Past the first signal, how long a process may live: the promise, plus a second.
SLACK = 1.0
QUEUE = ledger.CLASSIC
QUEUES = QueueSet([QueueConfig(QUEUE, prefetch=2)])


def _config(path: Path, shutdown_timeout: float) -> Path:
    return worker_config(
        path,
        shutdown_timeout=f"{shutdown_timeout}s",
        queues={ledger.CLASSIC: "prefetch = 2", ledger.QUORUM: 'kind = "quorum"'},
    )


def _enqueue(n: int, ms: int) -> list[str]:
    rabbit = RabbitMQBackend(harness.AMQP_URL)
    try:
        jobs = [ledger.Classic(ms=ms) for _ in range(n)]
        return [str(j) for j in Producer(rabbit, QUEUES).enqueue_many(jobs)]
    finally:
        rabbit.close()


class Process:
    """``queuey worker --queues ledger.classic [args]``, its log in a file of its own."""

    def __init__(self, folder: Path, config: Path, *args: str) -> None:
        self.log = folder / f"worker-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ledger.plugin_path(folder / "plugin")), str(REPO)]),
            ledger.LEDGER_ENV: str(folder / "ledger.txt"),
        }
        command = [str(QUEUEY), "--config", str(config), "--log-format", "json", "worker"]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [*command, "--queues", QUEUE, *args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines()
        return [json.loads(x) for x in lines if x.startswith("{") and x.endswith("}")]

    def said(self, fragment: str, logger: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if fragment in e["message"] and (logger is None or e["logger"] == logger)
        ]

    def children(self) -> list[int]:
        return [int(e["child_pid"]) for e in self.said("started (pid", "queuey.supervisor")]

    def wait_until(self, what: str, ready: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"exited before {what}: {self.tail()}"
            assert time.monotonic() < deadline, f"not {what} within {timeout}s: {self.tail()}"
            time.sleep(0.02)

    def tail(self) -> str:
        return log_tail(self.log, 12)

    def kill_all(self) -> None:
        kill_all(self.proc, self.children())


def consuming(p: Process, n: int) -> Callable[[], bool]:
    """Whether ``n`` children of supervisor ``p`` said they are consuming."""
    return lambda: len(p.said("is consuming", "queuey.supervisor")) >= n


def _books(folder: Path) -> ledger.Books:
    return ledger.Books.read(folder / "ledger.txt")


@dataclass
class Outcome:
    """One trial: how long after the first signal every process was gone, and how."""

    took: float
    code: int | None
    signals: int
    problem: str = ""


def _gone_by(pids: list[int], proc: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(alive(p) for p in pids):
            return True
        time.sleep(0.01)
    return proc.poll() is not None and not any(alive(p) for p in pids)


def _trial(folder: Path, config: Path, rng: random.Random, processes: int) -> Outcome:
    args = ("--processes", str(processes)) if processes > 1 else ()
    p = Process(folder, config, *args)
    try:
        if processes > 1:
            p.wait_until("children consuming", consuming(p, processes))
        else:
            p.wait_until("the worker running", lambda: bool(p.said("worker starting")))
        time.sleep(rng.uniform(0, 0.3))  # now idle, now with a job or two running
        burst = Burst.random(rng)
        first = burst.send(p.proc.pid)
        deadline = first + SHUTDOWN_TIMEOUT + SLACK
        children = p.children()
        if not _gone_by(children, p.proc, deadline):
            return Outcome(time.monotonic() - first, None, len(burst.signals), f"alive: {p.tail()}")
        took = time.monotonic() - first
        code = p.proc.returncode
        drained_only = "stopping at once" not in p.log.read_text()
        problem = ""
        if code not in (0, 130):
            problem = f"exit {code}: {p.tail()}"
        elif code == 130 and len(burst.signals) == 1:
            problem = "one signal stopped it at once"
        elif code == 0 and not drained_only:
            problem = "exit 0 after stopping at once"
        return Outcome(took, code, len(burst.signals), problem)
    finally:
        if p.proc.poll() is None or any(alive(c) for c in p.children()):
            p.kill_all()
        if p.proc.returncode is None:
            p.proc.wait(10)


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    with clean_queues(QUEUE):
        yield tmp_path


def _run_trials(
    folder: Path, n: int, processes: int, seed: int, figures: list[str], what: str
) -> None:
    config = _config(folder / "queuey.toml", SHUTDOWN_TIMEOUT)
    _enqueue(n * 4, ms=50)  # something to drain, now and then
    rngs = [random.Random(seed + i) for i in range(n)]
    with ThreadPoolExecutor(PARALLEL if processes == 1 else 2) as pool:
        outcomes = list(pool.map(lambda r: _trial(folder, config, r, processes), rngs))
    bad = [(i, o) for i, o in enumerate(outcomes) if o.problem]
    worst = max(o.took for o in outcomes)
    stopped = sum(o.code == 130 for o in outcomes)
    figures.append(
        f"{what}: {n} trials (seed {seed}), {stopped} stopped at once, the rest drained; "
        f"slowest exit {worst:.2f}s after the first signal (deadline "
        f"{SHUTDOWN_TIMEOUT + SLACK:g}s)"
    )
    assert not bad, f"seed {seed}: trials that broke the promise: {bad[:10]}"


def test_bursts_of_signals_at_random_spacings_end_every_worker_in_time(
    folder: Path, figures: list[str]
) -> None:
    seed = int(os.environ.get("QUEUEY_TEST_SEED", time.time_ns() % 1_000_000))
    _run_trials(folder, WORKER_TRIALS, 1, seed, figures, "signal bursts, one worker")


def test_bursts_of_signals_at_random_spacings_end_every_supervisor_in_time(
    folder: Path, figures: list[str]
) -> None:
    seed = int(os.environ.get("QUEUEY_TEST_SEED", time.time_ns() % 1_000_000))
    _run_trials(folder, SUPERVISOR_TRIALS, 2, seed, figures, "signal bursts, supervisor of 2")


def test_a_sigterm_to_every_process_of_the_unit_drains_each_once(
    folder: Path, figures: list[str]
) -> None:
    # systemd's KillMode=control-group: the supervisor and each child get SIGTERM at
    # once, and the supervisor asks each child to drain too. Nothing may stop at once.
    config = _config(folder / "queuey.toml", SHUTDOWN_TIMEOUT)
    _enqueue(CONTROL_GROUP_TRIALS * 8, ms=100)
    slowest = 0.0
    for _ in range(CONTROL_GROUP_TRIALS):
        p = Process(folder, config, "--processes", "2")
        try:
            p.wait_until("children consuming", consuming(p, 2))
            pids = [p.proc.pid, *p.children()]
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
            first = time.monotonic()
            assert _gone_by(pids[1:], p.proc, first + SHUTDOWN_TIMEOUT + SLACK), p.tail()
            slowest = max(slowest, time.monotonic() - first)
            assert p.proc.returncode == 0, p.tail()
            assert "stopping at once" not in p.log.read_text(), p.tail()
        finally:
            if p.proc.poll() is None or any(alive(c) for c in p.children()):
                p.kill_all()
    figures.append(
        f"SIGTERM to every process of the unit: {CONTROL_GROUP_TRIALS} trials, all drained; "
        f"slowest {slowest:.2f}s"
    )


def test_a_supervisor_killed_mid_batch_leaves_no_job_cut_short_run_twice_or_orphaned(
    folder: Path, figures: list[str]
) -> None:
    shutdown_timeout = 5.0
    config = _config(folder / "queuey.toml", shutdown_timeout)
    ids = _enqueue(KILLS * 40, ms=300)
    orphans = 0
    slowest = 0.0
    for _ in range(KILLS):
        p = Process(folder, config, "--processes", "2")
        try:
            before = _books(folder).finished()

            def busy(p: Process = p, before: int = before) -> bool:
                return consuming(p, 2)() and _books(folder).finished() >= before + 4

            p.wait_until("jobs running in both children", busy)
            children = p.children()
            p.proc.kill()  # kill -9: no drain request, no goodbye
            killed = time.monotonic()
            p.proc.wait(10)
            deadline = killed + shutdown_timeout + SLACK
            while any(alive(c) for c in children) and time.monotonic() < deadline:
                time.sleep(0.01)
            orphans += sum(alive(c) for c in children)
            slowest = max(slowest, time.monotonic() - killed)
            gone = {e["pid"] for e in p.said("the supervisor is gone")}
            assert gone == set(children), f"each child drained once: {p.tail()}"
        finally:
            for c in p.children():
                if alive(c):
                    os.kill(c, signal.SIGKILL)
    final = _books(folder)
    cut_short = final.unfinished()
    twice = final.duplicates()
    figures.append(
        f"supervisor kill -9 mid-batch x{KILLS}: {final.finished()} jobs finished, "
        f"{len(cut_short)} cut short, {twice} run twice, {orphans} orphans; children gone "
        f"{slowest:.2f}s after the kill at the slowest"
    )
    assert orphans == 0, "a child outlived its supervisor past the drain deadline"
    assert cut_short == set(), f"jobs cut short by the supervisor's death: {cut_short}"
    assert twice == 0, "jobs run twice because a supervisor died"
    assert final.finished() <= len(ids)
