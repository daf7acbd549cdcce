"""Stopping a worker process that runs ``async def`` jobs (docs/operations.md#stopping):
the first signal drains them, as it drains threads; the second cancels them, so their
``finally`` blocks run before the process exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from queuey_core.process.exits import Exit

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_signal_cancels_running_coroutines_and_their_finally_blocks_run() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.process.async_child"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        started = {proc.stdout.readline().split()[-1] for _ in range(2)}
        assert started == {"a", "b"}, "both coroutines run"
        os.kill(proc.pid, signal.SIGTERM)  # drains: these jobs never end on their own
        assert proc.stdout.readline().strip() == "draining"
        os.kill(proc.pid, signal.SIGTERM)  # stops at once: cancelled
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == Exit.FORCED, err
    assert sorted(line for line in out.splitlines() if line.startswith("finally")) == [
        "finally a",
        "finally b",
    ], f"every cancelled coroutine's finally ran; stderr:\n{err}"
