"""A file written before the counts tables (schema version 2) opens, gets its counts
built once, in one transaction, and keeps every job and dead letter it held."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import counts
from queuey_core.backends.sqlite import schema
from queuey_core.backends.sqlite.database import SqliteError
from queuey_core.clock import ManualClock

from .files import job_envelope
from .files import value_in_file

NOW = ManualClock().wall_ms()


def version_2_file(path: Path) -> None:
    """A file as queuey wrote it at schema version 2, holding jobs ready, held and
    leased on two queues, and dead letters."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # Version 2's tables: those before version 3's counts (later versions add theirs
        # after them).
        for statement in schema.SCHEMA[: schema.SCHEMA.index(counts.SCHEMA[0])]:
            conn.execute(statement)
        conn.execute("INSERT INTO queuey_schema (version) VALUES (2)")
        conn.executemany(
            "INSERT INTO queuey_queues (name, max_priority, kind) VALUES (?, ?, 'classic')",
            [("plain", None), ("urgent", 3)],
        )
        rows = []
        for i in range(300):
            queue, priority = ("urgent", i % 4) if i % 3 else ("plain", 0)
            at = NOW + 60_000 if i % 10 == 0 else NOW - 1  # every tenth held a minute
            body = job_envelope(queue, i=i).encode()
            rows.append((queue, priority, at, body))
        conn.executemany(
            "INSERT INTO queuey_messages (queue, priority, available_at, body) VALUES (?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            "UPDATE queuey_messages SET lease_owner = 'gone', lease_expires = ? "
            "WHERE id IN (2, 3, 5)",
            (NOW + 60_000,),
        )
        conn.executemany(
            "INSERT INTO queuey_dead (queue, handle, reason, dead_at, attempt, "
            "delivered_from, decodable, body) VALUES (?, 'h', 'failed', 0, 1, ?, 1, x'7b7d')",
            [("urgent", "urgent")] * 7 + [("plain", "plain")] * 2,
        )
    finally:
        conn.close()


def test_a_version_2_file_gets_its_counts_built_once_and_keeps_every_job(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    version_2_file(path)
    url = f"sqlite:///{path}"
    before = value_in_file(url, "SELECT sum(id * length(body)) FROM queuey_messages")

    backend = SqliteBackend(url, clock=ManualClock())
    try:
        found = backend.counts(["plain", "urgent"])
        with backend._db.read() as conn:
            for name in ("plain", "urgent"):
                assert found[name][0] == counts.brute_force(conn, name, now=NOW), name
        assert (found["urgent"][2], found["plain"][2]) == (7, 2), "the dead letters, counted"
        assert sum(c[0].leased for c in found.values()) == 3
    finally:
        backend.close()

    assert value_in_file(url, "SELECT version FROM queuey_schema") == schema.SCHEMA_VERSION
    assert value_in_file(url, "SELECT count(*) FROM queuey_messages") == 300
    assert value_in_file(url, "SELECT sum(id * length(body)) FROM queuey_messages") == before, (
        "every job is there as it was"
    )


def test_a_migration_that_fails_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade is one transaction: a failure in its last statement leaves a
    version-2 file with every row, no counts table, and a later open upgrades it."""
    path = tmp_path / "old.db"
    version_2_file(path)
    url = f"sqlite:///{path}"
    broken = (*schema.UPGRADES[3], "INSERT INTO no_such_table VALUES (1)")
    monkeypatch.setitem(schema.UPGRADES, 3, broken)

    with pytest.raises(SqliteError, match="no_such_table"):
        SqliteBackend(url)

    assert value_in_file(url, "SELECT version FROM queuey_schema") == 2
    assert value_in_file(url, "SELECT count(*) FROM queuey_messages") == 300
    assert value_in_file(url, "SELECT count(*) FROM queuey_dead") == 9
    tables = "SELECT count(*) FROM sqlite_master WHERE name LIKE 'queuey_%counts'"
    assert value_in_file(url, tables) == 0

    monkeypatch.undo()
    backend = SqliteBackend(url, clock=ManualClock())
    try:
        ready = backend.counts(["plain"])["plain"][0].ready
        assert ready == 100 - 10  # one job in ten held
    finally:
        backend.close()
