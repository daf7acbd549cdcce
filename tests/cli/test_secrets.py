"""Secrets stay secret: no command prints a password, whatever characters it holds, and
the management API gets credentials only where the user said it may.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_cli.management import endpoint
from queuey_cli.management import unacked
from tests.cli.conftest import FakeBroker

#: Each holds a character that breaks naive URL parsing; "Zx9" and "Qw7" never appear
#: in anything queuey prints on its own, so finding either is a leak, even of a part.
PASSWORDS = ["Zx9#Qw7", "Zx9/Qw7", "Zx9?Qw7", "Zx9@Qw7", "Zx9%Qw7", "Zx9!#1@/?%Qw7"]
CONFIG = """
[broker]
url = "{url}"
connect_timeout = "1s"
{management}
[queues.alpha]
prefetch = 4
max_priority = 10

[queues.beta]
kind = "quorum"
prefetch = 1
"""


def leaks(text: str) -> bool:
    return "Zx9" in text or "Qw7" in text


def urls(password: str) -> list[tuple[str, str]]:
    """(broker URL, management URL) with the password as typed, then percent-encoded."""
    encoded = urllib.parse.quote(password, safe="")
    return [
        (f"amqp://guest:{p}@127.0.0.1:1/%2F", f"https://admin:{p}@h:15671")
        for p in (password, encoded)
    ]


COMMANDS = [
    ["config", "show"],
    ["queues"],
    ["enqueue", "greet", '{"name": "ada"}'],
    ["dlq", "list"],
    ["dlq", "requeue", "--all"],
    ["handlers"],
    ["workers"],
    ["workers", "shutdown", "--all"],
]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("where", ["file", "env"])
def test_no_command_prints_the_password(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    password: str,
    where: str,
) -> None:
    for url, management_url in urls(password):
        management = f'management_url = "{management_url}"'
        if where == "env":
            monkeypatch.setenv("QUEUEY_BROKER__URL", url)
            text = CONFIG.format(url="amqp://guest:guest@127.0.0.1:1/%2F", management="")
        else:
            text = CONFIG.format(url=url, management=management)
        path = tmp_path / "queuey.toml"
        path.write_text(text)
        for command in COMMANDS:
            for level in ("info", "debug"):
                args = ["--config", str(path), "--log-level", level, *command]
                result = runner.invoke(app, args)
                shown = result.stdout + result.stderr
                assert not leaks(shown), (url, command, shown)
                assert "Traceback" not in shown
                assert result.exit_code in (0, 1, 2), (command, shown)
                if command[0] == "enqueue" and url == urls(password)[1][0]:
                    # Percent-encoded, the URL is good: it got as far as connecting.
                    assert result.exit_code == 1, shown
                    assert "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/" in shown


def test_config_show_masks_both_urls(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(
        CONFIG.format(
            url="amqps://app:Zx9%23Qw7@rabbit:5671/prod",
            management='management_url = "https://admin:Zx9%2FQw7@rabbit:15671"',
        )
    )
    result = runner.invoke(app, ["--config", str(path), "config", "show"])
    assert result.exit_code == 0, result.stderr
    broker = json.loads(result.stdout)["broker"]
    assert broker["url"] == "amqps://app:***@rabbit:5671/prod"
    assert broker["management_url"] == "https://admin:***@rabbit:15671"


def test_an_unencoded_hash_in_the_password_is_refused_in_one_line_by_the_real_script(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG.format(url="amqp://guest:S3cr3tPw!#1@127.0.0.1:5672/%2F", management=""))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "queuey"), "--config", str(path), "config", "show"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: {path}: broker.url: ")
    assert "percent-encode" in done.stderr
    assert "S3cr3t" not in done.stderr


# -- the management API ----------------------------------------------------------------


def test_credentials_go_with_https_or_to_the_brokers_own_host_only() -> None:
    broker = "amqps://app:p%23w@rabbit:5671/prod"
    assert endpoint("https://rabbit:15671", broker).auth == ("app", "p#w")
    assert endpoint("https://stats.example.com", broker).auth == ("app", "p#w")
    assert endpoint("http://rabbit:15672", broker).auth == ("app", "p#w"), "configured: same host"
    assert endpoint("http://elsewhere:15672", broker).auth is None, "never in clear elsewhere"
    own = endpoint("http://admin:a%2Fb@elsewhere:15672/rabbitmq/", broker)
    assert (own.auth, own.base, own.vhost) == (
        ("admin", "a/b"),
        "http://elsewhere:15672/rabbitmq",
        "prod",
    )
    assert endpoint("http://127.0.0.1:15672", "amqp://127.0.0.1/").auth == ("guest", "guest")
    assert endpoint("https://h", "amqp://h/%2F").vhost == "/"
    assert "p#w" not in repr(endpoint("https://rabbit:15671", broker))


class _Server(ThreadingHTTPServer):
    seen: list[tuple[str, str | None]]
    redirect_to: str | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        if self.server.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.server.redirect_to + self.path)
            self.end_headers()
            return
        body = json.dumps([{"name": "alpha", "messages_unacknowledged": 3}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[Callable[[], _Server]]:
    """Starts fake management APIs on 127.0.0.1 that record what they are sent."""
    started: list[_Server] = []

    def start() -> _Server:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.seen, server.redirect_to = [], None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_unacked_counts_come_from_the_configured_api(api: Callable[[], _Server]) -> None:
    server = api()
    port = server.server_address[1]
    found = unacked(
        f"http://127.0.0.1:{port}", "amqp://guest:Zx9Qw7@127.0.0.1:5672/%2F", ["alpha", "x"]
    )
    assert found.counts == {"alpha": 3, "x": 0}
    [(path, auth)] = server.seen
    assert path == "/api/queues/%2F?columns=name,messages_unacknowledged"
    assert auth is not None, "plain HTTP to the broker's own host, as configured"


def test_plain_http_to_another_host_gets_no_credentials(api: Callable[[], _Server]) -> None:
    server = api()
    port = server.server_address[1]
    unacked(f"http://localhost:{port}", "amqp://guest:Zx9Qw7@127.0.0.1:5672/%2F", ["default"])
    assert server.seen
    assert server.seen[0][1] is None


def test_a_redirect_is_not_followed_with_the_credentials(api: Callable[[], _Server]) -> None:
    trap, server = api(), api()
    server.redirect_to = f"http://127.0.0.1:{trap.server_address[1]}"
    port = server.server_address[1]
    found = unacked(f"http://127.0.0.1:{port}", "amqp://guest:pw@127.0.0.1/%2F", ["default"])
    assert found.counts is None
    assert "answered 302" in found.why_not
    assert trap.seen == []


def test_without_a_management_url_nothing_is_asked() -> None:
    found = unacked(None, "amqps://app:pw@rabbit:5671/prod", ["default"])
    assert found.counts is None
    assert "broker.management_url" in found.why_not


def test_an_api_that_does_not_answer_is_n_a() -> None:
    found = unacked("http://127.0.0.1:1", "amqp://guest:Zx9Qw7@127.0.0.1/%2F", ["default"])
    assert found.counts is None
    assert "did not answer" in found.why_not
    assert not leaks(found.why_not)


def test_queues_shows_n_a_and_the_setting_to_use_without_a_management_url(
    runner: CliRunner, offline: Path, broker: FakeBroker
) -> None:
    result = runner.invoke(app, ["--config", str(offline), "queues"])
    assert result.exit_code == 0, result.stderr
    assert "n/a" in result.stdout
    # Piped, the note goes to stderr so that stdout holds only the records.
    assert "set broker.management_url" in result.stderr


def test_queues_shows_unacked_from_the_management_url(
    runner: CliRunner,
    tmp_path: Path,
    broker: FakeBroker,
    api: Callable[[], _Server],
) -> None:
    port = api().server_address[1]
    path = tmp_path / "queuey.toml"
    path.write_text(
        CONFIG.format(
            url="amqp://guest:Zx9Qw7@127.0.0.1:1/%2F",
            management=f'management_url = "http://127.0.0.1:{port}"',
        )
    )
    result = runner.invoke(app, ["--config", str(path), "queues"])
    assert result.exit_code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "alpha" in line)
    assert row.split("\t")[2] == "3", "the unacked column (piped: tab-separated)"
    assert "n/a" not in result.stdout
