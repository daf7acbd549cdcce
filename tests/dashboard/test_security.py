"""What keeps the dashboard safe: loopback or a token, CSRF on writes, read-only, no
secret on a page."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from starlette.routing import Route

import queuey_dashboard
from queuey_core import ConfigError
from queuey_dashboard.app import ROUTES
from queuey_dashboard.security import check_address
from queuey_dashboard.security import is_loopback
from tests.dashboard.conftest import TOKEN
from tests.dashboard.conftest import Board
from tests.dashboard.conftest import dashboard_settings
from tests.dashboard.conftest import make_board
from tests.dashboard.test_pages import kill
from tests.support import ALPHA

#: Every write, with a form that would change something if it were let through.
WRITES = [
    (f"/queues/{ALPHA}/dead-letters/requeue", {"handle": "JOB"}),
    (f"/queues/{ALPHA}/dead-letters/delete", {"handle": "JOB"}),
    (f"/queues/{ALPHA}/dead-letters/purge", {"confirm": ALPHA}),
    ("/workers/WORKER/drain", {}),
    ("/schedules/NAME/fire", {}),
    ("/jobs/JOBID/cancel", {}),
    (f"/queues/{ALPHA}/pause", {}),
    (f"/queues/{ALPHA}/resume", {}),
]


def test_every_write_route_is_listed_here() -> None:
    posts = sorted(r.path for r in ROUTES if isinstance(r, Route) and "POST" in (r.methods or ()))
    assert posts == sorted(
        path.replace(ALPHA, "{queue}")
        .replace("WORKER", "{worker_id}")
        .replace("NAME", "{name}")
        .replace("JOBID", "{job_id}")
        for path, _ in WRITES
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"])
def test_loopback_addresses_need_no_token(host: str) -> None:
    assert is_loopback(host)
    check_address(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "dashboard.example.com"])
def test_any_other_address_is_refused_without_a_token(host: str) -> None:
    with pytest.raises(ConfigError, match="without a token") as refused:
        check_address(host, None)
    assert "QUEUEY_DASHBOARD__TOKEN" in str(refused.value)
    check_address(host, TOKEN)


def test_a_short_token_is_refused_by_the_settings() -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        dashboard_settings(token="short")


def dead_and_unchanged(board: Board) -> list[str]:
    """Two dead letters, and the check that nothing moved them."""
    return kill(board, ["one", "two"])


@pytest.mark.parametrize(("path", "form"), WRITES)
def test_a_write_without_the_csrf_token_is_refused_and_changes_nothing(
    board: Board, path: str, form: dict[str, str]
) -> None:
    ids = dead_and_unchanged(board)
    form = {k: ids[0] if v == "JOB" else v for k, v in form.items()}

    missing = board.client.post(path, data=form)
    wrong = board.client.post(path, data=form, headers={"X-CSRF-Token": "0" * 64})
    in_form_wrong = board.client.post(path, data={**form, "csrf_token": "f" * 64})

    for answer in (missing, wrong, in_form_wrong):
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert [d.handle for d in board.backend.dead_letters(ALPHA)] == ids
    assert board.backend.pending(ALPHA) == 0
    assert board.backend.paused_queues([ALPHA]) == frozenset()


def test_a_csrf_token_of_another_browser_is_refused(board: Board) -> None:
    ids = dead_and_unchanged(board)
    token = board.csrf()
    board.client.cookies.clear()  # another browser: another cookie

    answer = board.client.post(
        f"/queues/{ALPHA}/dead-letters/requeue",
        data={"handle": ids[0]},
        headers={"X-CSRF-Token": token},
    )

    assert answer.status_code == 403
    assert len(board.backend.dead_letters(ALPHA)) == 2


def test_a_write_from_another_site_is_refused_even_with_the_token(board: Board) -> None:
    ids = dead_and_unchanged(board)
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        answer = board.post(
            f"/queues/{ALPHA}/dead-letters/requeue", {"handle": ids[0]}, headers=headers
        )
        assert answer.status_code == 403
    assert len(board.backend.dead_letters(ALPHA)) == 2


def test_read_only_hides_every_button_and_refuses_every_write() -> None:
    for board in make_board(dashboard_settings(), read_only=True):
        ids = kill(board, ["one"])
        pages = [
            board.client.get(path).text
            for path in ("/", "/workers", f"/queues/{ALPHA}/dead-letters", "/schedules")
        ]
        pages.append(
            board.client.get(f"/queues/{ALPHA}/dead-letter", params={"handle": ids[0]}).text
        )
        for page in pages:
            assert "<button class=" not in page
            assert 'method="post"' not in page
            assert "read-only" in page
        for path, form in WRITES:
            answer = board.post(path, {k: ids[0] if v == "JOB" else v for k, v in form.items()})
            assert answer.status_code == 403, path
            assert "read-only" in answer.text
        assert len(board.backend.dead_letters(ALPHA)) == 1


def test_without_a_token_only_loopback_names_are_answered(board: Board) -> None:
    assert board.client.get("/", headers={"Host": "localhost:8180"}).status_code == 200
    assert board.client.get("/", headers={"Host": "[::1]:8180"}).status_code == 200
    rebound = board.client.get("/", headers={"Host": "attacker.example:8180"})
    assert rebound.status_code == 403


def test_with_a_token_every_request_must_carry_it() -> None:
    for board in make_board(dashboard_settings(token=TOKEN)):
        bare = board.client.get("/")
        assert bare.status_code == 401
        assert bare.headers["WWW-Authenticate"].startswith("Basic")
        assert TOKEN not in bare.text
        basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
        for auth in (f"Bearer {TOKEN}", f"Basic {basic}"):
            page = board.client.get("/", headers={"Authorization": auth, "Host": "q.example"})
            assert page.status_code == 200, auth
            assert TOKEN not in page.text
        for wrong in ("Bearer nope", "Basic !!!", f"Token {TOKEN}", "Basic " + "x" * 10):
            assert board.client.get("/", headers={"Authorization": wrong}).status_code == 401


def test_pages_show_no_password_and_carry_security_headers() -> None:
    settings = dashboard_settings()
    secret = "s3cret-pw"
    settings.broker.url = type(settings.broker.url)(f"amqp://ops:{secret}@rabbit:5672/prod")
    for board in make_board(settings):
        page = board.client.get("/")
        assert secret not in page.text
        assert "amqp://ops:***@rabbit:5672/prod" in page.text
        csp = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert page.headers["X-Frame-Options"] == "DENY"
        cookie = page.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie


def test_no_template_marks_anything_safe() -> None:
    templates = Path(queuey_dashboard.__file__).parent / "templates"
    for path in templates.glob("*.html"):
        text = path.read_text()
        assert not re.search(r"\|\s*safe\b", text), path.name
        assert "autoescape false" not in text, path.name
