"""Bad files behind a ``sqlite://`` broker URL, through the installed ``queuey`` script:
one line on stderr naming the file and what to do, a non-zero exit, never a traceback,
and never a lost job (what a command said was enqueued is in the file).

A read-only file and a full disk need a file system of their own: a tiny tmpfs,
mounted when this runs as root (else the read-only case uses file permissions and the
full-disk case is the library test with ``max_page_count``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite.schema import SCHEMA_VERSION
from tests.cli.test_one_line_errors import PAYLOAD
from tests.cli.test_one_line_errors import queuey

pytestmark = pytest.mark.processes

CONFIG = """
[queues.alpha]
prefetch = 4
max_priority = 10

[queues.beta]
prefetch = 1
"""


def run(cwd: Path, db: Path | str, *args: str, query: str = "") -> subprocess.CompletedProcess[str]:
    (cwd / "queuey.toml").write_text(CONFIG)
    return queuey(cwd, *args, env={"QUEUEY_BROKER__URL": f"sqlite:///{db}{query}"})


def one_line(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"not one line: {result.stderr!r}"
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def in_file(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM queuey_messages").fetchone()[0])
    finally:
        conn.close()


def test_a_path_in_a_missing_directory(tmp_path: Path) -> None:
    db = tmp_path / "nope" / "q.db"
    one_line(run(tmp_path, db, "enqueue", "greet", PAYLOAD), 1, str(db), "does not exist")
    assert not (tmp_path / "nope").exists(), "no directory is made for a typo"


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    db.write_bytes(b"hello, I am a text file\n" * 200)
    one_line(run(tmp_path, db, "queues"), 1, str(db), "is not a SQLite database")
    assert db.read_bytes().startswith(b"hello"), "the file is left as it was"


def test_a_database_of_another_program(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    one_line(run(tmp_path, db, "dlq", "list"), 1, "database of another program", "users")


def test_a_file_of_a_newer_queuey_is_refused_saying_so(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    SqliteBackend(f"sqlite:///{db}").close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE queuey_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    one_line(run(tmp_path, db, "enqueue", "greet", PAYLOAD), 1, "newer queuey", "upgrade queuey")


def test_a_locked_database_past_its_timeout_is_not_enqueued_and_loses_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "q.db"
    assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = run(tmp_path, db, "enqueue", "greet", PAYLOAD, query="?busy_timeout=0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    one_line(result, 1, "locked by another process", "busy_timeout")
    assert in_file(db) == 1, "the first job is there, the refused one is not"
    assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
    assert in_file(db) == 2


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_read_only_file(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        db = tmp_path / "q.db"
        SqliteBackend(f"sqlite:///{db}").close()
        db.chmod(0o444)
        tmp_path.chmod(0o555)
        try:
            one_line(run_elsewhere(tmp_path, db), 1, "read-only")
        finally:
            tmp_path.chmod(0o755)
        return
    with tmpfs(tmp_path / "ro", "1m") as mount:
        db = mount / "q.db"
        SqliteBackend(f"sqlite:///{db}").close()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        one_line(run_elsewhere(tmp_path, db), 1, str(db), "read-only")


def run_elsewhere(tmp_path: Path, db: Path) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return run(work, db, "enqueue", "greet", PAYLOAD)


def test_a_full_disk_refuses_the_job_it_cannot_hold_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a tmpfs needs root; the library test covers max_page_count")
    # An empty file is 100 KB (schema version 3), its WAL most of the rest: room for two
    # jobs, and the disk is full at the third.
    with tmpfs(tmp_path / "small", "192k") as mount:
        db = mount / "q.db"
        said_yes = 0
        for _ in range(200):
            result = run(tmp_path, db, "enqueue", "greet", PAYLOAD)
            if result.returncode != 0:
                one_line(result, 1, str(db), "disk is full")
                break
            said_yes += 1
        else:
            pytest.fail("the disk never filled")
        assert said_yes > 0
        assert in_file(db) == said_yes, "every job said enqueued is in the file, no other"
