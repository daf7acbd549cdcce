"""TLS: ``amqps://`` with a CA file, a client certificate and server-name checking.

Against the TLS listener of the tests' own node (``verify_peer``,
``fail_if_no_peer_cert``), with certificates ``openssl`` made for the session: a job runs
end to end on the settings of ``[broker.tls]``, and each way a certificate can be wrong
is one line naming the problem. The settings' own checks need no broker.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any
from typing import ClassVar

import pika.exceptions
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import BackendError
from queuey_core import ConfigError
from queuey_core import Handler
from queuey_core import Job
from queuey_core import Producer
from queuey_core import Worker
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.errors import connect_error
from queuey_core.settings import load_settings
from tests.integration.certs import Certs
from tests.integration.nodes import Node
from tests.support import start
from tests.support import wait_for

QUEUE = "tls.jobs"


class Hello(Job):
    NAME: ClassVar[str] = "tls.hello"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def write_config(
    path: Path,
    url: str,
    tls: dict[str, Any] | None,
    queues: str = "[queues.alpha]\n[queues.beta]\n",
) -> Path:
    lines = ["[broker]", f'url = "{url}"', 'connect_timeout = "3s"']
    if tls is not None:
        lines.append("[broker.tls]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in tls.items()]
    path.write_text("\n".join(lines) + "\n\n" + queues)
    return path


def client(certs: Certs, **changes: Any) -> dict[str, Any]:
    """The ``[broker.tls]`` keys of a client the node accepts, with ``changes``."""
    keys: dict[str, Any] = {
        "ca_file": str(certs.ca),
        "cert_file": str(certs.client_cert),
        "key_file": str(certs.client_key),
    }
    keys.update(changes)
    return {k: v for k, v in keys.items() if v is not None}


def tls_connections(node: Node) -> list[bool]:
    """Whether each client connection to the node uses TLS."""
    rows = json.loads(node.ctl("list_connections", "ssl", "--formatter", "json"))
    return [bool(row["ssl"]) for row in rows]


# -- against the node ---------------------------------------------------------------


@pytest.mark.integration
def test_a_job_runs_end_to_end_over_tls_on_the_settings_of_broker_tls(
    node: Node, certs: Certs, tmp_path: Path
) -> None:
    # The URL's host is the name the broker's certificate is for: no server_name needed.
    config = write_config(
        tmp_path / "queuey.toml",
        node.url(tls=True),
        client(certs),
        f'[queues."{QUEUE}"]\nprefetch = 4\n',
    )
    settings, _ = load_settings(config)
    queues = settings.queue_set()
    rabbit = RabbitMQBackend(
        settings.broker.url.get_secret_value(),
        ssl_context=settings.broker.ssl_context(),
        server_name=settings.broker.tls.server_name,
    )
    seen: list[int] = []
    worker = Worker(rabbit, queues, [Handler(Hello, lambda job, ctx: seen.append(job.n))])
    running = start(worker, None)
    try:
        Producer(rabbit, queues).enqueue_many([Hello(n=i) for i in range(20)])
        wait_for(lambda: len(seen) == 20, timeout=30)
        wait_for(lambda: rabbit.queue_counts(QUEUE)[0] == 0)
        assert sorted(seen) == list(range(20))
        connections = tls_connections(node)
        assert connections, "no connection listed"
        assert all(connections), "a plain connection"
    finally:
        running.stop()
        rabbit.close()


def cli(config: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("QUEUEY_CONFIG", str(config))
    result = CliRunner().invoke(app, ["--log-format", "json", *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.integration
def test_the_cli_enqueues_and_a_worker_runs_over_tls(
    node: Node, certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # By IP address, checking the certificate's name explicitly.
    url = node.url(tls=True).replace("localhost", "127.0.0.1")
    config = write_config(tmp_path / "q.toml", url, client(certs, server_name="localhost"))
    code, out, err = cli(config, monkeypatch, "enqueue", "greet", '{"name": "ada"}')
    assert code == 0, err
    job_id = out.strip()
    uuid.UUID(job_id)
    code, _, err = cli(config, monkeypatch, "worker", "--burst")
    assert code == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [e["job_id"] for e in events if e["message"] == "job succeeded"] == [job_id]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"not one line: {err!r}"
    assert lines[0].startswith("error: TLS with RabbitMQ at amqps://guest:***@"), lines[0]
    assert "guest:guest" not in err
    return lines[0]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong CA", "the broker's certificate is not signed by a CA we trust"),
        ("wrong server name", "not for the server name asked for"),
        # The broker's alert, or (TLS 1.3, now and then) only its hang-up.
        ("no client certificate", "requires a client certificate and none was given"),
    ],
)
def test_a_certificate_problem_is_one_line_naming_it_and_exit_1(
    node: Node,
    certs: Certs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    expected: str,
) -> None:
    tls = {
        "wrong CA": client(certs, ca_file=str(certs.other_ca)),
        "wrong server name": client(certs, server_name="rabbit.example.com"),
        "no client certificate": client(certs, cert_file=None, key_file=None),
    }[case]
    config = write_config(tmp_path / "q.toml", node.url(tls=True), tls)
    code, out, err = cli(config, monkeypatch, "enqueue", "greet", '{"name": "ada"}')
    assert code == 1, f"{case}: exit {code}"
    assert out == ""
    line = one_error_line(err)
    assert expected in line, line
    if case == "wrong server name":
        assert "'rabbit.example.com'" in line


@pytest.mark.integration
def test_the_cli_hands_broker_tls_to_the_backend(node: Node, certs: Certs, tmp_path: Path) -> None:
    config = write_config(tmp_path / "q.toml", node.url(tls=True), client(certs))
    queuey = Path(sys.executable).with_name("queuey")
    done = subprocess.run(
        [str(queuey), "--config", str(config), "enqueue", "greet", '{"name": "ada"}'],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_amqps_to_a_plain_port_says_the_broker_did_not_answer_in_tls(
    node: Node, certs: Certs
) -> None:
    url = f"amqps://guest:guest@localhost:{node.amqp_port}/%2F"
    context = ssl.create_default_context(cafile=certs.ca)
    with pytest.raises(BackendError, match="did not answer in TLS"):
        RabbitMQBackend(url, ssl_context=context, connect_timeout=3)


# -- without a broker ---------------------------------------------------------------


def test_an_expired_broker_certificate_is_named(certs: Certs) -> None:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(certs.expired_cert, certs.expired_key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, contextlib.suppress(ssl.SSLError):  # the client hangs up on it
            server.wrap_socket(conn, server_side=True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(BackendError) as caught:
            RabbitMQBackend(
                f"amqps://guest:guest@localhost:{port}/%2F",
                ssl_context=ssl.create_default_context(cafile=certs.ca),
                connect_timeout=3,
            )
    finally:
        thread.join(5)
        listener.close()
    assert str(caught.value) == (
        f"TLS with RabbitMQ at amqps://guest:***@localhost:{port}/%2F failed: "
        "the broker's certificate has expired"
    )


def test_an_ssl_context_with_a_plain_url_is_refused_before_connecting() -> None:
    with pytest.raises(ConfigError, match="TLS needs an amqps:// URL"):
        RabbitMQBackend(
            "amqp://guest:guest@127.0.0.1:1/%2F", ssl_context=ssl.create_default_context()
        )


def config_error(config: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    return str(caught.value)


def test_a_missing_tls_file_is_one_config_error_naming_key_and_path(
    certs: Certs, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    config = write_config(
        tmp_path / "q.toml", "amqps://u:p@localhost/%2F", client(certs, ca_file=str(missing))
    )
    assert config_error(config) == f"{config}: broker.tls.ca_file: no such file: {missing}"


def test_the_command_line_reports_a_missing_tls_file_in_one_line_with_exit_2(
    certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(
        tmp_path / "q.toml", "amqps://u:p@localhost/%2F", client(certs, key_file="gone.key")
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(config, monkeypatch, "enqueue", "greet", '{"name": "ada"}')
    assert code == 2
    assert err.strip() == f"error: {config}: broker.tls.key_file: no such file: gone.key"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("tls on a plain URL", "broker: tls is set but the URL is not amqps://"),
        ("key without certificate", "broker.tls: key_file is set without cert_file"),
        ("key of another certificate", "is not this certificate's key"),
        ("not a PEM CA", "broker.tls: ca_file"),
        ("a folder", "broker.tls.cert_file: not a file"),
    ],
)
def test_tls_settings_that_cannot_work_are_refused_at_load(
    certs: Certs, tmp_path: Path, case: str, expected: str
) -> None:
    url, tls = {
        "tls on a plain URL": ("amqp://u:p@localhost/%2F", client(certs)),
        "key without certificate": (
            "amqps://u:p@localhost/%2F",
            client(certs, cert_file=None),
        ),
        "key of another certificate": (
            "amqps://u:p@localhost/%2F",
            client(certs, key_file=str(certs.server_key)),
        ),
        "not a PEM CA": ("amqps://u:p@localhost/%2F", client(certs, ca_file=str(certs.client_key))),
        "a folder": ("amqps://u:p@localhost/%2F", client(certs, cert_file=str(certs.folder))),
    }[case]
    message = config_error(write_config(tmp_path / "q.toml", url, tls))
    assert expected in message, message
    assert "\n" not in message


def test_an_encrypted_client_key_is_refused_rather_than_prompted_for(
    certs: Certs, tmp_path: Path
) -> None:
    encrypted = tmp_path / "enc.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(certs.client_key), "-aes256", "-passout", "pass:x"],
        check=True,
        stdout=encrypted.open("wb"),
    )
    config = write_config(
        tmp_path / "q.toml", "amqps://u:p@localhost/%2F", client(certs, key_file=str(encrypted))
    )
    assert config_error(config).endswith(
        f"broker.tls: key_file {encrypted}: the key is encrypted; give it unencrypted"
    )


def test_config_show_lists_the_tls_keys(certs: Certs, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "q.toml", "amqps://u:secret@localhost/%2F", client(certs, verify=False)
    )
    settings, _ = load_settings(config)
    shown = settings.redacted()["broker"]
    assert shown["tls"] == {
        "ca_file": str(certs.ca),
        "cert_file": str(certs.client_cert),
        "key_file": str(certs.client_key),
        "server_name": None,
        "verify": False,
    }
    context = settings.broker.ssl_context()
    assert context is not None
    assert context.verify_mode is ssl.CERT_NONE


@pytest.mark.parametrize(
    "text",
    [
        "SSLError(1, '[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required')",
        "SSLEOFError(8, 'EOF occurred in violation of protocol (_ssl.c:2427)')",
    ],
    ids=["the broker's alert", "only its hang-up"],
)
def test_a_missing_client_certificate_is_named_whichever_way_tls_13_reports_it(
    text: str,
) -> None:
    # pika keeps only the text of what broke the stream after the handshake.
    error = pika.exceptions.IncompatibleProtocolError(
        f'StreamLostError: ("Stream connection lost: {text}",)'
    )
    message = str(connect_error(error, "amqps://guest:***@localhost:5682/%2F"))
    assert message.startswith("TLS with RabbitMQ at amqps://guest:***@localhost:5682/%2F failed")
    assert "requires a client certificate and none was given" in message
