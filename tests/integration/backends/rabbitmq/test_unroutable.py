"""Nothing vanishes at the end of the delay ladder: a delayed message that no queue takes
lands in ``queuey.unroutable``, where ``queuey queues`` and ``queuey dlq`` show it.

Published from raw pika, as a producer in another language would, each test in a
virtual host of its own: a fresh one (the alternate exchange is an argument of the
deliver exchange) and one whose deliver exchange an older queuey declared (a policy
gives it the alternate exchange).
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import DeadLetter
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq import topology
from tests import harness
from tests.integration.broker import own_vhost

pytestmark = pytest.mark.integration

#: A short delay: two levels of the ladder (32 ms and 16 ms), well under a second.
DELAY_MS = 48


def _url(vhost: str) -> str:
    quoted = urllib.parse.quote(vhost, safe="")
    return f"amqp://guest:guest@{harness.BROKER_HOST}:{harness.BROKER_PORT}/{quoted}"


@pytest.fixture
def vhost(request: pytest.FixtureRequest) -> Iterator[str]:
    """A virtual host of its own, named after the tests' one, deleted after the test."""
    base = "queuey-test" if harness.VHOST == "/" else harness.VHOST
    with own_vhost(f"{base}.{request.node.name.removeprefix('test_')[:40]}") as name:
        yield name


def _publish_delayed(url: str, queue: str) -> Envelope:
    """A valid envelope for ``queue``, delayed DELAY_MS through the ladder, from raw pika
    with confirms and ``mandatory`` (the broker confirms it: the ladder takes it)."""
    env = Envelope(
        job_id=uuid.uuid4(),
        job_type="greet",
        queue=queue,
        enqueued_at=int(time.time() * 1000),
        payload={"name": "nobody"},
    )
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(
            topology.TOP_EXCHANGE,
            topology.delay_routing_key(DELAY_MS, queue),
            env.encode(),
            pika.BasicProperties(
                content_type="application/json",
                delivery_mode=2,
                message_id=str(env.job_id),
                type=env.job_type,
            ),
            mandatory=True,
        )
    finally:
        conn.close()
    return env


def _wait_unroutable(backend: RabbitMQBackend, count: int) -> list[DeadLetter]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [
            d for d in backend.list_dead_letters(topology.UNROUTABLE) if isinstance(d, DeadLetter)
        ]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{count} message(s) never reached {topology.UNROUTABLE}")


def _cli(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_delayed_message_for_a_missing_queue_is_kept_and_shown(
    vhost: str, tmp_path: Path
) -> None:
    url = _url(vhost)
    backend = RabbitMQBackend(url)
    try:
        backend.declare([QueueConfig("default", max_priority=10)])
        sent = _publish_delayed(url, "nosuch")
        (found,) = _wait_unroutable(backend, 1)
        assert found.envelope == sent, "the message arrives unchanged"
    finally:
        backend.close()

    config = tmp_path / "queuey.toml"
    config.write_text(f'[broker]\nurl = "{url}"\n\n[queues.default]\nmax_priority = 10\n')
    code, out, err = _cli(config, "queues")
    assert code == 0, err
    # Piped, the records are on stdout and the notes on stderr.
    assert f"unroutable ({topology.UNROUTABLE}): 1" in err, err
    code, out, err = _cli(config, "queues", "--json")
    assert code == 0, err
    assert json.loads(out)["unroutable"] == 1, out

    code, out, err = _cli(config, "dlq", "list", "--queue", topology.UNROUTABLE, "--json")
    assert code == 0, err
    (listed,) = json.loads(out)
    assert listed["job_id"] == str(sent.job_id)
    assert listed["dlq_of"] == topology.UNROUTABLE
    assert listed["queue"] == "nosuch"
    assert listed["reason"] == (
        "unroutable: queue 'nosuch' did not exist (or was not bound to queuey.delay.deliver) "
        "when its delay ended"
    ), "it says what happened, not 'dead-lettered by RabbitMQ (expired)'"
    # x-death's time, in whole seconds: when it left the ladder, after it was sent.
    assert sent.enqueued_at // 1000 * 1000 <= listed["dead_at"] <= time.time() * 1000
    code, out, err = _cli(config, "dlq", "list", "--json")
    assert code == 0, err
    assert [d["job_id"] for d in json.loads(out)] == [str(sent.job_id)], "listed by default too"

    code, out, err = _cli(config, "dlq", "show", str(sent.job_id))
    assert code == 0, err
    assert json.loads(out)["payload"] == {"name": "nobody"}

    # Its queue still does not exist: it stays, and says why.
    code, out, err = _cli(config, "dlq", "requeue", str(sent.job_id))
    assert code == 2, (out, err)
    assert "queue 'nosuch' does not exist" in err, err

    # Once the queue exists, requeue sends it there, at attempt 1.
    backend = RabbitMQBackend(url)
    try:
        backend.declare([QueueConfig("nosuch")])
        code, out, err = _cli(config, "dlq", "requeue", str(sent.job_id))
        assert code == 0, err
        assert "requeued 1" in out
        assert backend.queue_counts("nosuch")[0] == 1
        assert backend.unroutable_count() == 0
    finally:
        backend.close()

    # Anything else in it (not an envelope) can be deleted by its handle.
    _publish_raw(url, b"not json")
    code, out, err = _cli(config, "dlq", "list", "--queue", topology.UNROUTABLE, "--json")
    (other,) = json.loads(out)
    assert other["decodable"] is False
    code, out, err = _cli(config, "dlq", "delete", other["handle"])
    assert code == 0, err
    assert "deleted 1" in out


def _publish_raw(url: str, body: bytes) -> None:
    """``body`` straight to the deliver exchange under a key no queue is bound for."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(topology.DELIVER_EXCHANGE, "no.such.key", body, mandatory=True)
    finally:
        conn.close()


def test_an_older_deliver_exchange_gets_its_alternate_exchange_from_a_policy(
    vhost: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = _url(vhost)
    # What an older queuey declared: the deliver exchange without an alternate exchange.
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().exchange_declare(topology.DELIVER_EXCHANGE, "topic", durable=True)
    conn.close()

    with caplog.at_level(logging.WARNING):
        backend = RabbitMQBackend(url)
        try:
            backend.declare([QueueConfig("default")])  # not refused
        finally:
            backend.close()
    warned = [r.getMessage() for r in caplog.records if "predates" in r.getMessage()]
    assert warned, "an exchange without an alternate exchange is reported"
    command = topology.unroutable_policy_command(vhost)
    assert command in warned[0]

    subprocess.run(shlex.split(command), check=True, capture_output=True, timeout=60)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        backend = RabbitMQBackend(url)
        try:
            backend.declare([QueueConfig("default")])
            assert not [r for r in caplog.records if "predates" in r.getMessage()]
            sent = _publish_delayed(url, "nosuch")
            (found,) = _wait_unroutable(backend, 1)
            assert found.envelope.job_id == sent.job_id
        finally:
            backend.close()
