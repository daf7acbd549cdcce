"""What the embedded backend's unit tests share: a backend with its queues declared, a
job's envelope, the rows a file holds (read through a connection of the test's own),
a connection to wrap, and the processes of procs.py."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import parse_url


def declared(url: str, *queues: QueueConfig) -> Iterator[SqliteBackend]:
    """A backend on ``url`` with ``queues`` declared, closed after (a fixture's body)."""
    made = SqliteBackend(url)
    made.declare(list(queues))
    yield made
    made.close()


def job_envelope(queue: str, **payload: Any) -> Envelope:
    """A ``t.job`` for ``queue`` carrying ``payload``."""
    return Envelope(
        job_id=uuid.uuid4(),
        job_type="t.job",
        queue=queue,
        enqueued_at=int(time.time() * 1000),
        payload=payload,
    )


def value_in_file(url: str, sql: str) -> int:
    """The one integer ``sql`` selects from the file of ``url``, read through a
    connection of the test's own (what another process would see)."""
    conn = sqlite3.connect(parse_url(url).path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def rows_in_file(url: str) -> int:
    """Jobs in the file of ``url`` (ready, held or leased)."""
    return value_in_file(url, "SELECT count(*) FROM queuey_messages")


class WrappedConnection:
    """The backend's connection, every attribute passed through; a test overrides
    ``execute`` to make one statement misbehave."""

    def __init__(self, inner: sqlite3.Connection) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        return self._inner.execute(sql, *args)


def spawned(*args: str, errors: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m tests.backends.sqlite.procs ARGS`` (a worker or a producer on a file,
    see procs.py), run from the repository's root, its output discarded but for its
    stderr, written to ``errors`` when given (what a process that died said)."""
    with open(errors or os.devnull, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.backends.sqlite.procs", *args],
            cwd=Path(__file__).resolve().parents[3],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def none_died(procs: list[subprocess.Popen[bytes]], errors: list[Path]) -> None:
    """Fail at once, with what it said, when a process of ``procs`` has ended (each
    wrote its stderr to the ``errors`` file of the same place)."""
    for proc, err in zip(procs, errors, strict=True):
        if proc.poll() is not None:
            said = err.read_text(errors="replace")[-3000:] if err.exists() else ""
            raise AssertionError(f"process {proc.args!r} exited {proc.returncode}: {said}")
