"""``queuey dlq`` at scale (issue 28), on the embedded backend: pages with --offset and
--limit and a footer that says where the next starts, filters by job type and reason,
--all streamed as JSON, show / requeue / delete of one among many, purge, and a
requeue cut short that says what it moved."""

from __future__ import annotations

import json
import sqlite3
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import DeadLetterMoveError
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite import dead

N = 250


def job_type(i: int) -> str:
    return "greet" if i % 5 else "shout"


def reason(i: int) -> str:
    return "fatal error: Disk Full" if i % 7 == 0 else f"max attempts (2) reached: {i}"


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, list[str]]:
    """A config on a SQLite file whose queue alpha has N dead letters; their ids."""
    return filled(tmp_path, N)


def filled(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    """A config on a SQLite file whose queue alpha has ``n`` dead letters; their ids."""
    db = tmp_path / "q.db"
    config = tmp_path / "queuey.toml"
    config.write_text(f'[broker]\nurl = "sqlite:///{db}"\n\n[queues.alpha]\nprefetch = 4\n')
    SqliteBackend(f"sqlite:///{db}").declare([QueueConfig("alpha")])
    ids = [str(uuid.uuid4()) for _ in range(n)]
    with sqlite3.connect(db) as conn:
        for i, job_id in enumerate(ids):
            env = Envelope(
                job_id=job_id,
                job_type=job_type(i),
                queue="alpha",
                attempt=2,
                enqueued_at=int(time.time() * 1000),
                payload={"i": i},
            )
            dead.add(
                conn,
                dead.Dead("alpha", job_id, reason(i), 1, 2, "alpha", True, env.encode()),
            )
    return config, ids


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), "dlq", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def handles(stdout: str) -> list[str]:
    return [d["handle"] for d in json.loads(stdout)]


def test_a_page_is_cut_by_offset_and_limit_and_says_where_the_next_starts(
    project: tuple[Path, list[str]],
) -> None:
    config, ids = project
    code, out, err = run(config, "list", "--offset", "120", "--limit", "50", "--json")
    assert code == 0, err
    assert handles(out) == ids[120:170]
    assert "alpha: 121-170 of 250; next page: --offset 170" in err
    code, out, err = run(config, "list", "--offset", "200", "--limit", "100", "--json")
    assert handles(out) == ids[200:]
    assert "next page" not in err


def test_filters_keep_only_the_job_type_and_reason_asked(
    project: tuple[Path, list[str]],
) -> None:
    config, ids = project
    code, out, _ = run(config, "list", "--job-type", "shout", "--limit", "1000", "--json")
    assert code == 0
    assert handles(out) == [h for i, h in enumerate(ids) if job_type(i) == "shout"]
    code, out, _ = run(config, "list", "-r", "disk full", "-t", "greet", "--all", "--json")
    assert code == 0
    assert handles(out) == [
        h for i, h in enumerate(ids) if job_type(i) == "greet" and "Disk" in reason(i)
    ]


def test_all_streams_every_dead_letter_as_one_json_array(
    project: tuple[Path, list[str]],
) -> None:
    config, ids = project
    code, out, _ = run(config, "list", "--all", "--json")
    assert code == 0
    assert handles(out) == ids
    assert len(out.splitlines()) == N + 2, "one object a line, between [ and ]"


def test_a_page_of_any_size_is_written_as_it_is_read(tmp_path: Path) -> None:
    # Issue 41: a page was built whole, then rendered whole (1.3 GB for 20,000); now
    # each dead letter is written as it is read, and the peak does not grow with --limit.
    config, ids = filled(tmp_path, 3000)
    tracemalloc.start()
    try:
        code, out, err = run(config, "list", "--limit", "3000", "--json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, err
    assert handles(out) == ids
    # The output itself (held by the test's runner) is about 0.6 MB.
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.1f} MB while listing 3,000"


def test_a_long_plain_listing_has_one_header_and_every_line(tmp_path: Path) -> None:
    config, ids = filled(tmp_path, 2500)  # more than one write of ROWS
    code, out, err = run(config, "list", "--limit", "2400", "--offset", "50")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("handle\t"), "one header"
    assert [line.split("\t")[0] for line in lines[1:]] == ids[50:2450]
    assert "alpha: 51-2450 of 2500; next page: --offset 2450" in err


def test_one_among_many_is_shown_requeued_and_deleted(project: tuple[Path, list[str]]) -> None:
    config, ids = project
    code, out, _ = run(config, "show", ids[249])
    assert (code, json.loads(out)["payload"]) == (0, {"i": 249})
    assert run(config, "requeue", ids[100])[1].strip() == "requeued 1"
    assert run(config, "delete", ids[7], ids[8])[1].strip() == "deleted 2"
    code, out, _ = run(config, "list", "--all", "--json")
    assert handles(out) == [h for i, h in enumerate(ids) if i not in (7, 8, 100)]
    code, _, err = run(config, "requeue", ids[7])
    assert code == 2
    assert f"no dead letter with job id {ids[7]}" in err


def test_requeue_all_and_purge_say_how_many(project: tuple[Path, list[str]]) -> None:
    config, _ = project
    assert run(config, "requeue", "--all")[1].strip() == f"requeued {N}"
    assert run(config, "purge", "--queue", "alpha", "--yes")[1].strip() == "purged 0"


def test_an_interrupted_requeue_says_what_it_moved(
    project: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, ids = project
    real = SqliteBackend.requeue_dead_letters

    def cut(self: SqliteBackend, queue: str, job_ids: object = None, **kw: object) -> int:
        raise DeadLetterMoveError(queue, 100, "database is locked")

    monkeypatch.setattr(SqliteBackend, "requeue_dead_letters", cut)
    code, out, err = run(config, "requeue", "--all")
    assert code == 1
    assert out.strip() == "requeued 100"
    assert "interrupted after 100 moved: database is locked" in err
    monkeypatch.setattr(SqliteBackend, "requeue_dead_letters", real)
    assert handles(run(config, "list", "--all", "--json")[1]) == ids, "nothing moved really"
