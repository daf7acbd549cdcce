"""The dashboard in a real Chromium, on a real RabbitMQ and on the embedded backend (a
SQLite file): counts that move without a reload, every write from the page (requeue,
delete, purge, drain, fire now), a hostile reason shown as text, and writes refused
without their CSRF token or on a read-only dashboard.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest
from playwright.sync_api import Page
from playwright.sync_api import expect

from queuey_core import Handler
from queuey_core import Job
from queuey_core import Producer
from queuey_core import QueueConfig
from queuey_core import Worker
from queuey_core.results import open_job_store
from queuey_core.results.setup import results_url
from queuey_core.schedules import Every
from queuey_core.schedules import Schedule
from tests.integration.dashboard.conftest import ALPHA
from tests.integration.dashboard.conftest import BETA
from tests.integration.dashboard.conftest import REPO
from tests.integration.dashboard.conftest import Served
from tests.integration.dashboard.conftest import Ui
from tests.support import dead_letter_one
from tests.support import start
from tests.support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


class Later(Job):
    NAME: ClassVar[str] = "dash.later"
    QUEUE: ClassVar[str] = BETA
    n: int


#: Workers the screenshot started, stopped at the end of the test.
TAKERS: list[Any] = []


class Hello(Job):
    NAME: ClassVar[str] = "dash.hello"
    QUEUE: ClassVar[str] = ALPHA
    name: str


@pytest.fixture
def producer(ui: Ui) -> Producer:
    return Producer(ui.backend, ui.settings.queue_set())


def dead(ui: Ui, producer: Producer, reasons: list[str]) -> list[str]:
    """One Hello per reason, each dead-lettered with it, as a worker would; their ids."""
    queue = ui.settings.queue_set()[ALPHA]
    ids = []
    for n, reason in enumerate(reasons):
        ids.append(str(producer.enqueue(Hello(name=f"n{n}"))))
        dead_letter_one(ui.backend, queue, reason)
    return ids


def counts(ui: Ui) -> tuple[int, int]:
    """What ALPHA holds: ready, and dead letters (wherever the backend keeps them: in
    ``<queue>.dlq``, in a job store's table, in the file)."""
    found = ui.backend.inspect([ALPHA]).queues[ALPHA]
    assert found is not None, "the queue is declared"
    return found.ready, ui.backend.dead_letter_page(ALPHA, limit=1).total


def row(page: Page, queue: str) -> str:
    return f'tr[data-queue="{queue}"]'


def test_the_overview_count_changes_after_an_enqueue_without_a_reload(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    served = serve()
    page.goto(served.url + "/")
    ready = page.locator(f"{row(page, ALPHA)} td.ready")
    expect(ready).to_have_text("0")
    page.evaluate("window.__same_page = true")

    for n in range(3):
        producer.enqueue(Hello(name=f"x{n}"))

    expect(ready).to_have_text("3")
    assert page.evaluate("window.__same_page") is True, "updated in place, not reloaded"
    if os.environ.get("QUEUEY_TEST_SCREENSHOT") == "1":
        try:
            shoot(page, ui, producer)
        finally:
            for running in TAKERS:
                running.stop()


def shoot(page: Page, ui: Ui, producer: Producer) -> None:
    """docs/images/dashboard.png: the overview after 20 s of jobs coming in (alpha
    filling up, beta filled then taken by a worker), with some dead letters."""
    dead(ui, producer, ["fatal: no such user", "max attempts (3) reached"])
    beta = ui.settings.queue_set()[BETA]
    for second in range(20):
        for n in range(second % 5 + 1):
            producer.enqueue(Hello(name=f"y{second}.{n}"))
        if second < 10:
            producer.enqueue_many([Later(n=n) for n in range(4)])
        elif second == 10:
            take(ui, beta, producer)
        page.wait_for_timeout(1000)
    page.set_viewport_size({"width": 1280, "height": 320})
    page.screenshot(path=str(REPO / "docs" / "images" / "dashboard.png"), full_page=False)


def take(ui: Ui, queue: QueueConfig, producer: Producer) -> None:
    """A worker that takes what ``queue`` holds, a few a second, on a thread."""
    worker = Worker(ui.backend, ui.settings.queue_set(), [Handler(Later, slowly)], consume=[BETA])
    running = start(worker, None)
    TAKERS.append(running)


def slowly(job: Later, ctx: object) -> None:
    time.sleep(0.25)


def test_requeue_of_a_dead_letter_from_the_page_moves_it_and_the_count_follows(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    first, second = dead(ui, producer, ["boom: first", "boom: second"])
    served = serve()
    page.goto(served.url + "/")
    expect(page.locator(f"{row(page, ALPHA)} td.dead")).to_have_text("2")
    page.click(f"{row(page, ALPHA)} td.dead a")
    expect(page.locator("span.total")).to_have_text("2")

    page.click(f'tr[data-handle="{first}"] button.requeue')

    expect(page.locator("#notice")).to_contain_text(f"requeued 1 of {ALPHA}")
    expect(page.locator("span.total")).to_have_text("1")
    expect(page.locator(f'tr[data-handle="{first}"]')).to_have_count(0)
    expect(page.locator(f'tr[data-handle="{second}"]')).to_have_count(1)
    page.goto(served.url + "/")
    expect(page.locator(f"{row(page, ALPHA)} td.ready")).to_have_text("1")
    expect(page.locator(f"{row(page, ALPHA)} td.dead")).to_have_text("1")
    assert counts(ui) == (1, 1)


def test_the_drain_button_stops_a_live_worker(
    serve: Callable[..., Served], page: Page, ui: Ui
) -> None:
    worker_backend = ui.open()
    worker = Worker(
        worker_backend,
        ui.settings.queue_set(),
        [Handler(Hello, lambda job, ctx: None)],
        consume=[ALPHA],
    )
    running = start(worker, None)
    try:
        served = serve()
        page.goto(served.url + "/workers")
        drain = page.locator("tr[data-worker] button.drain")
        expect(drain).to_have_count(1)
        expect(page.locator("tr[data-worker]")).to_contain_text(ALPHA)
        page.on("dialog", lambda dialog: dialog.accept())

        drain.click()

        expect(page.locator("#notice")).to_contain_text("draining")
        wait_for(running.is_finished, timeout=30)
        assert running.error is None
        expect(page.locator("tr[data-worker]")).to_have_count(0)
        expect(page.locator("#workers")).to_contain_text("No worker answered")
    finally:
        worker.handle.shutdown()
        running.join()
        worker_backend.close()


def test_a_hostile_reason_renders_as_text_and_runs_no_script(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    [job_id] = dead(ui, producer, [HOSTILE])
    served = serve()
    scripts_seen: list[str] = []
    page.on("console", lambda message: scripts_seen.append(message.text))

    page.goto(f"{served.url}/queues/{ALPHA}/dead-letters")
    expect(page.locator(f'tr[data-handle="{job_id}"] td.reason')).to_have_text(HOSTILE)
    page.goto(f"{served.url}/queues/{ALPHA}/dead-letter?handle={job_id}")
    expect(page.locator("dd.reason")).to_have_text(HOSTILE)

    assert page.evaluate("window.__pwned") is None, "the reason ran as script"
    assert page.locator("main img").count() == 0, "the reason became markup"


def test_a_write_without_the_csrf_token_or_on_a_read_only_dashboard_is_refused(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    [job_id] = dead(ui, producer, ["boom"])
    served = serve()
    page.goto(f"{served.url}/queues/{ALPHA}/dead-letters")
    expect(page.locator("button.requeue")).to_have_count(1)
    requeue = f"{served.url}/queues/{ALPHA}/dead-letters/requeue"

    # From the page itself (its cookie sent), but without the token: refused.
    status = page.evaluate(
        """async ([url, id]) => (await fetch(url, {method: "POST",
             headers: {"Content-Type": "application/x-www-form-urlencoded"},
             body: "handle=" + encodeURIComponent(id)})).status""",
        [requeue, job_id],
    )
    assert status == 403
    refused = page.request.post(requeue, form={"handle": job_id})
    assert refused.status == 403
    assert "CSRF" in refused.text()

    read_only = serve(read_only=True)
    page.goto(f"{read_only.url}/queues/{ALPHA}/dead-letters")
    expect(page.locator(f'tr[data-handle="{job_id}"]')).to_have_count(1)
    expect(page.locator("button")).to_have_count(1)  # the filter form's, nothing else
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert token is not None
    status = page.evaluate(
        """async ([url, id, token]) => (await fetch(url, {method: "POST",
             headers: {"Content-Type": "application/x-www-form-urlencoded",
                       "X-CSRF-Token": token},
             body: "handle=" + encodeURIComponent(id)})).status""",
        [f"{read_only.url}/queues/{ALPHA}/dead-letters/requeue", job_id, token],
    )
    assert status == 403

    assert counts(ui) == (0, 1), "nothing moved"
    assert re.fullmatch(r"[0-9a-f]{64}", token)


def test_the_page_runs_its_scripts_under_its_content_security_policy(
    serve: Callable[..., Served], page: Page, ui: Ui
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    served = serve()
    page.goto(served.url + "/")
    assert page.evaluate("typeof window.htmx") == "object", "htmx loaded from /static"
    page.wait_for_timeout(1200)  # two refreshes
    assert errors == [], errors
    assert Path(REPO / "queuey_dashboard" / "static" / "htmx.LICENSE").is_file()


def test_a_selection_of_dead_letters_is_deleted_from_the_page(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    ids = dead(ui, producer, ["a", "b", "c"])
    served = serve()
    page.goto(f"{served.url}/queues/{ALPHA}/dead-letters")
    page.on("dialog", lambda dialog: dialog.accept())
    for job_id in ids[:2]:
        page.check(f'tr[data-handle="{job_id}"] input[type=checkbox]')

    page.click("button.delete-selected")

    expect(page.locator("#notice")).to_contain_text(f"deleted 2 of {ALPHA}")
    expect(page.locator("span.total")).to_have_text("1")
    expect(page.locator(f'tr[data-handle="{ids[2]}"]')).to_have_count(1)


def test_a_purge_from_the_page_needs_the_queue_name_typed(
    serve: Callable[..., Served], page: Page, ui: Ui, producer: Producer
) -> None:
    dead(ui, producer, ["a", "b", "c"])
    served = serve()
    page.goto(f"{served.url}/queues/{ALPHA}/dead-letters/purge")
    expect(page.locator("main")).to_contain_text("all 3 of them")

    page.fill('input[name="confirm"]', "not the name")
    page.click("button.purge")
    expect(page.locator("main")).to_contain_text("not confirmed")
    assert counts(ui) == (0, 3), "nothing purged"

    page.goto(f"{served.url}/queues/{ALPHA}/dead-letters/purge")
    page.fill('input[name="confirm"]', ALPHA)
    page.click("button.purge")

    expect(page).to_have_url(f"{served.url}/queues/{ALPHA}/dead-letters")
    expect(page.locator("span.total")).to_have_text("0")
    assert counts(ui) == (0, 0)


def test_fire_now_from_the_page_enqueues_one_job(
    serve: Callable[..., Served], page: Page, ui: Ui
) -> None:
    schedule = Schedule("hello-often", Hello(name="tick"), Every(3600))
    served = serve(schedules=[schedule])
    page.goto(f"{served.url}/schedules")
    expect(page.locator('tr[data-schedule="hello-often"]')).to_contain_text("every")

    page.click('tr[data-schedule="hello-often"] button.fire')

    expect(page.locator("#notice")).to_contain_text("fired hello-often: job ")
    assert counts(ui)[0] == 1


def test_cancel_from_the_job_page_marks_the_waiting_job_cancelled(
    serve: Callable[..., Served], page: Page, ui: Ui, tmp_path: Path
) -> None:
    # The configured store (on a file, the broker's own file), else one given.
    store = open_job_store(results_url(ui.settings) or f"sqlite:///{tmp_path}/jobs.db")
    try:
        producer = Producer(ui.backend, ui.settings.queue_set(), job_store=store, record_now=True)
        job_id = producer.enqueue(Hello(name="never"), job_id="order-77")
        served = serve(job_store=store)
        page.goto(f"{served.url}/jobs/order-77")
        expect(page.locator("dd.state")).to_have_text("queued")
        page.on("dialog", lambda dialog: dialog.accept())

        page.click("button.cancel")

        expect(page.locator("#notice")).to_contain_text(f"job {job_id}: cancelled")
        page.reload()
        expect(page.locator("dd.state")).to_have_text("cancelled")
        expect(page.locator("button.cancel")).to_have_count(0)
    finally:
        store.close()
