"""The dashboard's pages and writes on the in-memory backend."""

from __future__ import annotations

import html
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import Handler
from queuey_core import Worker
from queuey_core.backends.open import open_backend
from queuey_core.results import JobEvent
from queuey_core.results import JobState
from queuey_core.results import open_job_store
from queuey_core.schedules import Every
from queuey_core.schedules import Schedule
from queuey_core.settings import load_settings
from queuey_dashboard import create_app
from tests.dashboard.conftest import LOCAL
from tests.dashboard.conftest import Board
from tests.dashboard.conftest import dashboard_settings
from tests.dashboard.conftest import make_board
from tests.support import ALPHA
from tests.support import BETA
from tests.support import Greet
from tests.support import dead_letter_one
from tests.support import start
from tests.support import wait_for


def cell(html: str, queue: str, column: str) -> str:
    """The text of ``column`` (a class) in the overview row of ``queue``."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row, f"no row for {queue}"
    found = re.search(rf'<td class="num {column}">(?:<a [^>]*>)?([^<]*)', row.group(1))
    assert found, f"no {column} cell for {queue}"
    return found.group(1).strip()


def kill(board: Board, reasons: list[str], *, job_type: type[Greet] = Greet) -> list[str]:
    """Enqueue one Greet per reason and dead-letter each with it; their job ids."""
    ids = []
    queue = board.settings.queue_set()[ALPHA]
    for n, reason in enumerate(reasons):
        ids.append(str(board.producer.enqueue(job_type(name=f"n{n}"))))
        dead_letter_one(board.backend, queue, reason)
    return ids


def no_trace(text: str) -> None:
    assert "Traceback" not in text, text[:500]
    assert 'File "' not in text, text[:500]


def test_overview_shows_each_queue_and_its_count_follows_an_enqueue(board: Board) -> None:
    page = board.client.get("/")
    assert page.status_code == 200
    assert cell(page.text, ALPHA, "ready") == "0"
    assert cell(page.text, BETA, "ready") == "0"

    board.producer.enqueue(Greet(name="ada"))
    board.producer.enqueue(Greet(name="bob"))

    fragment = board.client.get("/fragments/queues")
    assert fragment.status_code == 200
    assert "<html" not in fragment.text, "the fragment is a table, not a page"
    assert cell(fragment.text, ALPHA, "ready") == "2"
    assert cell(fragment.text, ALPHA, "dead") == "0"
    assert 'hx-trigger="every 2000ms' in page.text, "the table refreshes itself"
    assert "<svg" in fragment.text
    assert "<polyline" in fragment.text


def test_a_queue_not_declared_yet_is_said_so() -> None:
    for board in make_board(dashboard_settings(), declared=[ALPHA]):
        page = board.client.get("/")
        assert cell(page.text, ALPHA, "ready") == "0"
        assert re.search(
            rf'data-queue="{BETA}">\s*<th[^>]*>[^<]*</th>\s*<td[^>]*>not declared yet', page.text
        )


def test_dead_letters_are_paged_and_filtered_by_reason_and_job_type(board: Board) -> None:
    kill(board, ["boom 1", "boom 2", "timeout 3", "boom 4", "timeout 5"])

    first = board.client.get(f"/queues/{ALPHA}/dead-letters?limit=2")
    assert first.status_code == 200
    assert '<span class="total">5</span>' in first.text
    assert first.text.count("<tr data-handle=") == 2
    assert "offset=2" in first.text, "a link to the next page"

    last = board.client.get(f"/queues/{ALPHA}/dead-letters?limit=2&offset=4")
    assert last.text.count("<tr data-handle=") == 1
    assert "next page" not in last.text

    boom = board.client.get(f"/queues/{ALPHA}/dead-letters?reason=BOOM")
    assert '<span class="total">3</span>' in boom.text
    assert "timeout" not in re.sub(r"<form.*?</form>", "", boom.text, flags=re.S)

    none = board.client.get(f"/queues/{ALPHA}/dead-letters?job_type=other.type")
    assert '<span class="total">0</span>' in none.text
    typed = board.client.get(f"/queues/{ALPHA}/dead-letters?job_type={Greet.NAME}")
    assert '<span class="total">5</span>' in typed.text


def test_a_dead_letter_shows_its_whole_envelope(board: Board) -> None:
    [job_id] = kill(board, ["fatal: no such user"])

    page = board.client.get(f"/queues/{ALPHA}/dead-letter", params={"handle": job_id})

    assert page.status_code == 200
    shown = html.unescape(page.text)
    for expected in (job_id, "fatal: no such user", '"name": "n0"', '"attempt": 1', Greet.NAME):
        assert expected in shown, expected


def test_a_hostile_reason_and_payload_are_shown_as_text(board: Board) -> None:
    hostile = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
    board.producer.enqueue(Greet(name=hostile))
    dead_letter_one(board.backend, board.settings.queue_set()[ALPHA], hostile)

    listing = board.client.get(f"/queues/{ALPHA}/dead-letters")
    [letter] = board.backend.dead_letters(ALPHA)
    detail = board.client.get(f"/queues/{ALPHA}/dead-letter", params={"handle": letter.handle})

    for page in (listing, detail):
        assert "<script>document" not in page.text
        assert "<img src=x" not in page.text
        assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in page.text


def test_requeue_of_one_dead_letter_moves_it_back_and_the_count_follows(board: Board) -> None:
    first, second = kill(board, ["boom", "boom"])
    assert cell(board.client.get("/").text, ALPHA, "dead") == "2"

    answer = board.post(f"/queues/{ALPHA}/dead-letters/requeue", {"handle": first})

    assert answer.status_code == 200
    assert "requeued 1 of test.alpha" in answer.text
    assert answer.headers["HX-Trigger"] == "queuey-refresh"
    assert [d.handle for d in board.backend.dead_letters(ALPHA)] == [second]
    assert board.backend.pending(ALPHA) == 1
    overview = board.client.get("/").text
    assert (cell(overview, ALPHA, "ready"), cell(overview, ALPHA, "dead")) == ("1", "1")


def test_a_selection_is_requeued_or_deleted_together(board: Board) -> None:
    ids = kill(board, ["a", "b", "c", "d"])

    requeued = board.post(f"/queues/{ALPHA}/dead-letters/requeue", {"handle": ids[:2]})
    deleted = board.post(f"/queues/{ALPHA}/dead-letters/delete", {"handle": ids[2:3]})

    assert "requeued 2" in requeued.text
    assert "deleted 1" in deleted.text
    assert [d.handle for d in board.backend.dead_letters(ALPHA)] == ids[3:]
    assert board.backend.pending(ALPHA) == 2


def test_a_purge_needs_the_queue_name_typed(board: Board) -> None:
    kill(board, ["a", "b", "c"])
    confirm = board.client.get(f"/queues/{ALPHA}/dead-letters/purge")
    assert "all 3 of them" in confirm.text

    refused = board.post(f"/queues/{ALPHA}/dead-letters/purge", {"confirm": "yes"})
    assert refused.status_code == 400
    assert len(board.backend.dead_letters(ALPHA)) == 3

    done = board.post(f"/queues/{ALPHA}/dead-letters/purge", {"confirm": ALPHA})
    assert done.status_code == 200
    assert "purged 3" in done.text
    assert board.backend.dead_letters(ALPHA) == []


def test_a_form_without_javascript_is_sent_back_to_its_page(board: Board) -> None:
    [job_id] = kill(board, ["boom"])
    token = board.csrf()

    answer = board.client.post(
        f"/queues/{ALPHA}/dead-letters/requeue", data={"handle": job_id, "csrf_token": token}
    )

    assert answer.status_code == 303
    assert answer.headers["location"] == f"/queues/{ALPHA}/dead-letters"
    assert board.backend.pending(ALPHA) == 1


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/queues/no.such/dead-letters", 404),
        (f"/queues/{ALPHA}/dead-letters?offset=abc", 400),
        (f"/queues/{ALPHA}/dead-letters?offset=-1", 400),
        (f"/queues/{ALPHA}/dead-letters?limit=0", 400),
        (f"/queues/{ALPHA}/dead-letters?limit=100000", 400),
        (f"/queues/{ALPHA}/dead-letters?reason=" + "x" * 600, 400),
        (f"/queues/{ALPHA}/dead-letter", 400),
        (f"/queues/{ALPHA}/dead-letter?handle=nope", 404),
        ("/jobs/not-a-uuid", 200),  # no job store: the page says so
        ("/nowhere", 404),
        ("/static/../app.py", 404),
    ],
)
def test_bad_requests_get_a_clean_error(board: Board, path: str, status: int) -> None:
    answer = board.client.get(path)
    assert answer.status_code == status
    no_trace(answer.text)


def test_a_bad_write_gets_a_clean_error(board: Board) -> None:
    writes: list[tuple[str, dict[str, Any]]] = [
        (f"/queues/{ALPHA}/dead-letters/requeue", {}),
        (f"/queues/{ALPHA}/dead-letters/requeue", {"handle": [str(n) for n in range(1001)]}),
        ("/queues/no.such/dead-letters/delete", {"handle": "x"}),
        ("/workers/nobody/drain", {}),
        ("/schedules/nothing/fire", {}),
    ]
    for path, data in writes:
        answer = board.post(path, data)
        assert 400 <= answer.status_code < 500, (path, answer.status_code)
        no_trace(answer.text)
    assert board.client.get(f"/queues/{ALPHA}/dead-letters/requeue").status_code == 405


def test_live_workers_are_listed_and_the_drain_button_stops_one(board: Board) -> None:
    clock = board.clock
    worker = Worker(
        board.backend,
        board.settings.queue_set(),
        [Handler(Greet, lambda job, ctx: None)],
        consume=[ALPHA],
        clock=clock,
    )
    running = start(worker, clock)
    wait_for(lambda: board.backend.consumer_count(ALPHA) == 1, clock)

    page = board.client.get("/workers")
    ids = re.findall(r'<tr data-worker="([^"]+)">', page.text)
    assert len(ids) == 1
    assert ALPHA in page.text
    assert 'class="danger drain"' in page.text

    answer = board.post(f"/workers/{ids[0]}/drain")

    assert answer.status_code == 200, answer.text
    assert "draining" in answer.text
    assert running.join() is None
    assert running.is_finished()


def test_schedules_show_their_next_firing_and_fire_now_enqueues(board: Board) -> None:
    schedule = Schedule("greet-often", Greet(name="tick"), Every(60))
    for sched_board in make_board(board.settings, schedules=[schedule]):
        page = sched_board.client.get("/schedules")
        assert "greet-often" in page.text
        assert "every 60s" in page.text
        answer = sched_board.post("/schedules/greet-often/fire")
        assert answer.status_code == 200
        assert "fired greet-often" in answer.text
        assert sched_board.backend.pending(ALPHA) == 1


def test_schedules_on_a_backend_that_keeps_no_ticks_say_so_and_still_fire(
    board: Board,
) -> None:
    schedule = Schedule("greet-often", Greet(name="tick"), Every(60))
    for sched_board in make_board(board.settings, schedules=[schedule]):
        page = sched_board.client.get("/schedules")
        assert "last firings are not available on this backend" in page.text
        assert 'class="fire"' in page.text


def test_job_history_and_search_come_from_the_job_store() -> None:
    store = open_job_store("memory://")
    job_id = uuid.uuid4()
    now = int(time.time() * 1000)
    dead = JobState.DEAD_LETTERED
    store.write(
        [
            JobEvent(job_id, Greet.NAME, ALPHA, JobState.RUNNING, now - 10, now - 20, 1, "h", 7),
            JobEvent(job_id, Greet.NAME, ALPHA, dead, now, now - 20, 1, "h", 7, error="<b>bad</b>"),
        ]
    )
    for board in make_board(dashboard_settings(), job_store=store):
        found = board.client.get("/jobs", params={"state": "dead_lettered"})
        assert str(job_id) in found.text
        assert "&lt;b&gt;bad&lt;/b&gt;" in found.text
        assert str(job_id) not in board.client.get("/jobs", params={"state": "succeeded"}).text
        one = board.client.get(f"/jobs/{job_id}")
        assert one.status_code == 200
        assert "dead_lettered" in one.text
        assert board.client.get("/jobs", params={"job_id": str(job_id)}).status_code == 200
        assert board.client.get(f"/jobs/{uuid.uuid4()}").status_code == 404
        assert board.client.get("/jobs", params={"state": "nope"}).status_code == 400
        assert board.client.get("/jobs", params={"since": "yesterday"}).status_code == 400
    store.close()


def test_an_error_quoting_a_long_path_is_cut_not_echoed_whole(board: Board) -> None:
    name = "q" * 20_000
    for headers in ({}, {"HX-Request": "true"}):
        answer = board.client.get(f"/queues/{name}/dead-letters", headers=headers)
        assert answer.status_code == 404
        assert "no configured queue" in answer.text
        assert "q" * 301 not in answer.text
        assert "characters more)" in answer.text
        assert len(answer.text) < 10_000


def test_without_a_job_store_the_job_pages_say_so(board: Board) -> None:
    assert "No job store is configured" in board.client.get("/jobs").text


class Bare:
    """A backend with the seam only: no capability at all."""

    def close(self) -> None:
        pass


def test_a_backend_without_capabilities_says_not_available_on_this_backend() -> None:
    for board in make_board(dashboard_settings(), backend=Bare(), control_backend=Bare()):
        assert "not available on this backend" in board.client.get("/").text
        assert "not available on this backend" in board.client.get("/workers").text
        dead = board.client.get(f"/queues/{ALPHA}/dead-letters")
        assert dead.status_code == 404
        assert "not available on this backend" in dead.text


def test_it_mounts_under_a_path_of_an_existing_app() -> None:
    settings = dashboard_settings()
    for board in make_board(settings):
        dashboard = board.client.app
        outer = Starlette(routes=[Mount("/ops/queuey", app=dashboard)])
        with TestClient(outer, base_url=LOCAL) as client:
            page = client.get("/ops/queuey/")
            assert page.status_code == 200
            assert 'src="/ops/queuey/static/htmx.min.js"' in page.text
            assert f'href="/ops/queuey/queues/{ALPHA}/dead-letters"' in page.text
            assert client.get("/ops/queuey/static/htmx.min.js").status_code == 200
            [job_id] = kill(board, ["boom"])
            token = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
            assert token
            moved = client.post(
                f"/ops/queuey/queues/{ALPHA}/dead-letters/requeue",
                data={"handle": job_id, "csrf_token": token.group(1)},
                follow_redirects=False,
            )
            assert moved.status_code == 303
            assert moved.headers["location"] == f"/ops/queuey/queues/{ALPHA}/dead-letters"
            assert board.backend.pending(ALPHA) == 1


def test_on_the_embedded_backend_the_job_pages_read_the_store_in_its_file(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/queuey.db"
    settings, _ = load_settings(os.devnull, overrides={"broker": {"url": url}})
    job_id = uuid.uuid4()
    now = int(time.time() * 1000)
    store = open_job_store(url)
    store.write([JobEvent(job_id, "t.job", "default", JobState.RUNNING, now, now, 1, "h", 1)])
    store.close()
    broker = open_backend(settings.broker)
    broker.declare([settings.queue_set()["default"]])
    broker.close()
    app = create_app(settings)
    with TestClient(app, base_url=LOCAL) as client:
        found = client.get("/jobs")
        assert str(job_id) in found.text
        assert "running" in client.get(f"/jobs/{job_id}").text
        assert "sqlite" in found.text  # the backend, opened from the settings
        overview = client.get("/")
        assert cell(overview.text, "default", "ready") == "0"
        assert cell(overview.text, "default", "running") == "0", "leased jobs, on a file"
        assert "No worker answered" in client.get("/workers").text
        assert '<span class="total">0</span>' in client.get("/queues/default/dead-letters").text


class Unreachable(Bare):
    """A backend whose broker went away."""

    def inspect(self, names: object) -> object:
        raise BackendError("lost the connection to RabbitMQ at rabbit:5672: refused")


def test_a_broker_that_fails_is_a_503_with_its_one_line() -> None:
    for board in make_board(dashboard_settings(), backend=Unreachable()):
        for path in ("/", "/fragments/queues"):
            answer = board.client.get(path)
            assert answer.status_code == 503
            assert "the broker: lost the connection to RabbitMQ" in answer.text
            no_trace(answer.text)


class AtOdds(Bare):
    """A backend whose queues exist with other settings than the configuration's."""

    def inspect(self, names: object) -> object:
        raise ConfigError("queue 'test.alpha' exists with other settings")


def test_a_configuration_at_odds_with_the_broker_is_a_409_with_its_line() -> None:
    for board in make_board(dashboard_settings(), backend=AtOdds()):
        answer = board.client.get("/")
        assert answer.status_code == 409
        assert "exists with other settings" in answer.text
        assert "the broker:" not in answer.text


def test_an_oversized_or_file_carrying_write_is_refused_before_it_is_read(board: Board) -> None:
    token = board.csrf()
    headers = {"X-CSRF-Token": token}
    path = f"/queues/{ALPHA}/dead-letters/delete"
    huge = board.client.post(path, data={"handle": "x" * 300_000}, headers=headers)
    assert huge.status_code == 413
    with_file = board.client.post(path, files={"handle": ("a.txt", b"x")}, headers=headers)
    assert with_file.status_code == 400
    no_trace(with_file.text)


#: Control characters a message may carry: ESC (a terminal's escape), BEL, a C1
#: control, a bidirectional override and a line separator.
CONTROLS = "\x1b[2J\x07\x9b\u202e\u2028"


def raw_controls(text: str) -> list[str]:
    """The control characters ``text`` holds raw (newlines and tabs are layout)."""
    return sorted({c for c in text if c in "\x9b\u202e\u2028" or (ord(c) < 32 and c not in "\n\t")})


def test_no_page_writes_control_characters_of_a_message_raw() -> None:
    store = open_job_store("memory://")
    job_id = uuid.uuid4()
    now = int(time.time() * 1000)
    hostile = f"boom{CONTROLS}end"
    store.write(
        [
            JobEvent(job_id, Greet.NAME, ALPHA, JobState.RUNNING, now - 10, now - 20, 1, "h", 7),
            JobEvent(
                job_id, Greet.NAME, ALPHA, JobState.RETRYING, now, now - 20, 1, "h", 7, hostile
            ),
        ]
    )
    for board in make_board(dashboard_settings(), job_store=store):
        board.producer.enqueue(Greet(name=hostile))
        dead_letter_one(board.backend, board.settings.queue_set()[ALPHA], hostile)
        [letter] = board.backend.dead_letters(ALPHA)
        pages: list[tuple[str, dict[str, str]]] = [
            ("/jobs", {}),
            (f"/jobs/{job_id}", {}),
            (f"/queues/{ALPHA}/dead-letters", {}),
            (f"/queues/{ALPHA}/dead-letter", {"handle": letter.handle}),
            (f"/queues/{ALPHA}/dead-letter", {"handle": hostile}),  # a 404 quoting it
        ]
        for path, params in pages:
            answer = board.client.get(path, params=params)
            assert raw_controls(answer.text) == [], path
            assert "boom" in answer.text or answer.status_code >= 400, path
        assert "boom\\x1b[2J\\x07\\x9b\\u202e\\u2028end" in board.client.get("/jobs").text
    store.close()
