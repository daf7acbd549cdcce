"""The workflow page in a real Chromium, on the embedded backend (workflows in its file)
and on RabbitMQ with a SQLite job store: the graph drawn with each member's state, as a
worker moves them (the page follows by itself while anything can move, then stops), and
a hostile name shown as text."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from playwright.sync_api import Page
from playwright.sync_api import expect

from queuey_core import Fatal
from queuey_core import Handler
from queuey_core import Job
from queuey_core import JobContext
from queuey_core import Worker
from queuey_core.workflows import Workflow
from queuey_core.workflows import chain
from queuey_core.workflows import group
from queuey_core.workflows import workflow_hook_for
from queuey_core.workflows import workflows_for
from queuey_dashboard import create_app
from tests.conftest import require_broker
from tests.integration.broker import delete_queues
from tests.integration.dashboard.conftest import ALPHA
from tests.integration.dashboard.conftest import BETA
from tests.integration.dashboard.conftest import Served
from tests.integration.dashboard.conftest import Ui
from tests.integration.dashboard.conftest import ui_settings
from tests.support import start

pytestmark = [pytest.mark.integration, pytest.mark.browser]

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


class Step(Job):
    NAME: ClassVar[str] = "dash.step"
    QUEUE: ClassVar[str] = ALPHA
    fail: bool = False


#: Held shut until the page has drawn the workflow running: then the failing step goes
#: on, and the page must see it fail with nobody reloading it.
GATE = threading.Event()


def run_step(job: Step, ctx: JobContext) -> None:
    if job.fail:
        GATE.wait(60)
        raise Fatal("this step fails")


@pytest.fixture(params=["sqlite", "rabbitmq+sqlite"])
def stored_ui(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ui]:
    """A backend whose workflows live in a store: the file itself, or a SQLite job store."""
    if request.param == "sqlite":
        settings = ui_settings(f"sqlite:///{tmp_path}/dashboard.db")
    else:
        require_broker()
        delete_queues(ALPHA, BETA)
        settings = ui_settings(store=f"sqlite:///{tmp_path}/store.db")
    ui = Ui(request.param, settings, None)
    ui.backend = ui.open()
    try:
        yield ui
    finally:
        ui.backend.close()


def test_the_workflow_page_draws_each_member_in_its_state(stored_ui: Ui, page: Page) -> None:
    ui = stored_ui
    flows = workflows_for(ui.settings, ui.backend)
    hook = workflow_hook_for(ui.settings, ui.backend)
    assert hook is not None
    worker = Worker(ui.backend, ui.settings.queue_set(), [Handler(Step, run_step)], hooks=[hook])
    GATE.clear()
    running = start(worker, None)
    served = Served(create_app(ui.settings))
    try:
        shape = chain(Step(), group(Step(), Step(fail=True)), Step())
        wid = flows.start(Workflow(shape, name=HOSTILE))
        page.goto(f"{served.url}/workflows")
        page.fill("input[name=workflow_id]", str(wid))
        page.click("form.filters button")
        expect(page.locator("dd.workflow-state")).to_have_text("running")
        expect(page.locator("div#workflow")).to_have_attribute("data-live", "yes")
        GATE.set()
        expect(page.locator("dd.workflow-state")).to_have_text("failed", timeout=30_000)
        expect(page.locator("div#workflow")).to_have_attribute("data-live", "no")
        nodes = page.locator("svg.workflow-graph g.wf-node")
        expect(nodes).to_have_count(4)
        expect(page.locator("svg.workflow-graph line.wf-edge")).to_have_count(4)
        states = [nodes.nth(i).get_attribute("data-state") for i in range(4)]
        assert states == ["succeeded", "succeeded", "failed", "halted"]
        expect(page.locator("h1")).to_contain_text("<script>")
        assert page.evaluate("window.__pwned") is None, "the name ran no script"
    finally:
        GATE.set()
        served.stop()
        running.stop()
        flows.store.close()
