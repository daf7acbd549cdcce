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

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TRIALS = max(1, round(160 * float(os.environ.get("QUEUEY_TEST_STOP_TRIALS", "1"))))
SHUTDOWN_TIMEOUT = 1.0
SLACK = 1.0


def _trial(seed: int, logs: Path) -> str:
    """One process, one burst; what went wrong, or ''."""
    rng = random.Random(seed)
    log = logs / f"child-{seed}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.process.signal_child", str(SHUTDOWN_TIMEOUT)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        if not ready or proc.stdout.readline().strip() != b"ready":
            return f"seed {seed}: never ready: {log.read_text()[-500:]}"
        time.sleep(rng.uniform(0, 0.05))
        burst = Burst.random(rng)
        first = burst.send(proc.pid)
        try:
            code = proc.wait(first + SHUTDOWN_TIMEOUT + SLACK - time.monotonic())
        except subprocess.TimeoutExpired:
            late = time.monotonic() - first
            proc.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
            time.sleep(0.5)
            return (
                f"seed {seed}: alive {late:.2f}s after the first of {len(burst.signals)} "
                f"signals: {log.read_text()[-3000:]}"
            )
        if code == 130 and len(burst.signals) == 1:
            return f"seed {seed}: one signal stopped it at once"
        if code not in (0, 130):
            return f"seed {seed}: exit {code}: {log.read_text()[-500:]}"
        return ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_bursts_of_signals_at_random_spacings_end_every_worker_loop_in_time(
    tmp_path: Path,
) -> None:
    base = int(os.environ.get("QUEUEY_TEST_SEED", time.time_ns() % 1_000_000))
    seeds = [base + i for i in range(TRIALS)]
    with ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(lambda s: _trial(s, tmp_path), seeds) if p]
    assert not problems, f"{len(problems)} of {TRIALS} trials (seeds from {base}): {problems[:5]}"
