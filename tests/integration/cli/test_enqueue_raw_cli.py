"""``queuey enqueue --no-validate --queue Q`` against RabbitMQ: a job type this machine
has no model for is published as an envelope, confirmed, and printed."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import Envelope
from tests import harness
from tests.conftest import require_broker
from tests.integration.broker import delete_queues

pytestmark = pytest.mark.integration


@pytest.fixture
def queue() -> Iterator[str]:
    require_broker()
    name = f"raw.{uuid.uuid4().hex[:8]}"
    yield name
    delete_queues(name)


def test_no_validate_publishes_a_job_type_without_its_model(queue: str, tmp_path: Path) -> None:
    config = tmp_path / "queuey.toml"
    config.write_text(
        f'[broker]\nurl = "{harness.AMQP_URL}"\n\n[queues."{queue}"]\nmax_priority = 5\n'
    )
    before = int(time.time() * 1000)
    result = CliRunner().invoke(
        app,
        [
            "--config",
            str(config),
            "enqueue",
            "--queue",
            queue,
            "--no-validate",
            "--priority",
            "4",
            "--job-id",
            "order-17",
            "billing.invoice",
            '{"order": 17, "lines": [{"sku": "a", "qty": 2}]}',
        ],
    )
    assert result.exit_code == 0, result.stderr
    job_id = result.stdout.strip()

    conn = pika.BlockingConnection(pika.URLParameters(harness.AMQP_URL))
    try:
        method, props, body = conn.channel().basic_get(queue, auto_ack=True)
    finally:
        conn.close()
    assert method is not None, "the job is on its queue"
    env = Envelope.decode(body)
    assert str(env.job_id) == job_id
    assert (env.job_type, env.queue, env.priority, env.attempt) == ("billing.invoice", queue, 4, 1)
    assert env.payload == {"order": 17, "lines": [{"sku": "a", "qty": 2}]}
    assert env.enqueued_at >= before
    assert json.loads(body)["v"] == 1
    assert (props.priority, props.message_id, props.type) == (4, job_id, "billing.invoice")
