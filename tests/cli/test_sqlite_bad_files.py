"""Bad files behind a ``sqlite://`` broker URL, through the installed ``queuey`` script:
one line on stderr naming the file and what to do, a non-zero exit, never a traceback,
never a lost job (what a command said was enqueued is in the file), and not a byte
written to a file that is not queuey's (its directory is compared before and after).

A read-only file and a full disk need a file system of their own: a tiny tmpfs,
mounted when this runs as root (else the read-only case uses file permissions and the
full-disk cases are skipped, the library test with ``max_page_count`` standing in;
under CI, which runs as root, they fail instead).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
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


def another_programs_database(db: Path, *, journal: str) -> None:
    """A database as another application leaves it: its tables, a row, its journal."""
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()


def directory(where: Path) -> dict[str, bytes]:
    """Every file of ``where`` and its bytes (a -wal or -shm file left behind shows)."""
    return {p.name: p.read_bytes() for p in sorted(where.iterdir()) if p.is_file()}


FOREIGN_COMMANDS = [
    ("queues",),
    ("enqueue", "greet", PAYLOAD),
    ("worker", "--burst"),
    ("dlq", "list"),
    ("unique", "list"),
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A directory for the file alone (the commands run in ``tmp_path``)."""
    made = tmp_path / "data"
    made.mkdir()
    return made


def refused_unchanged(
    cwd: Path, db: Path, command: tuple[str, ...], *words: str, index: bool = True
) -> None:
    """``command`` on ``db`` says one line naming it and ``words``, and leaves every
    byte of its directory as it was (but the WAL's index, the -shm file, unless
    ``index``: it is rebuilt by whoever reads the WAL next)."""
    where = db.parent
    before = directory(where)
    one_line(run(cwd, db, *command), 1, str(db), *words)
    after = directory(where)
    if not index:
        before.pop(f"{db.name}-shm", None)
        after.pop(f"{db.name}-shm", None)
    assert after == before, "not a byte of a file that is not queuey's is written"


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("command", FOREIGN_COMMANDS, ids=lambda c: c[0])
def test_a_database_of_another_program_is_refused_and_not_changed(
    tmp_path: Path, data: Path, journal: str, command: tuple[str, ...]
) -> None:
    db = data / "app.db"
    another_programs_database(db, journal=journal)
    refused_unchanged(tmp_path, db, command, "database of another program", "users")


#: Another program that died in the middle of its work: WAL frames never checkpointed
#: into its file, or a rollback journal (a "hot" one) of a transaction never finished.
DIED_WRITING = {
    "wal": """
import os, sqlite3
conn = sqlite3.connect("app.db", isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
conn.execute("INSERT INTO users (name) VALUES ('ada')")
os._exit(0)
""",
    "journal": """
import os, sqlite3
conn = sqlite3.connect("app.db", isolation_level=None)
conn.execute("PRAGMA cache_size=1")
conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
conn.execute("BEGIN")
for _ in range(500):
    conn.execute("INSERT INTO users (name) VALUES (randomblob(500))")
os._exit(0)
""",
}


@pytest.mark.parametrize("left", sorted(DIED_WRITING))
@pytest.mark.parametrize("command", FOREIGN_COMMANDS, ids=lambda c: c[0])
def test_another_programs_database_it_died_writing_is_refused_and_not_changed(
    tmp_path: Path, data: Path, left: str, command: tuple[str, ...]
) -> None:
    # A writable connection that only reads would still write here: on closing, it
    # checkpoints the WAL into the file; on opening, it rolls the hot journal back.
    subprocess.run([sys.executable, "-c", DIED_WRITING[left]], cwd=data, check=True)
    db = data / "app.db"
    assert (data / f"app.db-{left}").stat().st_size > 0, "it died with its work unfinished"
    refused_unchanged(tmp_path, db, command, "another program", index=False)


@pytest.mark.parametrize("command", FOREIGN_COMMANDS, ids=lambda c: c[0])
def test_a_file_that_is_not_a_database_is_refused_and_not_changed(
    tmp_path: Path, data: Path, command: tuple[str, ...]
) -> None:
    db = data / "notes.db"
    db.write_bytes(b"hello, I am a text file\n" * 200)
    refused_unchanged(tmp_path, db, command, "is not a SQLite database")


def test_a_job_store_on_another_programs_database_is_refused_and_not_changed(
    tmp_path: Path, data: Path
) -> None:
    store = data / "app.db"
    another_programs_database(store, journal="delete")
    before = directory(data)
    (tmp_path / "queuey.toml").write_text(CONFIG)
    result = queuey(
        tmp_path,
        "jobs",
        env={
            "QUEUEY_BROKER__URL": f"sqlite:///{tmp_path / 'q.db'}",
            "QUEUEY_RESULTS__URL": f"sqlite:///{store}",
        },
    )
    one_line(result, 1, str(store), "database of another program", "users")
    assert directory(data) == before


def test_a_file_of_a_newer_queuey_is_refused_saying_so(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    SqliteBackend(f"sqlite:///{db}").close()
    conn = sqlite3.connect(db)
    conn.execute("UPDATE queuey_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    one_line(run(tmp_path, db, "enqueue", "greet", PAYLOAD), 1, "newer queuey", "upgrade queuey")


#: The commands that write to a queuey file (declaring, enqueueing): what a lock refuses.
WRITING_COMMANDS = [
    ("enqueue", "greet", PAYLOAD),
    ("worker", "--burst"),
    ("unique", "release", "order-1", "--force"),
]
#: Commands that only read: in WAL, a lock holder still lets them read.
READING_COMMANDS = [("queues",), ("unique", "list")]


@pytest.mark.parametrize("owner", ["queuey", "another program"])
def test_a_locked_file_past_its_timeout_is_refused_unchanged_and_loses_nothing(
    tmp_path: Path, data: Path, owner: str
) -> None:
    db = data / "q.db"
    if owner == "queuey":
        assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
        commands = WRITING_COMMANDS  # in WAL, a lock holder still lets readers read
    else:
        another_programs_database(db, journal="delete")
        commands = FOREIGN_COMMANDS
    # Read before the lock and after: closing any descriptor of the file in this
    # process would let go of the holder's POSIX lock.
    before = directory(data)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        results = [run(tmp_path, db, *c, query="?busy_timeout=0.2") for c in commands]
        reads = [
            run(tmp_path, db, *c, query="?busy_timeout=0.2")
            for c in (READING_COMMANDS if owner == "queuey" else [])
        ]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for result in results:
        one_line(result, 1, str(db), "locked by another process", "busy_timeout")
    assert directory(data) == before, "nothing was written while it was locked"
    if owner == "queuey":
        for read in reads:
            # Not even a warning: a command that held no lease has nothing to give back.
            assert read.returncode == 0, read.stderr
            assert "warning" not in read.stderr, read.stderr
        assert in_file(db) == 1, "the first job is there, the refused one is not"
        assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
        assert in_file(db) == 2


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A file system of ``size`` of its own at ``where``, unmounted after. Mounting
    needs root: elsewhere the test is skipped, but under CI (root, Linux) it fails."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(mount: Path) -> Path:
    """Fill the file system of ``mount`` to its last byte; the filler file, to remove."""
    filler = mount / "filler"
    with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"x" * 512)
    assert os.statvfs(mount).f_bavail == 0, "the disk is full"
    return filler


def test_a_read_only_file_is_refused_unchanged_and_loses_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        db = tmp_path / "q.db"
        assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
        db.chmod(0o444)
        tmp_path.chmod(0o555)
        try:
            before = directory(tmp_path)
            one_line(run_elsewhere(tmp_path, db), 1, str(db), "read-only")
            assert directory(tmp_path) == before
        finally:
            tmp_path.chmod(0o755)
        assert in_file(db) == 1
        return
    with tmpfs(tmp_path / "ro", "1m") as mount:
        db = mount / "q.db"
        assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        before = directory(mount)
        for command in FOREIGN_COMMANDS:
            one_line(run_elsewhere(tmp_path, db, *command), 1, str(db), "read-only")
        assert directory(mount) == before
        # Writable again to read it: a WAL file whose -shm is gone opens only so.
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        assert in_file(db) == 1, "the job enqueued before is still there"


def run_elsewhere(tmp_path: Path, db: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` (an enqueue if none) run from a directory beside the file's."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return run(work, db, *(command or ("enqueue", "greet", PAYLOAD)))


def test_a_full_disk_refuses_the_job_it_cannot_hold_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    # An empty file is 204 KB (schema version 4: the pauses', unique keys', limits' and
    # workflows' tables), its WAL most of the rest: room for a few jobs, then the disk
    # is full.
    with tmpfs(tmp_path / "small", "384k") as mount:
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


def test_a_full_disk_with_the_file_closed_says_so_and_loses_nothing(tmp_path: Path) -> None:
    # With no process holding the file, opening it creates its -wal and -shm files,
    # which a full disk refuses with SQLite's "disk I/O error".
    with tmpfs(tmp_path / "small", "1m") as mount:
        db = mount / "q.db"
        assert run(tmp_path, db, "enqueue", "greet", PAYLOAD).returncode == 0
        assert directory(mount) == {"q.db": db.read_bytes()}, "no process holds the file"
        filler = fill(mount)
        before = db.read_bytes()
        for command in FOREIGN_COMMANDS:
            one_line(run(tmp_path, db, *command), 1, str(db), "disk is full")
        assert db.read_bytes() == before, "nothing was written"
        filler.unlink()
        assert in_file(db) == 1, "the job enqueued before is still there"
        assert run(tmp_path, db, "worker", "--burst").returncode == 0
        assert in_file(db) == 0, "and runs once the disk has room"
