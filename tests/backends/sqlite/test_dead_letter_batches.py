"""A requeue of all on the embedded backend moves :data:`BATCH` rows per transaction:
cut short, it has moved whole batches only, says how many, and leaves the rest in order."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from queuey_core import BackendError
from queuey_core import DeadLetterMoveError
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import dead
from queuey_core.backends.sqlite.dead_tools import BATCH
from queuey_core.backends.sqlite.writes import Writer


def test_a_requeue_cut_between_batches_moved_whole_batches_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "q.db"
    backend = SqliteBackend(f"sqlite:///{db}")
    backend.declare([QueueConfig("alpha")])
    ids = [str(uuid.uuid4()) for _ in range(BATCH * 2 + 500)]
    with sqlite3.connect(db) as conn:
        for job_id in ids:
            body = Envelope(
                job_id=job_id,
                job_type="t",
                queue="alpha",
                enqueued_at=int(time.time() * 1000),
                payload={},
            ).encode()
            dead.add(conn, dead.Dead("alpha", job_id, "r", 1, 1, "alpha", True, body))
    real = Writer.requeue_dead
    calls = 0

    def second_fails(self: Writer, *args: object, **kwargs: object) -> tuple[int, int | None]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise BackendError("database is locked")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Writer, "requeue_dead", second_fails)
    seen: list[int] = []
    with pytest.raises(DeadLetterMoveError) as cut:
        backend.requeue_dead_letters("alpha", progress=seen.append)
    assert (cut.value.moved, cut.value.in_doubt) == (BATCH, 0)
    assert seen == [BATCH]
    assert [d.handle for d in backend.iter_dead_letters("alpha")] == ids[BATCH:]
    assert backend.counts(["alpha"])["alpha"][0].ready == BATCH, "moved once, not twice"
    monkeypatch.setattr(Writer, "requeue_dead", real)
    assert backend.requeue_dead_letters("alpha") == len(ids) - BATCH
    assert backend.dead_letter_page("alpha").total == 0
    backend.close()
