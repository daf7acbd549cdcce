"""``queuey enqueue`` and unique jobs on the embedded backend: exit 9 for a duplicate
with the holder's id, a --file enqueued twice with --ids-from-lines runs each line once,
and unique jobs with nowhere to keep their keys are refused before anything is sent."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from queuey_core.process.exits import Exit
from tests.cli.conftest import run_with_config


def project(tmp_path: Path, extra: str = "") -> Path:
    db = tmp_path / "q.db"
    path = tmp_path / "queuey.toml"
    path.write_text(
        f'[broker]\nurl = "sqlite:///{db}"\n\n[queues.alpha]\nprefetch = 4\n\n'
        f"[queues.beta]\nprefetch = 1\n{extra}"
    )
    return path


run = run_with_config


def jobs_in(config: Path) -> int:
    conn = sqlite3.connect(config.parent / "q.db")
    try:
        return int(conn.execute("SELECT count(*) FROM queuey_messages").fetchone()[0])
    finally:
        conn.close()


def test_the_same_file_enqueued_twice_with_ids_from_lines_is_enqueued_once(
    tmp_path: Path,
) -> None:
    config = project(tmp_path)
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(json.dumps({"name": f"n{n}"}) + "\n" for n in range(5)))
    code, _, err = run(config, "enqueue", "greet", "--file", str(lines), "--ids-from-lines")
    assert code == Exit.OK, err
    code, _, err = run(config, "enqueue", "greet", "--file", str(lines), "--ids-from-lines")
    assert code == Exit.DUPLICATE, err
    assert "0 confirmed, 5 duplicates" in err
    assert jobs_in(config) == 5, "each line once"


def test_a_duplicate_exits_9_and_prints_the_holders_id(tmp_path: Path) -> None:
    config = project(tmp_path, '\n[unique.greet]\nkey = ["name"]\n')
    code, first, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.OK, err
    code, out, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.DUPLICATE
    assert out.strip() == first.strip(), "the id of the job that holds the key"
    assert err.startswith("error: not enqueued: a duplicate of job"), err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run(config, "enqueue", "greet", '{"name": "bob"}')
    assert code == Exit.OK, err
    assert jobs_in(config) == 2


def test_a_period_that_cannot_work_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = project(tmp_path, '\n[unique.greet]\nperiod = "forever"\n')
    code, _, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.USAGE
    assert "forever" in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("results", ["", '\n[results]\nurl = "memory://"\n'])
def test_unique_jobs_on_rabbitmq_without_a_store_are_refused_saying_what_to_add(
    tmp_path: Path, results: str
) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(
        '[broker]\nurl = "amqp://guest:guest@127.0.0.1:1/%2F"\nconnect_timeout = "1s"\n\n'
        '[queues.alpha]\nprefetch = 4\n\n[unique.greet]\nkey = ["name"]\n' + results
    )
    code, _, err = run(path, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.USAGE, err
    assert "[results] url" in err


def test_a_key_naming_no_field_of_the_job_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = project(tmp_path, '\n[unique.greet]\nkey = ["nope"]\n')
    code, _, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.USAGE
    assert "'nope'" in err
    assert not (tmp_path / "q.db").exists(), "refused before the file was opened"
    code, _, err = run(config, "enqueue", "greet", "--no-validate", "--queue", "alpha", "{}")
    assert code == Exit.USAGE, err
    assert "'nope'" in err
    assert jobs_in(config) == 0


def test_a_store_out_of_reach_fails_closed_one_line_nothing_sent(tmp_path: Path) -> None:
    config = project(tmp_path, '\n[unique.greet]\nkey = ["name"]\n')
    code, _, err = run(config, "enqueue", "greet", '{"name": "ada"}')
    assert code == Exit.OK, err
    conn = sqlite3.connect(config.parent / "q.db", isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # another process holds the file's write lock
        path = config.parent / "queuey.toml"
        path.write_text(path.read_text().replace("q.db", "q.db?busy_timeout=0.2"))
        code, _, err = run(config, "enqueue", "greet", '{"name": "bob"}')
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert code == Exit.FAILURE
    assert len(err.strip().splitlines()) == 1, err
    assert jobs_in(config) == 1, "the unique job was not enqueued unguarded"


def test_firing_a_schedule_whose_job_holds_its_key_exits_9(tmp_path: Path) -> None:
    config = project(
        tmp_path,
        '\n[unique.greet]\nkey = ["name"]\n\n'
        '[schedules.hello]\njob = "greet"\npayload = { name = "cron" }\nevery = "1h"\n',
    )
    code, first, err = run(config, "schedules", "fire", "hello")
    assert code == Exit.OK, err
    code, out, err = run(config, "schedules", "fire", "hello")
    assert code == Exit.DUPLICATE, err
    assert out.strip() == first.strip()
    assert "not fired: a duplicate of job" in err
    assert jobs_in(config) == 1
