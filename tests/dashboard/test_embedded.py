"""The dashboard's writes on the embedded backend, opened from the settings as
``queuey dashboard`` opens it: every button works there as on the other backends."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from queuey_core import Handler
from queuey_core import Producer
from queuey_core import Worker
from queuey_core.backends.capabilities import QueueCounts
from queuey_core.backends.open import open_backend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.results import open_job_store
from queuey_core.schedules import Every
from queuey_core.schedules import Schedule
from queuey_core.settings import Settings
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.dashboard.conftest import LOCAL
from tests.support import ALPHA
from tests.support import Greet
from tests.support import dead_letter_one
from tests.support import start
from tests.support import wait_for


@dataclass
class FileBoard:
    """A dashboard over a SQLite file, and a backend of its own on the same file (as a
    producer or a worker in another process would hold)."""

    client: TestClient
    other: SqliteBackend
    settings: Settings

    def post(self, path: str, data: dict[str, Any] | None = None) -> httpx2.Response:
        """A write as htmx sends it: the CSRF token of the page in its header."""
        token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', self.client.get("/").text)
        assert token, "the page carries no CSRF token"
        headers = {"X-CSRF-Token": token.group(1), "HX-Request": "true"}
        answer: httpx2.Response = self.client.post(path, data=data or {}, headers=headers)
        return answer

    def kill(self, count: int) -> list[str]:
        """``count`` Greets enqueued and dead-lettered; their job ids."""
        queue_set = self.settings.queue_set()
        producer = Producer(self.other, queue_set)
        ids = []
        for n in range(count):
            ids.append(str(producer.enqueue(Greet(name=f"n{n}"))))
            dead_letter_one(self.other, queue_set[ALPHA], "boom")
        return ids


def counts(backend: SqliteBackend) -> QueueCounts:
    """What ``ALPHA`` holds."""
    found = backend.inspect([ALPHA]).queues[ALPHA]
    assert found is not None, "the queue is declared"
    return found


def file_board(
    tmp_path: Path, unique: dict[str, Any] | None = None, **app_options: Any
) -> Iterator[FileBoard]:
    """A FileBoard on a fresh file with the queue ``ALPHA`` declared (and ``unique``'s
    ``[unique.*]`` tables)."""
    settings, _ = load_settings(
        os.devnull,
        overrides={
            "broker": {"url": f"sqlite:///{tmp_path}/queuey.db"},
            "queues": {ALPHA: {"prefetch": 4, "max_priority": 10}},
            "unique": unique or {},
        },
    )
    other = open_backend(settings.broker)
    assert isinstance(other, SqliteBackend)
    try:
        other.declare(list(settings.queue_set().values()))
        app = create_app(settings, **app_options)
        with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
            yield FileBoard(client, other, settings)
    finally:
        other.close()


@pytest.fixture
def board(tmp_path: Path) -> Iterator[FileBoard]:
    yield from file_board(tmp_path)


def test_requeue_works_on_a_dashboard_that_opened_the_file_itself(board: FileBoard) -> None:
    first, second = board.kill(2)

    answer = board.post(f"/queues/{ALPHA}/dead-letters/requeue", {"handle": first})

    assert answer.status_code == 200, answer.text
    assert "requeued 1 of test.alpha" in answer.text
    assert [d.handle for d in board.other.iter_dead_letters(ALPHA)] == [second]
    assert counts(board.other).ready == 1


def test_delete_and_purge_work_on_the_file(board: FileBoard) -> None:
    ids = board.kill(3)

    deleted = board.post(f"/queues/{ALPHA}/dead-letters/delete", {"handle": ids[0]})
    purged = board.post(f"/queues/{ALPHA}/dead-letters/purge", {"confirm": ALPHA})

    assert deleted.status_code == 200, deleted.text
    assert "deleted 1" in deleted.text
    assert purged.status_code == 200, purged.text
    assert "purged 2" in purged.text
    assert list(board.other.iter_dead_letters(ALPHA)) == []


def test_fire_now_enqueues_on_the_file(tmp_path: Path) -> None:
    schedule = Schedule("greet-often", Greet(name="tick"), Every(60))
    for board in file_board(tmp_path, schedules=[schedule]):
        answer = board.post("/schedules/greet-often/fire")

        assert answer.status_code == 200, answer.text
        assert "fired greet-often" in answer.text
        assert counts(board.other).ready == 1


def test_fire_now_of_a_job_that_holds_its_key_is_a_409_naming_the_holder(
    tmp_path: Path,
) -> None:
    schedule = Schedule("greet-often", Greet(name="tick"), Every(60))
    for board in file_board(tmp_path, {Greet.NAME: {"key": ["name"]}}, schedules=[schedule]):
        first = board.post("/schedules/greet-often/fire")
        again = board.post("/schedules/greet-often/fire")

        assert first.status_code == 200, first.text
        assert again.status_code == 409, again.text
        assert "not fired, a duplicate of job" in again.text
        assert counts(board.other).ready == 1


def test_drain_stops_a_worker_on_the_file(board: FileBoard) -> None:
    worker = Worker(
        board.other,
        board.settings.queue_set(),
        [Handler(Greet, lambda job, ctx: None)],
        consume=[ALPHA],
    )
    running = start(worker, None)
    try:
        wait_for(lambda: counts(board.other).consumers == 1, timeout=30)
        # The worker answers the control table a moment after it consumes: on a loaded
        # machine the page can come first, so wait until it lists the worker.
        wait_for(lambda: len(listed_workers(board)) == 1, timeout=30)
        ids = listed_workers(board)
        assert len(ids) == 1, ids

        answer = board.post(f"/workers/{ids[0]}/drain")

        assert answer.status_code == 200, answer.text
        assert "draining" in answer.text
        wait_for(running.is_finished, timeout=30)
    finally:
        running.stop()


def listed_workers(board: FileBoard) -> list[str]:
    """The ids of the workers the dashboard's /workers page lists."""
    return re.findall(r'<tr data-worker="([^"]+)">', board.client.get("/workers").text)


def test_a_key_given_at_enqueue_finds_the_job_and_its_dead_letter(board: FileBoard) -> None:
    url = board.settings.broker.urls()[0]
    store = open_job_store(url)
    producer = Producer(board.other, board.settings.queue_set(), job_store=store, record_now=True)
    job_id = producer.enqueue(Greet(name="ada"), job_id="order-9")
    store.close()

    for path in ("/jobs/order-9", "/jobs?job_id=order-9"):
        page = board.client.get(path)
        assert page.status_code == 200, (path, page.text)
        assert str(job_id) in page.text
    assert board.client.get("/jobs/%20").status_code == 400
    dead_letter_one(board.other, board.settings.queue_set()[ALPHA], "boom")
    letter = board.client.get(f"/queues/{ALPHA}/dead-letter", params={"handle": "order-9"})
    assert letter.status_code == 200, letter.text
    assert str(job_id) in letter.text


def test_cancel_from_the_job_page_marks_a_waiting_job_cancelled(board: FileBoard) -> None:
    store = open_job_store(board.settings.broker.urls()[0])
    producer = Producer(board.other, board.settings.queue_set(), job_store=store, record_now=True)
    job_id = producer.enqueue(Greet(name="ada"), job_id="order-5")
    store.close()
    assert 'class="danger cancel"' in board.client.get("/jobs/order-5").text

    answer = board.post("/jobs/order-5/cancel")

    assert answer.status_code == 200, answer.text
    assert f"job {job_id}: cancelled" in answer.text
    page = board.client.get(f"/jobs/{job_id}").text
    assert 'class="state">cancelled' in page
    assert 'class="danger cancel"' not in page, "a finished job has no Cancel button"
    again = board.post(f"/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert "already finished: not cancelled" in again.text
    assert board.post("/jobs/%20/cancel").status_code == 400
