"""Many processes on one SQLite file: three workers, two producers, one ``kill -9``.

The books must balance: every job enqueued ran at least once, nothing is left on the
file or dead-lettered, and a job ran twice only if one of its runs was in the worker
killed mid-batch (whose leases expired; never two live workers on one job).
"""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from queuey_core.backends.sqlite import SqliteBackend

from .files import spawned

pytestmark = pytest.mark.processes

JOBS_PER_PRODUCER = 150


def test_three_workers_two_producers_and_a_kill_9_balance_the_books(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db?lease=1"
    ledger, ids = tmp_path / "ledger", tmp_path / "ids"
    ledger.touch()
    workers = [spawned("worker", url, str(ledger)) for _ in range(3)]
    producers = [spawned("produce", url, str(ids), str(JOBS_PER_PRODUCER)) for _ in range(2)]
    victim = workers[0]
    try:
        wait(lambda: runs_by(ledger).get(victim.pid, 0) >= 10, "the victim ran 10 jobs")
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        for p in producers:
            assert p.wait(timeout=60) == 0, "a producer failed"
        sent = ids.read_text().split()
        assert len(sent) == 2 * JOBS_PER_PRODUCER
        wait(lambda: set(sent) <= {job for _, job in entries(ledger)}, "every job ran")
        probe = SqliteBackend(url)
        try:
            wait(lambda: left(probe) == 0, "nothing left on the file")
            assert probe.list_dead_letters("procs") == [], "nothing dead-lettered"
        finally:
            probe.close()
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=30)

    runs: dict[str, list[int]] = collections.defaultdict(list)
    for pid, job in entries(ledger):
        runs[job].append(pid)
    assert set(runs) == set(sent), "only jobs that were sent ran"
    for job, pids in runs.items():
        others = [p for p in pids if p != victim.pid]
        assert len(others) <= 1, f"job {job} ran {len(others)} times in live workers: {pids}"
    twice = sum(1 for pids in runs.values() if len(pids) > 1)
    assert 1 <= twice <= 4, f"{twice} jobs ran twice: the victim held 1 to 4 (its prefetch)"


def entries(ledger: Path) -> list[tuple[int, str]]:
    found = []
    for line in ledger.read_text().splitlines():
        pid, job = line.split()
        found.append((int(pid), job))
    return found


def runs_by(ledger: Path) -> dict[int, int]:
    return collections.Counter(pid for pid, _ in entries(ledger))


def left(backend: SqliteBackend) -> int:
    counts, _, _ = backend.counts(["procs"])["procs"]
    return counts.ready + counts.leased + counts.held


def wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)
