"""A real Chromium driving the dashboard, served by uvicorn, on each backend that has
the dashboard's writes: the tests' RabbitMQ, and the embedded backend (a SQLite file).

The browser is found or unpacked by ``scripts/ensure-browser`` (Debian's chromium, or
the npm package @sparticuz/chromium, see /work/shared/BROWSER.md); when none can be
had, the tests fail (they never skip). Playwright drives it with ``--no-sandbox`` only:
never ``--disable-web-security``, which would hide the faults these tests look for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser
from playwright.sync_api import Page
from playwright.sync_api import sync_playwright

from queuey_core.backends.open import open_backend
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.results.setup import with_dead_letter_store
from queuey_core.settings import Settings
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import delete_queues

REPO = Path(__file__).resolve().parents[3]
#: The queues of these tests (the tests' virtual host is ours alone).
ALPHA = "dash.ui.alpha"
BETA = "dash.ui.beta"


def chromium_path() -> str:
    """Where Chromium is: found, unpacked or installed by scripts/ensure-browser."""
    given = os.environ.get("QUEUEY_TEST_CHROMIUM")
    if given and os.access(given, os.X_OK):
        return given
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-browser")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    path = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or not os.access(path, os.X_OK):
        pytest.fail(f"no Chromium for the browser tests: {done.stderr.strip()[-500:]}")
    return path


# Module scope, not session: Playwright's sync API runs an event loop on this thread
# until it is closed, and every later test that calls asyncio.run() would find it running.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (its own cookies) and page; script errors are kept."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        context.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    """A dashboard app served by uvicorn on a thread of this process."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-dashboard", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the dashboard did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)


def ui_settings(url: str = AMQP_URL, *, store: str | None = None, **dashboard: Any) -> Settings:
    """A broker (the tests' RabbitMQ by default; ``store``: a job store's URL), two
    queues, and a dashboard that refreshes twice a second."""
    settings, _ = load_settings(
        os.devnull,  # no file: not the queuey.toml of the working directory
        overrides={
            "broker": {"url": url},
            "queues": {ALPHA: {"prefetch": 4}, BETA: {"prefetch": 4}},
            "dashboard": {"refresh": "500ms", **dashboard},
            **({"results": {"url": store}} if store is not None else {}),
        },
    )
    return settings


#: The backends whose dashboard has every write (requeue, delete, purge, drain, fire,
#: cancel): RabbitMQ with its dead letters in ``<queue>.dlq`` or in a job store's table
#: (docs/dead-letters.md), and the embedded backend.
UI_BACKENDS = ["rabbitmq", "rabbitmq+sqlite", "sqlite"]


@dataclass
class Ui:
    """One backend under test: the settings a dashboard is made from, and a backend of
    the test's own on the same broker (what a producer or a worker elsewhere holds)."""

    kind: str
    settings: Settings
    backend: Any

    def open(self) -> Any:
        """Another backend on the same broker (a worker's: its own connection or file
        handle, its dead letters where the dashboard reads them), for the caller to
        close."""
        if self.kind.startswith("rabbitmq"):
            rabbit = RabbitMQBackend(AMQP_URL, publish_timeout=10)
            return with_dead_letter_store(rabbit, self.settings)
        return open_backend(self.settings.broker)


@pytest.fixture(params=UI_BACKENDS)
def ui(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ui]:
    """Each backend of :data:`UI_BACKENDS`, its two queues fresh and declared."""
    kind = request.param
    if kind.startswith("rabbitmq"):
        require_broker()
        delete_queues(ALPHA, BETA)
        store = f"sqlite:///{tmp_path}/store.db" if kind == "rabbitmq+sqlite" else None
        settings = ui_settings(store=store)
    else:
        settings = ui_settings(f"sqlite:///{tmp_path}/dashboard.db")
    ui = Ui(kind, settings, None)
    ui.backend = ui.open()
    try:
        queue_set = settings.queue_set()
        ui.backend.declare([queue_set[name] for name in queue_set])
        yield ui
    finally:
        ui.backend.close()


@pytest.fixture
def serve(ui: Ui) -> Iterator[Callable[..., Served]]:
    """Serve a dashboard on the backend under test (options to create_app)."""
    started: list[Served] = []

    def start(**options: Any) -> Served:
        settings = options.pop("settings", None) or ui.settings
        served = Served(create_app(settings, **options))
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.stop()
