"""The dashboard on the in-memory backend, asked through Starlette's TestClient."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from queuey_core.settings import Settings
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.support import ALPHA
from tests.support import BETA
from tests.support import GAMMA

#: A host the dashboard answers without a token (a loopback name).
LOCAL = "http://127.0.0.1"
#: A token long enough for [dashboard] token.
TOKEN = "a-token-of-more-than-16-chars"

_CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]+)">')


def dashboard_settings(**dashboard: Any) -> Settings:
    """Settings with the seed's three queues (as tests.support.seed_queues declares them)
    and ``dashboard`` as the [dashboard] table."""
    settings, _ = load_settings(
        os.devnull,  # no file: not the queuey.toml of the working directory
        overrides={
            "queues": {
                ALPHA: {"prefetch": 4, "max_priority": 10},
                BETA: {"prefetch": 2, "retry": {"max_attempts": 1}},
                GAMMA: {"prefetch": 1},
            },
            "dashboard": dashboard,
        },
    )
    return settings


@dataclass
class Board:
    """A dashboard app on a memory backend, with a client that keeps its cookies."""

    client: TestClient
    backend: MemoryBackend
    producer: Producer
    settings: Settings
    clock: ManualClock

    def csrf(self) -> str:
        """The CSRF token of this client's cookie, as a page carries it."""
        found = _CSRF.search(self.client.get("/").text)
        assert found, "the page carries no CSRF token"
        return found.group(1)

    def post(self, path: str, data: dict[str, Any] | None = None, **kw: Any) -> httpx2.Response:
        """A write as htmx sends it: the CSRF token in its header."""
        headers = {"X-CSRF-Token": self.csrf(), "HX-Request": "true", **kw.pop("headers", {})}
        answer: httpx2.Response = self.client.post(path, data=data or {}, headers=headers, **kw)
        return answer


def make_board(
    settings: Settings, *, declared: list[str] | None = None, **app_options: Any
) -> Iterator[Board]:
    """A Board over a fresh memory backend with ``settings``' queues (or ``declared``)
    declared; ``app_options`` go to create_app."""
    clock = ManualClock()
    backend = MemoryBackend(clock=clock)
    queue_set = settings.queue_set()
    chosen = [queue_set[name] for name in (declared or list(queue_set))]
    backend.declare(chosen)
    producer = Producer(backend, QueueSet(chosen), clock=clock)
    app_options.setdefault("backend", backend)
    app = create_app(settings, **app_options)
    with TestClient(app, base_url=LOCAL, follow_redirects=False) as client:
        yield Board(client, backend, producer, settings, clock)


@pytest.fixture
def board() -> Iterator[Board]:
    yield from make_board(dashboard_settings())
