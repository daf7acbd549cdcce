"""A SQLite job store says what went wrong as the embedded backend does: one line
naming the file and what to do, not SQLite's own few words."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from queuey_core.errors import JobStoreError
from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import open_job_store
from queuey_core.results.sqlite_store import SqliteJobStore


@pytest.mark.parametrize("call", ["write", "expire_now"])
def test_a_locked_store_says_who_holds_it_and_what_to_raise(tmp_path: Path, call: str) -> None:
    path = tmp_path / "store.db"
    store = open_job_store(f"sqlite:///{path}?busy_timeout=0.1")
    assert isinstance(store, SqliteJobStore)
    now = int(time.time() * 1000)
    event = JobEvent(uuid.uuid4(), "greet", "alpha", JobState.QUEUED, now, now)
    act = {"write": lambda: store.write([event]), "expire_now": store.expire_now}[call]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(JobStoreError) as caught:
            act()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(caught.value) == (
        f"job store {path}: locked by another process for more than 0.1s "
        "(raise ?busy_timeout= in the URL, or find what holds it)"
    )
    act()
    store.close()
