"""Bursts of signals at random spacings to real processes running the worker's main loop
(:func:`queuey_core.process.running.run_until_stopped`, what ``queuey worker`` runs),
on an in-memory backend: no broker, so hundreds of trials fit in a minute.

Every trial must end within ``shutdown_timeout`` plus a second of its first signal,
with 0 (one signal: drained) or 130 (two or more: stopped at once, unless the drain
had already finished). The real-broker version, with supervisors too, is
``tests/integration/test_stopping.py``.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.process.bursts import Burst
from tests.support import alive

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCALE = float(os.environ.get("QUEUEY_TEST_STOP_TRIALS", "1"))
TRIALS = max(1, round(160 * SCALE))
SUPERVISOR_TRIALS = max(1, round(60 * SCALE))
SHUTDOWN_TIMEOUT = 1.0
SLACK = 1.0


def _trial(seed: int, logs: Path, driver: str) -> tuple[str, float, int | None]:
    """One process (and its children), one burst: what went wrong (or ''), how long it
    took to end after its first signal, and its exit code."""
    rng = random.Random(seed)
    log = logs / f"{driver}-{seed}.log"
    env = {**os.environ, "FAKE_LOG": str(logs / f"children-{seed}.log")}
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", f"tests.process.{driver}", str(SHUTDOWN_TIMEOUT)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
    children: list[int] = []
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        said = proc.stdout.readline().split() if ready else []
        if said[:1] != [b"ready"]:
            return f"seed {seed}: never ready: {log.read_text()[-500:]}", 0.0, None
        children = [int(pid) for pid in said[1:]]
        time.sleep(rng.uniform(0, 0.05))
        burst = Burst.random(rng)
        first = burst.send(proc.pid)
        deadline = first + SHUTDOWN_TIMEOUT + SLACK
        try:
            code = proc.wait(deadline - time.monotonic())
            while any(alive(c) for c in children) and time.monotonic() < deadline:
                time.sleep(0.01)
            if any(alive(c) for c in children):
                return f"seed {seed}: a child outlived its deadline", deadline - first, code
        except subprocess.TimeoutExpired:
            late = time.monotonic() - first
            proc.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
            time.sleep(0.5)
            stacks = log.read_text()[-3000:]
            n = len(burst.signals)
            return f"seed {seed}: alive {late:.2f}s after the first of {n}: {stacks}", late, None
        took = time.monotonic() - first
        if code == 130 and len(burst.signals) == 1:
            return f"seed {seed}: one signal stopped it at once", took, code
        if code not in (0, 130):
            return f"seed {seed}: exit {code}: {log.read_text()[-500:]}", took, code
        return "", took, code
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _run_trials(tmp_path: Path, n: int, driver: str) -> None:
    base = int(os.environ.get("QUEUEY_TEST_SEED", time.time_ns() % 1_000_000))
    seeds = [base + i for i in range(n)]
    with ThreadPoolExecutor(4 if driver == "signal_child" else 2) as pool:
        outcomes = list(pool.map(lambda s: _trial(s, tmp_path, driver), seeds))
    problems = [p for p, _, _ in outcomes if p]
    print(
        f"\n{driver}: {n} trials (seeds from {base}): "
        f"{sum(c == 130 for _, _, c in outcomes)} stopped at once, "
        f"{sum(c == 0 for _, _, c in outcomes)} drained; slowest end "
        f"{max(t for _, t, _ in outcomes):.2f}s after the first signal "
        f"(deadline {SHUTDOWN_TIMEOUT + SLACK:g}s)"
    )
    assert not problems, f"{len(problems)} of {n} trials (seeds from {base}): {problems[:5]}"


def test_bursts_of_signals_at_random_spacings_end_every_worker_loop_in_time(
    tmp_path: Path,
) -> None:
    _run_trials(tmp_path, TRIALS, "signal_child")


def test_bursts_of_signals_at_random_spacings_end_every_supervisor_and_child_in_time(
    tmp_path: Path,
) -> None:
    _run_trials(tmp_path, SUPERVISOR_TRIALS, "supervisor_child")
