"""``queuey unique list`` and ``queuey unique release``: the keys held, and the way out
when a key is held by a job that will never let it go (docs/flow-control.md, "Faults"),
on the embedded file and on RabbitMQ's job store, which they read without the broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from queuey_core.flow.unique_keys import Claim
from queuey_core.flow.unique_store import open_unique_keys
from queuey_core.process.exits import Exit
from tests.cli.conftest import run_with_config as run

UNIQUE_GREET = '\n[unique.greet]\nkey = ["name"]\n'


def on_file(tmp_path: Path) -> Path:
    config = tmp_path / "queuey.toml"
    config.write_text(
        f'[broker]\nurl = "sqlite:///{tmp_path}/q.db"\n\n[queues.alpha]\n[queues.beta]\n'
        + UNIQUE_GREET
    )
    return config


def on_rabbitmq_with_a_store(tmp_path: Path) -> Path:
    """Nothing listens on port 1: the commands must not need the broker."""
    config = tmp_path / "queuey.toml"
    config.write_text(
        '[broker]\nurl = "amqp://guest:guest@127.0.0.1:1/%2F"\nconnect_timeout = "1s"\n\n'
        f'[results]\nurl = "sqlite:///{tmp_path}/store.db"\n\n[queues.alpha]\n' + UNIQUE_GREET
    )
    return config


def hold_for_a_gone_job(url: str, key: str = "k" * 64) -> str:
    """A key held for good by a job that is nowhere: what an enqueue cut short between
    its publish and its outcome leaves on RabbitMQ, or a worker that could not reach the
    store to let go."""
    gone = str(uuid.uuid4())
    table = open_unique_keys(url)
    try:
        claim = Claim(key=key, job_id=gone, expires_at=None)
        assert table.claim([claim], now_ms=0) == {}
        table.keep([claim], now_ms=0)
    finally:
        table.close()
    return gone


def listed(config: Path, *args: str) -> list[dict[str, str]]:
    code, out, err = run(config, "unique", "list", "--json", *args)
    assert code == Exit.OK, err
    keys: list[dict[str, str]] = json.loads(out)["keys"]
    return keys


def test_a_queued_jobs_key_is_listed_and_not_let_go_without_force(tmp_path: Path) -> None:
    config = on_file(tmp_path)
    code, out, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.OK, err
    job_id = out.strip()

    [row] = listed(config)
    assert row["job_id"] == job_id
    assert row["held_until"] == "its job starts or ends"
    code, out, err = run(config, "unique", "list")
    assert out.splitlines() == [
        "key\tjob_id\theld_until",
        f"{row['key']}\t{job_id}\t{row['held_until']}",
    ]

    code, out, err = run(config, "unique", "release", job_id)
    assert code == Exit.FAILURE
    assert err.startswith(f"error: job {job_id} is queued (the job store says so)"), err
    assert len(err.strip().splitlines()) == 1
    assert len(listed(config)) == 1, "still held"

    code, out, err = run(config, "unique", "release", job_id, "--force")
    assert (code, out.strip()) == (
        Exit.OK,
        f"let go of 1 key of job {job_id}: its key can be enqueued",
    )
    assert listed(config) == []
    code, _, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.OK, "enqueued again: the operator chose to"


def test_a_finished_jobs_key_needs_no_force(tmp_path: Path) -> None:
    config = on_file(tmp_path)
    code, out, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    job_id = out.strip()
    [held] = listed(config)
    code, _, err = run(config, "cancel", job_id)
    assert code == Exit.OK, err
    # A cancelled job's key is let go when a worker meets it; none runs here.
    code, out, err = run(config, "unique", "release", job_id, "--json")
    assert code == Exit.OK, err
    assert json.loads(out) == {"job_id": job_id, "released": [held["key"]]}


def test_a_gone_jobs_key_on_the_file_is_let_go_and_the_next_enqueue_passes(
    tmp_path: Path,
) -> None:
    config = on_file(tmp_path)
    code, first, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    keys = listed(config)
    [held] = keys
    gone = hold_for_a_gone_job(f"sqlite:///{tmp_path}/q.db", key=held["key"] + "-other")
    assert {k["job_id"] for k in listed(config)} == {first.strip(), gone}
    assert [k["key"] for k in listed(config, "--job", gone)] == [held["key"] + "-other"]

    code, out, err = run(config, "job", gone)
    assert code == Exit.NO_SUCH_JOB, "the job the key names is nowhere"
    code, out, err = run(config, "unique", "release", gone)
    assert code == Exit.OK, err
    assert out.strip() == f"let go of 1 key of job {gone}: its key can be enqueued"
    assert [k["job_id"] for k in listed(config)] == [first.strip()], "only that job's"


def test_on_rabbitmq_the_store_is_read_and_the_broker_never_asked(tmp_path: Path) -> None:
    config = on_rabbitmq_with_a_store(tmp_path)
    url = f"sqlite:///{tmp_path}/store.db"
    gone = hold_for_a_gone_job(url)
    [row] = listed(config)
    assert (row["job_id"], row["key"]) == (gone, "k" * 64)

    code, out, err = run(config, "unique", "release", gone)
    assert code == Exit.OK, err
    assert listed(config) == []
    code, out, err = run(config, "unique", "release", gone)
    assert (code, out.strip()) == (Exit.OK, f"job {gone} holds no unique key")


def test_a_long_listing_says_there_is_more(tmp_path: Path) -> None:
    config = on_rabbitmq_with_a_store(tmp_path)
    url = f"sqlite:///{tmp_path}/store.db"
    for n in range(3):
        hold_for_a_gone_job(url, key=f"key-{n}")
    code, out, err = run(config, "unique", "list", "--limit", "2")
    assert code == Exit.OK, err
    assert [line.split("\t")[0] for line in out.splitlines()] == ["key", "key-0", "key-1"]
    assert err.strip() == "the first 2 keys: --limit for more"
    code, out, _ = run(config, "unique", "list", "--json", "--limit", "2")
    assert json.loads(out)["more"] is True


def test_without_a_place_for_keys_and_with_bad_input_one_line_each(tmp_path: Path) -> None:
    config = tmp_path / "queuey.toml"
    config.write_text('[broker]\nurl = "amqp://guest:guest@127.0.0.1:1/%2F"\n[queues.alpha]\n')
    for args in (["list"], ["release", str(uuid.uuid4())]):
        code, _, err = run(config, "unique", *args)
        assert code == Exit.USAGE
        assert err.startswith("error: unique jobs need a place to keep their keys"), err
        assert len(err.strip().splitlines()) == 1
    file_config = on_file(tmp_path)
    for args in (["list", "--limit", "0"], ["release"], ["list", "--job", " "]):
        code, _, err = run(file_config, "unique", *args)
        assert code == Exit.USAGE, (args, err)
        assert len(err.strip().splitlines()) == 1, err
