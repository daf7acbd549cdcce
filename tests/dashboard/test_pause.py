"""The overview's Pause and Resume buttons, and their POSTs: the same calls as
``queuey queues pause|resume``, behind the CSRF and read-only checks of every write."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from queuey_core.flow.pause import paused_queues
from tests.dashboard.conftest import Board
from tests.dashboard.conftest import dashboard_settings
from tests.dashboard.conftest import make_board
from tests.support import ALPHA
from tests.support import BETA


def row(board: Board, queue: str) -> str:
    """The overview's row of ``queue``, as HTML."""
    page = board.client.get("/fragments/queues").text
    found = re.search(rf'<tr data-queue="{re.escape(queue)}"[^>]*>.*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def test_pause_from_the_overview_pauses_the_queue_and_its_row_offers_resume(
    board: Board,
) -> None:
    assert 'class="pause"' in row(board, ALPHA)
    assert "Pause</button>" in row(board, ALPHA)

    answer = board.post(f"/queues/{ALPHA}/pause")

    assert answer.status_code == 200, answer.text
    assert f"paused {ALPHA}" in answer.text
    assert answer.headers["HX-Trigger"] == "queuey-refresh"
    assert paused_queues(board.backend, [ALPHA, BETA]) == {ALPHA}
    paused_row = row(board, ALPHA)
    assert 'class="paused"' in paused_row
    assert "Resume</button>" in paused_row
    assert "Pause</button>" in row(board, BETA), "only that queue"

    again = board.post(f"/queues/{ALPHA}/pause")
    assert again.status_code == 200
    assert f"{ALPHA} was paused already" in again.text

    resumed = board.post(f"/queues/{ALPHA}/resume")
    assert resumed.status_code == 200
    assert f"resumed {ALPHA}" in resumed.text
    assert paused_queues(board.backend, [ALPHA]) == frozenset()


def test_a_form_without_javascript_is_sent_back_to_the_overview(board: Board) -> None:
    token = board.csrf()
    answer = board.client.post(
        f"/queues/{ALPHA}/pause", data={"csrf_token": token}, follow_redirects=False
    )
    assert answer.status_code == 303
    assert answer.headers["location"].endswith("/")
    assert paused_queues(board.backend, [ALPHA]) == {ALPHA}


@pytest.mark.parametrize("queue", ["nope", "queuey.unroutable", "%3Cscript%3E"])
def test_a_queue_that_is_not_configured_is_a_404_and_pauses_nothing(
    board: Board, queue: str
) -> None:
    answer = board.post(f"/queues/{queue}/pause")
    assert answer.status_code == 404
    assert "Traceback" not in answer.text
    assert paused_queues(board.backend, [ALPHA, BETA, "nope"]) == frozenset()


@pytest.fixture
def read_only() -> Iterator[Board]:
    yield from make_board(dashboard_settings(), read_only=True)


def test_a_read_only_dashboard_shows_the_state_without_buttons_and_refuses_the_write(
    read_only: Board,
) -> None:
    read_only.backend.set_paused(ALPHA, True)
    paused_row = row(read_only, ALPHA)
    assert "paused" in paused_row
    assert "<button" not in paused_row

    answer = read_only.post(f"/queues/{ALPHA}/resume")

    assert answer.status_code == 403
    assert paused_queues(read_only.backend, [ALPHA]) == {ALPHA}
