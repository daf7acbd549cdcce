"""A job enqueued from the command line is known to every command that takes a job id:
``enqueue --file`` records its jobs as queued as the one-job ``enqueue`` does, and an id
given as a key (``--job-id order-42``) is taken by ``job``, ``cancel`` and ``dlq
show|requeue|delete`` as ``enqueue`` took it. On the embedded backend, whose job store is the
broker's own file, in process."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from queuey_core import QueueConfig
from queuey_core import job_id_for
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.process.exits import Exit
from tests.cli.conftest import run_with_config
from tests.support import dead_letter_one


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A config on a SQLite file (its job store: the same file)."""
    db = tmp_path / "q.db"
    path = tmp_path / "queuey.toml"
    path.write_text(f'[broker]\nurl = "sqlite:///{db}"\n\n[queues.alpha]\nprefetch = 4\n')
    return path


run = run_with_config


def dead_letter_first(config: Path) -> None:
    """The first job of queue alpha dead-lettered, as a worker would."""
    broker = SqliteBackend(f"sqlite:///{config.parent / 'q.db'}")
    try:
        dead_letter_one(broker, QueueConfig("alpha", prefetch=4), "boom")
    finally:
        broker.close()


def state_of(config: Path, job_id: str) -> str:
    code, out, err = run(config, "job", job_id, "--json")
    assert code == 0, err
    return str(json.loads(out)["state"])


def test_enqueue_file_records_every_job_as_queued(config: Path, tmp_path: Path) -> None:
    lines = tmp_path / "jobs.jsonl"
    keyed = str(uuid.uuid4())
    lines.write_text(
        "\n".join(
            [json.dumps({"job_id": keyed, "name": "a"})]
            + [json.dumps({"name": f"n{n}"}) for n in range(4)]
        )
        + "\n"
    )

    code, _, err = run(config, "enqueue", "greet", "--file", str(lines), "--ids-from-lines")
    assert code == 0, err

    assert state_of(config, keyed) == "queued", "a line's own job id is recorded"
    code, out, err = run(config, "jobs", "--state", "queued", "--json")
    assert code == 0, err
    assert len(json.loads(out)["jobs"]) == 5, "every line of the file is recorded"
    code, out, err = run(config, "cancel", keyed)
    assert code == 0, err
    assert out.strip() == f"{keyed}: cancelled"


def test_a_key_given_to_enqueue_is_taken_by_job_and_cancel(config: Path) -> None:
    code, out, err = run(config, "enqueue", "greet", '{"name": "ada"}', "--job-id", "order-42")
    assert code == 0, err
    assert out.strip() == str(job_id_for("order-42"))

    assert state_of(config, "order-42") == "queued"
    code, out, err = run(config, "cancel", "order-42")
    assert code == 0, err
    assert out.strip() == f"{job_id_for('order-42')}: cancelled"
    code, _, err = run(config, "job", "   ")
    assert code == Exit.USAGE, "an empty key is no job id"
    assert "job id" in err


def test_a_key_given_to_enqueue_is_taken_by_dlq_show_requeue_and_delete(config: Path) -> None:
    code, _, err = run(config, "enqueue", "greet", '{"name": "ada"}', "--job-id", "order-7")
    assert code == 0, err
    dead_letter_first(config)

    code, out, err = run(config, "dlq", "show", "order-7")
    assert code == 0, err
    assert json.loads(out)["job_id"] == str(job_id_for("order-7"))
    code, out, err = run(config, "dlq", "requeue", "order-7")
    assert code == 0, err
    assert out.strip() == "requeued 1"
    dead_letter_first(config)
    code, out, err = run(config, "dlq", "delete", "order-7")
    assert code == 0, err
    assert out.strip() == "deleted 1"
    code, _, err = run(config, "dlq", "delete", "order-7")
    assert code == Exit.USAGE
    assert "no dead letter with job id or handle order-7" in err, "named as typed"
