"""``queuey dlq`` on RabbitMQ with a job store (issue 28): what ``<queue>.dlq`` holds is
imported first (``dlq import`` alone says how many), then pages, show, requeue, delete,
``--all --json`` and purge run on the table; without a store ``dlq import`` refuses in
one line, and a large dead-letter queue gets the hint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from typer.testing import CliRunner

import queuey_cli.dlq_import
from queuey_cli.main import app
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.harness import AMQP_URL
from tests.integration.backends.rabbitmq.test_dead_letter_faults import books
from tests.integration.backends.rabbitmq.test_dead_letter_faults import fill

pytestmark = pytest.mark.integration

N = 30


class Broker:
    """What :func:`fill` and :func:`books` need of a node: the test vhost's URL."""

    def url(self) -> str:
        return AMQP_URL


@pytest.fixture
def queue() -> Iterator[str]:
    name = f"cli_store_{uuid.uuid4().hex[:8]}"
    backend = RabbitMQBackend(AMQP_URL)
    backend.declare([QueueConfig(name)])
    backend.close()
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    ch.queue_delete(name)
    ch.queue_delete(f"{name}.dlq")
    conn.close()


def config(tmp_path: Path, queue: str, *, store: bool) -> Path:
    path = tmp_path / f"queuey-{store}.toml"
    results = f'[results]\nurl = "sqlite:///{tmp_path / "store.db"}"\n\n' if store else ""
    path.write_text(f'[broker]\nurl = "{AMQP_URL}"\n\n{results}[queues.{queue}]\nprefetch = 4\n')
    return path


def run(path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(path), "dlq", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_every_command_runs_on_the_table_once_the_queue_is_imported(
    tmp_path: Path, queue: str
) -> None:
    ids = fill(Broker(), queue, N)  # type: ignore[arg-type]
    path = config(tmp_path, queue, store=True)
    assert run(path, "import")[1].strip() == f"imported {N}"
    assert books(Broker(), queue) == ([], []), "<queue>.dlq is empty"  # type: ignore[arg-type]
    code, out, err = run(path, "list", "--offset", "10", "--limit", "5", "--json")
    assert code == 0, err
    assert [d["handle"] for d in json.loads(out)] == ids[10:15]
    assert f"{queue}: 11-15 of {N}; next page: --offset 15" in err
    code, out, _ = run(path, "show", ids[20])
    assert json.loads(out)["handle"] == ids[20]
    assert run(path, "requeue", ids[20])[1].strip() == "requeued 1"
    assert run(path, "delete", ids[21])[1].strip() == "deleted 1"
    code, out, _ = run(path, "list", "--all", "--json")
    assert [d["handle"] for d in json.loads(out)] == ids[:20] + ids[22:]
    assert run(path, "purge", "--queue", queue, "--yes")[1].strip() == f"purged {N - 2}"
    assert books(Broker(), queue) == ([ids[20]], [])  # type: ignore[arg-type]


def test_without_a_store_import_refuses_and_a_large_queue_gets_the_hint(
    tmp_path: Path, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(Broker(), queue, N)  # type: ignore[arg-type]
    path = config(tmp_path, queue, store=False)
    code, _, err = run(path, "import")
    assert code != 0
    assert "no job store" in err
    monkeypatch.setattr(queuey_cli.dlq_import, "HINT_OVER", N - 1)
    code, _, err = run(path, "list", "--limit", "1")
    assert code == 0
    assert f"{queue}.dlq holds {N}" in err
    assert "[results] url" in err


def test_import_with_a_store_out_of_reach_says_so(tmp_path: Path, queue: str) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(
        f'[broker]\nurl = "{AMQP_URL}"\n\n'
        '[results]\nurl = "postgresql://postgres@127.0.0.1:1/test"\n\n'
        f"[queues.{queue}]\nprefetch = 4\n"
    )
    code, out, err = run(path, "import")  # <queue>.dlq is empty: nothing to move
    assert code != 0, out
    assert "imported" not in out
    assert "job store" in err.lower(), err
    assert len(err.strip().splitlines()) == 1, err
