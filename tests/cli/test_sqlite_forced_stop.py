"""A worker on a SQLite file stopped at once (a second signal): the jobs it held are
given back to the file before it exits, not left leased for the rest of their lease,
and its last line says so (a file has no connection whose end gives them back)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_sqlite_commands import Project
from tests.cli.test_sqlite_commands import started  # noqa: F401 (a fixture)
from tests.cli.test_sqlite_commands import wait

pytestmark = pytest.mark.processes

#: Far longer than the test: a job left leased would still be leased at its end.
LEASE = 600


def leased(db: Path) -> int:
    """Jobs of the file that some worker holds."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        sql = "SELECT count(*) FROM queuey_messages WHERE lease_owner IS NOT NULL"
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def test_a_second_signal_gives_the_jobs_in_hand_back_to_the_file(
    tmp_path: Path,
    started: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],  # noqa: F811
) -> None:
    project = Project(tmp_path)
    project.env["QUEUEY_BROKER__URL"] = f"sqlite:///{project.db}?lease={LEASE}"
    for _ in range(2):
        project.run("enqueue", "nap", '{"seconds": 3600}')
    worker = started(project.start("worker"))
    wait(lambda: leased(project.db) == 1, "the worker holds a nap (beta's prefetch is 1)")
    worker.send_signal(signal.SIGINT)
    # The second only once the first was taken: two sent at once may arrive as one.
    assert worker.stderr is not None
    while "draining" not in (line := worker.stderr.readline()):
        assert line, "the worker ended before it said it was draining"
    worker.send_signal(signal.SIGINT)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 130, err
    assert leased(project.db) == 0, "the nap in hand was given back, not left leased"
    assert project.rows() == 2, "no job is lost"
    forced = [line for line in err.splitlines() if "stopping at once" in line]
    assert len(forced) == 1, err
    said = "second signal (SIGINT): stopping at once; 1 unsettled deliveries were given back"
    assert f"{said} to the file" in forced[0], forced[0]
