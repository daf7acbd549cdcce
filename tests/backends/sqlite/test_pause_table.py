"""A file of schema version 3 (before paused queues) opens, gets the empty table of
paused queues, and keeps every job; on a file, a paused queue's jobs are claimed by no
process, whatever its workers have read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from queuey_core import QueueConfig
from queuey_core.backends.base import ConsumerEnded
from queuey_core.backends.base import Delivery
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import schema
from queuey_core.clock import ManualClock
from tests.support import wait_for

from .files import job_envelope
from .files import value_in_file


def version_3_file(path: Path) -> None:
    """A file as queuey wrote it at schema version 3, holding two jobs on ``plain``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # Every table but version 4's (the pauses' and every other part's of that version).
        for statement in schema.SCHEMA:
            if statement not in schema.UPGRADES[4]:
                conn.execute(statement)
        conn.execute("INSERT INTO queuey_schema (version) VALUES (3)")
        conn.execute(
            "INSERT INTO queuey_queues (name, max_priority, kind) VALUES ('plain', NULL, 'classic')"
        )
        conn.executemany(
            "INSERT INTO queuey_messages (queue, priority, available_at, body) VALUES (?, 0, 0, ?)",
            [("plain", job_envelope("plain", i=i).encode()) for i in range(2)],
        )
    finally:
        conn.close()


def test_a_version_3_file_gets_the_table_of_paused_queues_and_keeps_its_jobs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    version_3_file(path)
    url = f"sqlite:///{path}"

    backend = SqliteBackend(url, clock=ManualClock())
    try:
        assert backend.paused_queues(["plain"]) == frozenset()
        assert backend.set_paused("plain", True)
        assert backend.paused_queues(["plain", "other"]) == {"plain"}
    finally:
        backend.close()

    assert value_in_file(url, "SELECT version FROM queuey_schema") == schema.SCHEMA_VERSION == 4
    assert value_in_file(url, "SELECT count(*) FROM queuey_paused") == 1
    assert value_in_file(url, "SELECT count(*) FROM queuey_messages") == 2


def test_no_process_claims_a_paused_queue_s_jobs_on_a_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    clock = ManualClock()
    config = QueueConfig("plain")
    operator = SqliteBackend(url, clock=clock)
    consumer = SqliteBackend(url, clock=clock)
    got: list[Delivery] = []

    def sink(item: Delivery | ConsumerEnded) -> None:
        if not isinstance(item, ConsumerEnded):
            got.append(item)

    try:
        operator.declare([config])
        operator.set_paused("plain", True)
        operator.publish(job_envelope("plain", i=1))
        # A consumer that never looked at the pause (no worker's watch): the claim
        # itself skips the queue.
        sub = consumer.consume(config, sink)
        for _ in range(20):
            consumer._claim_all(clock.wall_ms())
        assert got == []
        assert value_in_file(url, "SELECT count(*) FROM queuey_messages") == 1

        operator.set_paused("plain", False)
        consumer._claim_all(clock.wall_ms())  # or the backend's own thread, first
        wait_for(lambda: len(got) == 1, None)
        got[0].ack()
        sub.cancel()
    finally:
        consumer.close()
        operator.close()
