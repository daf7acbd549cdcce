"""``queuey health``'s library half: where each process answers, and the asking."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core.process.health import Endpoint
from queuey_core.process.health import health_endpoints
from queuey_core.process.health import probe
from queuey_core.settings import load_settings

TOKEN = "a-token-of-more-than-16-chars"


def test_the_endpoints_are_the_metrics_ports_then_the_dashboard() -> None:
    settings, _ = load_settings(
        os.devnull,
        overrides={
            "worker": {"metrics_port": 9191},
            "scheduler": {"metrics_port": 9192},
            "dashboard": {"host": "0.0.0.0", "port": 8200, "token": TOKEN},
        },
    )
    found = health_endpoints(settings)
    assert [(e.name, e.url) for e in found] == [
        ("worker", "http://127.0.0.1:9191/healthz"),
        ("scheduler", "http://127.0.0.1:9192/healthz"),
        ("dashboard", "http://127.0.0.1:8200/healthz"),
    ], "a process listening on every interface is asked on loopback"
    assert found[0].headers == {}, "the token goes to the dashboard only"
    assert found[2].headers == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(found), "a token is never shown"


def test_one_shared_port_is_asked_once_and_a_random_port_not_at_all() -> None:
    settings, _ = load_settings(
        os.devnull,
        overrides={"worker": {"metrics_port": 9191}, "scheduler": {"metrics_port": 9191}},
    )
    assert [e.name for e in health_endpoints(settings)] == ["worker or scheduler", "dashboard"]
    settings, _ = load_settings(os.devnull, overrides={"worker": {"metrics_port": 0}})
    assert [e.name for e in health_endpoints(settings)] == ["dashboard"]


class Answers(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b'{"ok": true}'

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serving() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_first_endpoint_that_answers_decides(serving: http.server.HTTPServer) -> None:
    nobody = Endpoint("worker", f"http://127.0.0.1:{closed_port()}/healthz")
    answers = Endpoint("dashboard", f"http://127.0.0.1:{serving.server_port}/healthz")
    assert probe([nobody, answers]).ok
    assert probe([nobody, answers]).endpoint == answers
    missing = probe([nobody])
    assert not missing.ok
    assert missing.reason.startswith("nothing answers on http://127.0.0.1:")


def test_an_unhealthy_answer_gives_its_own_reason(
    serving: http.server.HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Answers, "status", 503)
    monkeypatch.setattr(Answers, "body", b'{"ok": false, "reason": "the worker has stopped"}')
    answer = probe([Endpoint("worker", f"http://127.0.0.1:{serving.server_port}/healthz")])
    assert not answer.ok
    assert answer.reason == "the worker has stopped"
    monkeypatch.setattr(Answers, "body", b"<html>proxy error</html>")
    answer = probe([Endpoint("worker", f"http://127.0.0.1:{serving.server_port}/healthz")])
    assert answer.reason == "HTTP 503"


def test_an_endpoint_that_never_answers_is_unhealthy_after_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts into the backlog, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/healthz"
        answer = probe([Endpoint("worker", url)], timeout=0.2)
    assert not answer.ok
    assert answer.reason == "no answer within 0.2s"


def test_the_command_refuses_a_url_that_is_not_http_in_one_line() -> None:
    result = CliRunner().invoke(app, ["health", "--url", "ftp://x"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "--url: an http:// address" in result.output
