"""``queuey dlq list`` on dead letters anyone could have published: hostile text in the
envelope and headers of an unexpected type, on a real RabbitMQ."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import channel
from tests.integration.broker import delete_queues
from tests.integration.broker import unique

pytestmark = pytest.mark.integration

ESC = "\x1b[31m"


@pytest.fixture
def queue() -> Iterator[str]:
    require_broker()
    name = unique("cli-hostile")
    broker = RabbitMQBackend(AMQP_URL)
    try:
        broker.declare([QueueConfig(name)])
    finally:
        broker.close()
    yield name
    delete_queues(name)


def put_dead_letter(queue: str, job_type: str, headers: dict[str, Any]) -> str:
    job_id = str(uuid.uuid4())
    body = {
        "job_id": job_id,
        "job_type": job_type,
        "queue": queue,
        "attempt": 1,
        "deferrals": 0,
        "priority": 0,
        "enqueued_at": 0,
        "payload": {"text": f"{ESC}[/]"},
    }
    with channel() as ch:
        ch.basic_publish(
            "",
            f"{queue}.dlq",
            json.dumps(body).encode(),
            pika.BasicProperties(headers=headers, delivery_mode=2),
        )
    return job_id


def dlq_list(tmp_path: Path, queue: str, *args: str) -> tuple[int, str, str]:
    config = tmp_path / "queuey.toml"
    config.write_text(f'[broker]\nurl = "{AMQP_URL}"\n[queues."{queue}"]\n')
    result = CliRunner().invoke(app, ["--config", str(config), "dlq", "list", *args])
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown
    assert "\x1b" not in shown
    return result.exit_code, result.stdout, result.stderr


def test_hostile_text_in_a_dead_letter_is_listed_literally(tmp_path: Path, queue: str) -> None:
    put_dead_letter(
        queue,
        "[/]type[bold]",
        {"x-queuey-reason": "[/] [bold]reason\x1b[2J", "x-queuey-dead-at": 0},
    )
    code, out, err = dlq_list(tmp_path, queue)
    assert code == 0, err
    assert "[/]type[bold]" in out
    assert "[/] [bold]reason\\x1b[2J" in out
    code, out, err = dlq_list(tmp_path, queue, "--json")
    assert code == 0, err
    [dead] = json.loads(out)
    assert dead["job_type"] == "[/]type[bold]"


def test_a_job_type_with_escapes_is_listed_as_not_an_envelope(tmp_path: Path, queue: str) -> None:
    # An envelope's job type may not hold control characters: such a message is not an
    # envelope, and is listed as one that is not, by its position, escaped.
    put_dead_letter(queue, f"{ESC}[/]type", {"x-queuey-reason": "odd"})
    code, out, err = dlq_list(tmp_path, queue, "--json")
    assert code == 0, err
    [dead] = json.loads(out)
    assert dead["decodable"] is False
    assert dead["handle"] == "#1"
    assert "job_type" in dead["error"]
    code, out, err = dlq_list(tmp_path, queue)
    assert code == 0, err
    assert "#1" in out
    assert "not an envelope" in out


def test_a_dead_letter_that_is_not_an_envelope_is_reached_by_its_handle(
    tmp_path: Path, queue: str
) -> None:
    with channel() as ch:
        ch.basic_publish("", f"{queue}.dlq", b"\x00\xff not json [/]")
    config = tmp_path / "queuey.toml"
    config.write_text(f'[broker]\nurl = "{AMQP_URL}"\n[queues."{queue}"]\n')

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, ["--config", str(config), "dlq", *args])
        assert "Traceback" not in result.stdout + result.stderr
        assert "\x1b" not in result.stdout + result.stderr
        return result.exit_code, result.stdout, result.stderr

    code, out, err = run("show", "#1")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["decodable"] is False
    assert "not json [/]" in shown["preview"]
    code, _, err = run("requeue", "#1")
    assert code == 2
    assert "not a queuey envelope, cannot be requeued: #1" in err
    code, out, err = run("delete", "#1")
    assert code == 0, err
    assert out.strip() == "deleted 1"
    code, out, _ = run("list", "--json")
    assert json.loads(out) == []


@pytest.mark.parametrize("dead_at", ["abc", [1]])
def test_a_dead_at_header_of_an_odd_type_is_listed_as_unknown(
    tmp_path: Path, queue: str, dead_at: object
) -> None:
    put_dead_letter(queue, "greet", {"x-queuey-reason": "odd", "x-queuey-dead-at": dead_at})
    code, out, err = dlq_list(tmp_path, queue)
    assert code == 0, err
    assert "unknown" in out
