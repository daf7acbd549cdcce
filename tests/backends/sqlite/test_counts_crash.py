"""The counts survive ``kill -9``: kept by triggers in the transaction of each write,
they roll back with a write a crash cut short, and equal a ``count(*)`` of the rows when
the file is opened again, before and after the dead workers' leases expire."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import counts

from .files import none_died
from .files import spawned
from .test_processes import entries
from .test_processes import runs_by
from .test_processes import wait

pytestmark = pytest.mark.processes


def assert_exact(backend: SqliteBackend) -> counts.Counts:
    """The counts of ``procs`` equal a ``count(*)`` of its rows, in one snapshot."""
    now = backend._clock.wall_ms()
    with backend._db.read() as conn:
        found = counts.counted(conn, now=now).get("procs", counts.Counts(0, 0, 0))
        assert found == counts.brute_force(conn, "procs", now=now)
        dead = conn.execute("SELECT count(*) FROM queuey_dead WHERE queue = 'procs'").fetchone()
        assert counts.dead_letters(conn, "procs") == dead[0]
    return found


def test_counts_stay_exact_after_every_process_on_the_file_is_killed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db?lease=2"
    ledger, ids = tmp_path / "ledger", tmp_path / "ids"
    ledger.touch()
    errors = [tmp_path / f"stderr-{i}" for i in range(3)]
    workers = [spawned("worker", url, str(ledger), errors=errors[i]) for i in range(2)]
    producer = spawned("produce", url, str(ids), "100000", errors=errors[2])
    everyone = [*workers, producer]

    def running(cond: Callable[[], bool]) -> Callable[[], bool]:
        # A process that died (it could not open the file?) fails the test with its words.
        def check() -> bool:
            none_died(everyone, errors)
            return cond()

        return check

    try:
        wait(
            running(lambda: all(runs_by(ledger).get(w.pid, 0) >= 3 for w in workers)),
            "both workers ran jobs",
        )
        wait(
            running(lambda: ids.exists() and len(ids.read_text().split()) >= 100),
            "100 jobs sent",
        )
        # Mid-run: the producer is between (or inside) its commits, the workers hold
        # leases, settle and claim.
        for p in everyone:
            os.kill(p.pid, signal.SIGKILL)
        for p in everyone:
            p.wait(timeout=30)
    finally:
        for p in everyone:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)

    ran = len(entries(ledger))
    backend = SqliteBackend(url)
    try:
        # Most often the dead workers' leases still run here (leased > 0); exact either way.
        first = assert_exact(backend)
        wait(lambda: assert_exact(backend).leased == 0, "the dead workers' leases expired")
        after = assert_exact(backend)
        assert after.ready + after.held == first.ready + first.leased + first.held
        assert after.ready >= len(ids.read_text().split()) - ran, "no sent job went missing"
    finally:
        backend.close()
