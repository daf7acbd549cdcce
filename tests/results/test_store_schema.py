"""A store made by the previous version keeps working: opening it replaces its index on
every state by the partial one (states other than succeeded), and its records, attempts
and ids read and grow as before. And a search by a state other than succeeded uses that
index rather than a scan."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import open_job_store
from queuey_core.results import sql
from tests.results.conftest import drop_schema
from tests.results.conftest import pg_store_url

#: The previous version's tables and indexes, as it made them (``{serial}``: the
#: attempt id's type, ``{p}``: the schema prefix).
PREVIOUS = [
    """CREATE TABLE {p}queuey_jobs (job_id TEXT PRIMARY KEY, job_type TEXT NOT NULL,
        queue TEXT NOT NULL, state TEXT NOT NULL, result TEXT,
        error TEXT NOT NULL DEFAULT '', created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL)""",
    """CREATE TABLE {p}queuey_job_attempts (id {serial}, job_id TEXT NOT NULL,
        number INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
        started_at BIGINT NOT NULL, ended_at BIGINT, outcome TEXT,
        error TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX queuey_jobs_updated ON {p}queuey_jobs (updated_at)",
    "CREATE INDEX queuey_jobs_state ON {p}queuey_jobs (state, updated_at)",
    "CREATE INDEX queuey_job_attempts_job ON {p}queuey_job_attempts (job_id, id)",
]


def old_rows(job_id: uuid.UUID, t: int) -> list[str]:
    """A job the previous version recorded: dead-lettered after one attempt."""
    return [
        "INSERT INTO {p}queuey_jobs VALUES "
        f"('{job_id}', 'greet', 'default', 'dead_lettered', NULL, 'boom', {t}, {t + 2})",
        "INSERT INTO {p}queuey_job_attempts "
        "(job_id, number, host, pid, started_at, ended_at, outcome, error) VALUES "
        f"('{job_id}', 1, 'h', 1, {t + 1}, {t + 2}, 'dead_lettered', 'boom')",
    ]


Made = tuple[str, Callable[[], set[str]]]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def previous_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Made]:
    """The URL of a store the previous version made and wrote one job to, and what
    lists its indexes. The store is opened once (a queuey file, a schema), then its
    tables are made again as the previous version made them."""
    job_id, t = uuid.UUID(int=7), int(time.time() * 1000)
    url = f"sqlite:///{tmp_path / 'old.db'}" if request.param == "sqlite" else pg_store_url()
    open_job_store(url).close()
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE queuey_jobs")
            conn.execute("DROP TABLE queuey_job_attempts")
            for s in [*PREVIOUS, *old_rows(job_id, t)]:
                conn.execute(s.format(p="", serial="INTEGER PRIMARY KEY AUTOINCREMENT"))

        def sqlite_indexes() -> set[str]:
            with sqlite3.connect(path) as conn:
                rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
                return {r[0] for r in rows if r[0].startswith("queuey_job")}

        yield url, sqlite_indexes
        return
    schema, conninfo = url.split("schema=")[1], url.split("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as pg:
        pg.execute(f'DROP TABLE "{schema}".queuey_jobs, "{schema}".queuey_job_attempts'.encode())
        for s in [*PREVIOUS, *old_rows(job_id, t)]:
            pg.execute(s.format(p=f'"{schema}".', serial="BIGSERIAL PRIMARY KEY").encode())

    def pg_indexes() -> set[str]:
        with psycopg.connect(conninfo) as pg:
            rows = pg.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", [schema])
            return {r[0] for r in rows if r[0].startswith("queuey_job")}

    yield url, pg_indexes
    drop_schema(url)


def test_a_store_of_the_previous_version_is_brought_up_to_date(previous_store: Made) -> None:
    url, indexes = previous_store
    assert "queuey_jobs_state" in indexes()
    store = open_job_store(url)
    try:
        assert "queuey_jobs_state" not in indexes(), "the index on every state is gone"
        assert "queuey_jobs_unsucceeded" in indexes()
        old = store.get(uuid.UUID(int=7))
        assert old is not None, "the old record reads"
        assert old.state is JobState.DEAD_LETTERED
        assert [a.error for a in old.attempts] == ["boom"]
        t = int(time.time() * 1000)
        new = uuid.uuid4()
        store.write(
            [
                JobEvent(new, "greet", "default", JobState.RUNNING, t, t, 1, "h", 2),
                JobEvent(new, "greet", "default", JobState.RETRYING, t + 1, t, 1, "h", 2),
                JobEvent(new, "greet", "default", JobState.RUNNING, t + 2, t, 2, "h", 2),
                JobEvent(new, "greet", "default", JobState.DEAD_LETTERED, t + 3, t, 2, "h", 2),
            ]
        )
        record = store.get(new)
        assert record is not None
        assert [a.number for a in record.attempts] == [1, 2], "ids keep the attempts' order"
        dead = store.search(state=JobState.DEAD_LETTERED)
        assert [r.job_id for r in dead] == [new, uuid.UUID(int=7)]
    finally:
        store.close()
    store = open_job_store(url)  # opening it again changes nothing
    store.close()
    assert "queuey_jobs_unsucceeded" in indexes()


def plan_of_search(conn: sqlite3.Connection, state: JobState) -> str:
    """SQLite's plan for the records search runs for ``state``."""
    plans: list[str] = []

    def explain(text: str, args: Any) -> Any:
        if not plans:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {text}", args).fetchall()
            plans.append(" / ".join(str(r[-1]) for r in rows))
        return conn.execute(text, args)

    sql.search(
        explain,
        sql.Dialect(),
        state=state,
        job_type=None,
        queue=None,
        since=None,
        until=None,
        limit=50,
        offset=0,
    )
    return plans[0]


def test_a_search_by_an_unusual_state_uses_the_partial_index() -> None:
    conn = sqlite3.connect(":memory:")
    for statement in sql.ddl(sql.Dialect(), serial="INTEGER PRIMARY KEY"):
        conn.execute(statement)
    assert "queuey_jobs_unsucceeded" in plan_of_search(conn, JobState.DEAD_LETTERED)
    assert "queuey_jobs_unsucceeded" not in plan_of_search(conn, JobState.SUCCEEDED)
