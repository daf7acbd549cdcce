"""The overview's Pause and Resume buttons in a real Chromium, on a real RabbitMQ and on
the embedded backend, with a live worker: a click pauses the queue (the worker stops
taking its jobs, a job enqueued meanwhile waits), the row says so and offers Resume, and
a click on Resume lets the job run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar

import pytest
from playwright.sync_api import Page
from playwright.sync_api import expect

from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Producer
from queuey_core import Worker
from queuey_core.flow.pause import paused_queues
from queuey_core.flow.pause import resume_queue
from tests.integration.dashboard.conftest import ALPHA
from tests.integration.dashboard.conftest import BETA
from tests.integration.dashboard.conftest import Served
from tests.integration.dashboard.conftest import Ui
from tests.support import start
from tests.support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]


class Held(Job):
    NAME: ClassVar[str] = "dash.pause.held"
    QUEUE: ClassVar[str] = ALPHA
    n: int


class Beside(Job):
    NAME: ClassVar[str] = "dash.pause.beside"
    QUEUE: ClassVar[str] = BETA
    n: int


def test_pause_and_resume_from_the_overview_hold_and_release_a_queue_s_jobs(
    serve: Callable[..., Served], page: Page, ui: Ui
) -> None:
    lock = threading.Lock()
    ran: list[str] = []

    def record(job: Held | Beside, ctx: JobContext) -> None:
        with lock:
            ran.append(f"{job.NAME} {job.n}")

    def did(what: str) -> bool:
        with lock:
            return what in ran

    worker_backend = ui.open()
    worker = Worker(
        worker_backend,
        ui.settings.queue_set(),
        [Handler(Held, record), Handler(Beside, record)],
    )
    running = start(worker, None)
    producer = Producer(ui.backend, ui.settings.queue_set())
    try:
        wait_for(lambda: ui.backend.inspect([ALPHA]).queues[ALPHA].consumers == 1, timeout=30)
        served = serve()
        page.goto(served.url + "/")
        alpha = page.locator(f'tr[data-queue="{ALPHA}"]')
        page.on("dialog", lambda dialog: dialog.accept())

        alpha.locator("button.pause").click()

        expect(page.locator("#notice")).to_contain_text(f"paused {ALPHA}")
        expect(alpha.locator("td.pause")).to_contain_text("paused")
        expect(alpha.locator("button.resume")).to_have_count(1)
        expect(page.locator(f'tr[data-queue="{BETA}"] button.pause')).to_have_count(1)
        assert paused_queues(ui.backend, [ALPHA, BETA]) == {ALPHA}
        wait_for(lambda: ui.backend.inspect([ALPHA]).queues[ALPHA].consumers == 0, timeout=30)

        producer.enqueue(Held(n=1))
        producer.enqueue(Beside(n=1))
        wait_for(lambda: did(f"{Beside.NAME} 1"), timeout=30)
        assert not did(f"{Held.NAME} 1"), "a paused queue's job ran"
        expect(alpha.locator("td.ready")).to_have_text("1")

        alpha.locator("button.resume").click()

        expect(page.locator("#notice")).to_contain_text(f"resumed {ALPHA}")
        wait_for(lambda: did(f"{Held.NAME} 1"), timeout=30)
        expect(alpha.locator("button.pause")).to_have_count(1)
        expect(alpha.locator("td.ready")).to_have_text("0")
        assert running.error is None
    finally:
        resume_queue(ui.backend, ALPHA)  # a pause outlives the test on a broker
        worker.handle.shutdown()
        running.join()
        worker_backend.close()
