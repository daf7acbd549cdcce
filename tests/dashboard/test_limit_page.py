"""The dashboard's limits page: each limit and key in use, read where the workers keep
it, keys escaped, and one line (not an error page) where the state cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.testclient import TestClient

from queuey_core.flow.limit_setup import limit_book
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_setup import state_url
from queuey_core.flow.limit_state import Claim
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.dashboard.conftest import LOCAL
from tests.support import ALPHA

LIMITS = {
    "mutex": {"concurrency": 1, "key": "account", "jobs": ["test.greet"]},
    "api": {"rate": "20/s", "burst": 5, "queues": [ALPHA]},
}


def test_the_limits_page_shows_each_key_in_use_escaped(tmp_path: Path) -> None:
    settings, _ = load_settings(
        os.devnull,
        overrides={
            "broker": {"url": f"sqlite:///{tmp_path}/queuey.db"},
            "queues": {ALPHA: {"prefetch": 4}},
            "limits": LIMITS,
        },
    )
    book = limit_book(settings)
    state = limit_state_for(state_url(settings), book)
    try:
        for job in ("j1", "j2"):  # one runs, one is parked behind it
            state.acquire(
                job,
                (Claim(book.by_name["mutex"], "<b>acme</b>"),),
                holder="w",
                now_ms=0,
                queue=ALPHA,
                priority=0,
                enqueued_at=0,
                body=lambda: b"{}",
            )
    finally:
        state.close()
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        page = client.get("/limits")
        fragment = client.get("/fragments/limits")
    assert page.status_code == 200, page.text
    assert "&lt;b&gt;acme&lt;/b&gt;" in page.text, "a key from a payload is escaped"
    assert "<b>acme</b>" not in page.text
    row = page.text.split('data-limit="mutex"', 1)[1].split("</tr>", 1)[0]
    assert "<td>1</td>" in row, "one running, one parked"
    assert 'data-limit="api"' in page.text
    assert "20 per 1s (burst 5)" in page.text
    assert fragment.status_code == 200
    assert 'data-limit="mutex"' in fragment.text


def test_limits_on_rabbitmq_without_a_store_are_one_line_on_the_page(tmp_path: Path) -> None:
    settings, _ = load_settings(
        os.devnull,
        overrides={
            "broker": {"url": "amqp://guest:guest@127.0.0.1:1/%2F"},
            "queues": {ALPHA: {"prefetch": 4}},
            "limits": LIMITS,
        },
    )
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        page = client.get("/limits")
    assert page.status_code == 200
    assert "need a place to keep their state" in page.text


def test_the_overview_shows_per_queue_the_jobs_limits_hold_and_links_to_them(
    tmp_path: Path,
) -> None:
    settings, _ = load_settings(
        os.devnull,
        overrides={
            "broker": {"url": f"sqlite:///{tmp_path}/queuey.db"},
            "queues": {ALPHA: {"prefetch": 4}, "other": {"prefetch": 1}},
            "limits": LIMITS,
        },
    )
    book = limit_book(settings)
    state = limit_state_for(state_url(settings), book)
    try:
        for job in ("j1", "j2", "j3"):  # one runs, two are parked behind it
            state.acquire(
                job,
                (Claim(book.by_name["mutex"], "acme"),),
                holder="w",
                now_ms=0,
                queue=ALPHA,
                priority=0,
                enqueued_at=0,
                body=lambda: b"{}",
            )
    finally:
        state.close()
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        page = client.get("/")
        fragment = client.get("/fragments/queues")
    assert page.status_code == 200, page.text
    assert "held by limits" in page.text, "a column where limits are declared"
    alpha = page.text.split(f'data-queue="{ALPHA}"', 1)[1].split("</tr>", 1)[0]
    held = alpha.split('class="num held-by-limits">', 1)[1].split("</td>", 1)[0]
    assert 'href="/limits"' in held, "the count links to the limits page"
    assert ">2</a>" in held, "two jobs of alpha parked behind the mutex"
    assert "api, mutex" in held, "the limits that bind alpha are named"
    other = page.text.split('data-queue="other"', 1)[1].split("</tr>", 1)[0]
    assert 'held-by-limits">\u2013</td>' in other, "no limit binds that queue"
    assert fragment.status_code == 200
    assert "held-by-limits" in fragment.text, "the refreshed table keeps the column"
